"""The local Snowflake loads staged CSV files as Snowflake does, over its real socket: a COPY INTO with a
column list of any width (DuckDB, under fakesnow, names a wide file's columns ``column00 .. column10``)."""

from __future__ import annotations

import pytest

from dw_local.world import LocalWorld


@pytest.fixture(scope="module")
def snowflake(tmp_path_factory):
    with LocalWorld(tmp_path_factory.mktemp("sf") / "local", services=("snowflake",)) as lw:
        yield lw.snowflake


@pytest.mark.parametrize("width", [3, 10, 11, 14])
def test_copy_into_with_a_column_list_loads_every_column(snowflake, tmp_path, width):
    columns = [f"C{i}" for i in range(width)]
    rows = [[r * 100 + i for i in range(width)] for r in range(3)]
    path = tmp_path / f"wide_{width}.csv"
    path.write_text("".join(",".join(map(str, row)) + "\n" for row in rows))
    with snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute("CREATE SCHEMA IF NOT EXISTS RAW")
        ddl = ", ".join(f'"{c}" NUMBER(38,0)' for c in columns)
        cur.execute(f'CREATE OR REPLACE TABLE RAW."WIDE_{width}" ({ddl})')
        cur.execute('CREATE TEMPORARY STAGE IF NOT EXISTS RAW."LOAD"')
        cur.execute(f'PUT file://{path} @RAW."LOAD" AUTO_COMPRESS=FALSE OVERWRITE=TRUE')
        listed = ", ".join(f'"{c}"' for c in columns)
        cur.execute(
            f'COPY INTO RAW."WIDE_{width}" ({listed}) FROM @RAW."LOAD"/{path.name} '
            "FILE_FORMAT=(TYPE=CSV) PURGE=TRUE FORCE=TRUE"
        )
        cur.execute(f'SELECT {listed} FROM RAW."WIDE_{width}" ORDER BY "C0"')
        assert [list(r) for r in cur.fetchall()] == rows
