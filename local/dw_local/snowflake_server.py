"""Local Snowflake: fakesnow's Snowflake-protocol HTTP server, persisted on disk, as strict as Snowflake
where the product could rely on the difference (``snowflake_rules.py``, ``snowflake_auth.py``).

Run as ``python -m dw_local.snowflake_server --port 8765 --data-dir .dw/local/snowflake``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from pathlib import Path


def _fail_fast_on_unsupported_sql() -> None:
    """fakesnow answers SQL it cannot run (DuckDB errors, unsupported features) with HTTP 500, which the
    connector retries until its network timeout. Snowflake answers a failing statement at once with
    ``success: false``; do the same so a bad query errors in milliseconds with its message."""
    import fakesnow.server
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    original = fakesnow.server.query_request

    async def query_request(request):
        response = await original(request)
        if response.status_code != 500:
            return response
        body = json.loads(response.body)
        return JSONResponse(
            {
                "data": {"errorCode": body.get("code", "261000"), "sqlState": "XX000"},
                "code": body.get("code", "261000"),
                "message": body.get("message", "unsupported statement"),
                "success": False,
            }
        )

    routes = fakesnow.server.app.router.routes
    for i, route in enumerate(routes):
        if isinstance(route, Route) and route.endpoint is original:
            routes[i] = Route(route.path, query_request, methods=list(route.methods or ["POST"]))


def _csv_columns_as_duckdb_names_them() -> None:
    """``COPY INTO t (c1, ..., cn) FROM @stage`` reads the CSV with DuckDB's ``read_csv(header=false)`` and
    selects ``column0 .. column{n-1}``; DuckDB pads those names to the width of the largest index
    (``column00 .. column10`` for 11 columns), so a column list of more than ten columns failed with
    ``Referenced column "column0" not found``. Select the names DuckDB gives."""
    import fakesnow.copy_into
    from sqlglot import exp

    original = fakesnow.copy_into._inserts
    positional = re.compile(r"^column\d+$")

    def _inserts(expr, params, urls, parquet_info=None):
        inserts = original(expr, params, urls, parquet_info)
        for insert in inserts:
            select = insert.expression
            columns = select.expressions
            if columns and all(isinstance(c, exp.Column) and positional.match(c.name) for c in columns):
                width = len(str(len(columns) - 1))
                select.set("expressions", [exp.column(f"column{i:0{width}d}") for i in range(len(columns))])
        return inserts

    fakesnow.copy_into._inserts = _inserts


def _identify(app, data_dir: Path) -> None:
    """``GET /_local/health`` answers this server's data directory: a world waiting for its Snowflake knows
    it from another world's server that took the port it was given (free ports are picked, then bound)."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def health(request):
        return JSONResponse({"data_dir": str(data_dir.resolve())})

    app.router.routes.insert(0, Route("/_local/health", health, methods=["GET"]))


def serve(port: int, data_dir: Path, host: str = "127.0.0.1") -> None:
    import fakesnow.server
    import uvicorn
    from fakesnow.instance import FakeSnow

    data_dir.mkdir(parents=True, exist_ok=True)
    from dw_local.snowflake_stages import keep_stages_in

    keep_stages_in(data_dir / "stages")
    # fakesnow's server ignores its -d flag; persistence is this module global (pinned fakesnow==0.12.1).
    fakesnow.server.shared_fs = FakeSnow(db_path=str(data_dir))
    # A commit need not wait for the disk (about fifty a night): it outlives a killed server all the same;
    # only a crash of the machine could lose it, which a local world can afford.
    fakesnow.server.shared_fs.duck_conn.execute("SET GLOBAL fsync_mode = 'NONE'")
    # One thread per local Snowflake: its statements are small, and a second thread of DuckDB's only costs
    # CPU on a machine where the world's other servers, the daemon and the tests share the cores (8
    # distributor nights: 7.1 -> 6.4 s of the server's CPU, no slower; bench_seeding.py).
    fakesnow.server.shared_fs.duck_conn.execute("SET GLOBAL threads = 1")
    _fail_fast_on_unsupported_sql()
    _csv_columns_as_duckdb_names_them()
    if os.environ.get("DW_LOCAL_SNOWFLAKE_REUSE", "1") != "0":  # 0: fakesnow's own path (benchmarks)
        from dw_local import snowflake_statements

        snowflake_statements.install()
    from dw_local import account_usage, snowflake_auth, snowflake_rules

    # Strict where Snowflake is (snowflake_rules.py), signing in as Snowflake does (snowflake_auth.py); the
    # account usage wraps both, so a refused statement is in QUERY_HISTORY as it is in Snowflake's.
    snowflake_rules.install(fakesnow.server.app, fakesnow.server.shared_fs)
    snowflake_auth.install(fakesnow.server.app, data_dir)
    account_usage.install(fakesnow.server.app, fakesnow.server.shared_fs, data_dir)
    logging.getLogger("fakesnow.server").setLevel(logging.WARNING)
    _identify(fakesnow.server.app, data_dir)
    # The server keeps every session: loopback only.
    uvicorn.run(fakesnow.server.app, host=host, port=port, log_level="warning", access_log=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.data_dir)


if __name__ == "__main__":
    main()
