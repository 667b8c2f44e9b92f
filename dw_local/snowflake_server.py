"""Local Snowflake: fakesnow's Snowflake-protocol HTTP server, persisted on disk.

Run as ``python -m dw_local.snowflake_server --port 8765 --data-dir .dw/local/snowflake``.
"""

from __future__ import annotations

import argparse
import json
import logging
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


def serve(port: int, data_dir: Path, host: str = "127.0.0.1") -> None:
    import fakesnow.server
    import uvicorn
    from fakesnow.instance import FakeSnow

    data_dir.mkdir(parents=True, exist_ok=True)
    # fakesnow's server ignores its -d flag; persistence is this module global (pinned fakesnow==0.12.1).
    fakesnow.server.shared_fs = FakeSnow(db_path=str(data_dir))
    _fail_fast_on_unsupported_sql()
    logging.getLogger("fakesnow.server").setLevel(logging.WARNING)
    # The server binds with no auth and keeps every session: loopback only.
    uvicorn.run(fakesnow.server.app, host=host, port=port, log_level="warning", access_log=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.data_dir)


if __name__ == "__main__":
    main()
