"""The local Snowflake loads staged CSV files as Snowflake does, over its real socket: a COPY INTO with a
column list of any width (DuckDB, under fakesnow, names a wide file's columns ``column00 .. column10``)."""

from __future__ import annotations

import os

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


def test_each_world_keeps_its_stages_with_its_data(tmp_path_factory, tmp_path):
    """Two worlds' Snowflakes served at once from one fork server, same database, same stage, same file name:
    each lists and loads only its own file, kept under its own data folder. Before, every server a fork
    server forked shared the folder fakesnow's import made (``fakesnow_bucket_*``), so the second PUT
    replaced the first world's file."""
    roots = [tmp_path_factory.mktemp(f"stages_{w}") / "local" for w in "ab"]
    with (
        LocalWorld(roots[0], services=("snowflake",)) as a,
        LocalWorld(roots[1], services=("snowflake",)) as b,
    ):
        for lw, value in ((a, 1), (b, 2)):
            folder = tmp_path / str(value)
            folder.mkdir()
            (folder / "load.csv").write_text(f"{value}\n")
            with lw.snowflake.connect() as conn:
                cur = conn.cursor()
                cur.execute("CREATE SCHEMA IF NOT EXISTS RAW")
                cur.execute('CREATE STAGE IF NOT EXISTS RAW."LOAD"')
                cur.execute(f'PUT file://{folder / "load.csv"} @RAW."LOAD" AUTO_COMPRESS=FALSE')
        for lw, root, value in ((a, roots[0], 1), (b, roots[1], 2)):
            with lw.snowflake.connect() as conn:
                cur = conn.cursor()
                cur.execute('LIST @RAW."LOAD"')
                assert [row[0] for row in cur.fetchall()] == ["load/load.csv"]
                cur.execute('CREATE OR REPLACE TABLE RAW."T" ("V" NUMBER(38,0))')
                cur.execute('COPY INTO RAW."T" FROM @RAW."LOAD"/load.csv FILE_FORMAT=(TYPE=CSV)')
                cur.execute('SELECT "V" FROM RAW."T"')
                assert cur.fetchall() == [(value,)]
            (kept,) = (root / "snowflake" / "stages").rglob("load.csv")
            assert kept.read_text() == f"{value}\n"


def test_a_process_that_imports_fakesnow_leaves_no_folder_of_it(tmp_path):
    """fakesnow makes a folder for stages when imported and never removes it: one was left in the temporary
    folder by every test worker, fork server and command (962 after a day). Pointing the stages elsewhere
    removes it (dw_local/snowflake_stages.py); a folder with another process's files is left alone."""
    import subprocess
    import sys

    code = (
        "import tempfile, pathlib; from fakesnow.transforms import stage; "
        "made = pathlib.Path(stage.LOCAL_BUCKET_PATH); assert made.is_dir(); "
        "other = pathlib.Path(tempfile.mkdtemp(prefix='fakesnow_bucket_')); (other / 'f').write_text('x'); "
        "from dw_local.snowflake_stages import keep_stages_in; keep_stages_in(pathlib.Path(sys.argv[1])); "
        "assert stage.LOCAL_BUCKET_PATH == sys.argv[1]; "
        "stage.LOCAL_BUCKET_PATH = str(other); keep_stages_in(pathlib.Path(sys.argv[1])); "
        "print(made.exists(), other.exists()); import shutil; shutil.rmtree(other)"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import sys; " + code, str(tmp_path / "stages")],
        capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["False", "True"]
    assert not list(tmp_path.glob("fakesnow_bucket_*"))
