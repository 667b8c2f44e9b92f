"""Diagnosis time on the local world: the reference night, from incident to diagnosis, blast radius and
Slack messages.

Clones the seeded distributor world (``local/dw_local/seeding.py``), plays night 60 and the reference night, lets
one in-process daemon tick report the run and run the checks (which open the incident), then times the
incident sensor's tick and the ``diagnose_incident`` run it launches (lineage walk, join measurement in the
warehouse, blast radius, Slack through the outbox). Run:

    .venv/bin/python benchmarks/bench_diagnosis.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))


def main() -> None:
    from dw_dagster.incidents.events import latest_diagnosis
    from dw_dagster.incidents.store import IncidentStore
    from dw_dagster.warehouse.ops import OpsSchema
    from dw_local.daemon import LocalDaemon
    from dw_local.seeding import clone_world, seeded_template
    from dw_local.world import LocalWorld
    from dw_local.worlds.distributor.generator import DistributorWorld

    with tempfile.TemporaryDirectory() as tmp:
        root = clone_world(seeded_template(CACHE), Path(tmp) / "local")
        with LocalWorld(root) as lw:
            daemon = LocalDaemon(lw)
            world = DistributorWorld()
            world.play_night(lw.snowflake, lw.coalesce_client(), 60)
            daemon.tick()
            world.play_reference_night(lw.snowflake, lw.coalesce_client())
            t0 = time.perf_counter()
            outcome = daemon._tick_run_sensor()
            checks = time.perf_counter() - t0
            t0 = time.perf_counter()
            results = daemon._tick_incident_sensor()
            diagnosis_time = time.perf_counter() - t0
            store = IncidentStore(daemon.defs.resources["snowflake"], OpsSchema("DW_PROD", "DW_OPS"))
            (incident,) = store.list(status="open")
            diagnosis, radius = latest_diagnosis(store, incident.incident_id)
            print(f"checks run (sensor tick + {len(outcome.checks)} checks, incident opened): {checks:.2f} s")
            print(
                f"incident tick + diagnosis run ({len(results)} run, success={all(r.success for r in results)}): "
                f"{diagnosis_time:.2f} s"
            )
            print(
                f"  -> {diagnosis.classification.value}: {diagnosis.keys[0].column}={diagnosis.keys[0].value}, "
                f"{diagnosis.keys[0].units:,.0f} units over {diagnosis.keys[0].distinct_items:,} items; "
                f"blast radius {len(radius.assets)} assets, {len(radius.newly_flagged)} newly flagged"
            )


if __name__ == "__main__":
    main()
