"""The code location bench_sensor_tick.py's daemon tick loads in a gRPC code server: the same definitions
as its in-process tick, over the world it started (its URL and port in the environment)."""

import os

from bench_sensor_tick import bench_definitions

defs = bench_definitions(os.environ["BENCH_TICK_COALESCE_URL"], int(os.environ["BENCH_TICK_SNOWFLAKE_PORT"]))[
    2
]
