"""Run by Python at start-up in every process started with ``dw_local.world_clock.clock_env``: the process
reads the local world's clock (``DW_WORLD_CLOCK_FILE``) instead of today's (``dw_local/world_clock.py``)."""

import os

if os.environ.get("DW_WORLD_CLOCK_FILE"):
    from dw_local.world_clock import follow_from_env

    follow_from_env()
