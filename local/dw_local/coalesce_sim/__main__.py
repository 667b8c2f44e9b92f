"""``python -m dw_local.coalesce_sim``: serve a Coalesce project file on a loopback port."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dw_local.coalesce_sim", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--project", type=Path, required=True, help="the project file (docs/project-file.md)")
    parser.add_argument("--data-dir", type=Path, required=True, help="where runs and edits are kept")
    parser.add_argument("--snowflake-host", default="127.0.0.1")
    parser.add_argument("--snowflake-port", type=int, required=True)
    parser.add_argument("--token", required=True, help="the bearer token every request must carry")
    parser.add_argument(
        "--scheduler", action="store_true", help="start scheduled Jobs on the simulator clock"
    )
    parser.add_argument(
        "--jobs-collection",
        action="store_true",
        help="serve GET /api/v1/environments/{id}/jobs (no public evidence the real API has it)",
    )
    args = parser.parse_args(argv)

    import uvicorn

    from dw_local.coalesce_sim.app import create_app
    from dw_local.coalesce_sim.project import ProjectFileError, load_project
    from dw_local.coalesce_sim.runner import SnowflakeAddress
    from dw_local.coalesce_sim.simulator import CoalesceSimulator

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("snowflake.connector").setLevel(logging.WARNING)
    try:
        project = load_project(args.project)
    except ProjectFileError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    sim = CoalesceSimulator(
        project,
        args.data_dir,
        SnowflakeAddress(args.snowflake_host, args.snowflake_port),
        scheduler=args.scheduler,
        jobs_collection=args.jobs_collection,
    )
    # No auth beyond the token and a port anyone on the machine can reach: loopback only.
    uvicorn.run(create_app(sim, args.token), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
