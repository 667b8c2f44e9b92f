"""Local Snowflake: fakesnow's Snowflake-protocol HTTP server, persisted on disk.

Run as ``python -m dw_local.snowflake_server --port 8765 --data-dir .dw/local/snowflake``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

# The connector otherwise probes cloud metadata endpoints and stalls about one connect in 18.
os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")


def serve(port: int, data_dir: Path, host: str = "127.0.0.1") -> None:
    import fakesnow.server
    import uvicorn
    from fakesnow.instance import FakeSnow

    data_dir.mkdir(parents=True, exist_ok=True)
    # fakesnow's server ignores its -d flag; persistence is this module global (pinned fakesnow==0.12.1).
    fakesnow.server.shared_fs = FakeSnow(db_path=str(data_dir))
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
