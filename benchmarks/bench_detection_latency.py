"""Time from a Coalesce run ending to its checks' results (and the incident) being recorded, through the real
Dagster daemon, over several nights (goal: median at most 15 s, worst at most 30 s).

On a private clone of the seeded distributor world (``seeded_template`` + ``clone_world``; the template is
built once per content hash under ``.dw/cache``, about 3 minutes the first time) it starts the local
world (Snowflake, Coalesce simulator, Slack stand-in on free loopback ports), writes the Coalesce state file
(``refresh_coalesce_state``, into the instance), and starts ``dagster-daemon run -w workspace.yaml`` as a subprocess (it spawns the
code server and the run workers) with ``DAGSTER_HOME`` in the temp dir (the repo's ``dagster.yaml`` copied
there) and the world's environment (``lw.env()``). The run sensor keeps its defaults (RUNNING, 5 s): the
benchmark waits for its first tick, which sets the cursor at the present.

Then it plays ``--nights`` - 1 ordinary nights (``DistributorWorld().play_night``), each timed to its checks
run's last step, then the reference night (``play_reference_night``), timed to its incident; it prints the
median and the worst. It takes the Coalesce run's end from the
simulator (``client.get_run(run_id).run_end_time``, mapped from the simulator clock to wall time) and polls
``IncidentStore(...).list()`` until the incident appears. It prints the latency and the timeline Dagster
records: the sensor tick that reported the run, the checks run's queue, launch and start, each step, the
incident's ``OPENED_AT``. Every process it started (the world's servers; the daemon's process group: code
server and run workers) is stopped on the way out, even on error. Nothing is asserted. Run:

    .venv/bin/python benchmarks/bench_detection_latency.py [--nights 5] [--timeout 300]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import datetime
from pathlib import Path

import httpx

os.environ.setdefault("SNOWFLAKE_DISABLE_PLATFORM_DETECTION", "true")
warnings.filterwarnings("ignore")
logging.getLogger("sqlalchemy.pool").setLevel(logging.CRITICAL)

import dagster as dg  # noqa: E402
from dagster._core.scheduler.instigation import InstigatorType  # noqa: E402

from dw_dagster.app.project import refresh_coalesce_state  # noqa: E402
from dw_dagster.incidents.store import IncidentStore  # noqa: E402
from dw_dagster.warehouse.ops import OpsSchema  # noqa: E402
from dw_dagster.warehouse.resources import warehouse_from_env  # noqa: E402
from dw_local.seeding import clone_world, seeded_template  # noqa: E402
from dw_local.world import LOCAL_COALESCE_TOKEN, LOCAL_DATABASE, LocalWorld  # noqa: E402
from dw_local.worlds.distributor.generator import DistributorWorld  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DW_WORLD_CACHE", REPO / ".dw" / "cache"))
SENSOR = "coalesce_run_sensor"
RUN_TAG = "dw/coalesce_run_id"
STEP_EVENTS = ("STEP_START", "STEP_SUCCESS", "STEP_FAILURE")
RUN_EVENTS = {
    "PIPELINE_ENQUEUED": "checks run queued",
    "PIPELINE_DEQUEUED": "dequeued by the run queue",
    "PIPELINE_STARTING": "launched (run worker process starting)",
    "PIPELINE_START": "run worker started executing",
    "PIPELINE_SUCCESS": "checks run succeeded",
    "PIPELINE_FAILURE": "checks run failed",
}


def wait_for(what: str, probe, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def sim_offset(lw: LocalWorld) -> float:
    """Simulator clock minus wall clock, in seconds (the simulator clock is wall time shifted)."""
    t0 = time.time()
    body = httpx.get(
        f"{lw.coalesce_url}/_sim/clock", headers={"Authorization": f"Bearer {LOCAL_COALESCE_TOKEN}"}
    ).json()
    t1 = time.time()
    now = datetime.fromisoformat(body["now"].replace("Z", "+00:00"))
    return now.timestamp() - (t0 + t1) / 2


def coalesce_end_wall(lw: LocalWorld, run_id: int) -> float:
    run = lw.coalesce_client().get_run(run_id)
    assert run.run_end_time is not None
    return run.run_end_time.timestamp() - sim_offset(lw)


def sensor_ticks(instance: dg.DagsterInstance, name: str) -> list:
    states = [
        s
        for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if s.instigator_name == name
    ]
    if not states:
        return []
    return list(instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, limit=200))


def checks_run(instance: dg.DagsterInstance, coalesce_run_id: int):
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: str(coalesce_run_id)}))
    return runs[0] if runs else None


def timeline(
    instance: dg.DagsterInstance, end: float, coalesce_run_id: int, extra: list[tuple[float, str]]
) -> None:
    rows: list[tuple[float, str]] = list(extra)
    run = checks_run(instance, coalesce_run_id)
    ticks = sensor_ticks(instance, SENSOR)
    for tick in ticks:
        if run is not None and run.run_id in tick.run_ids:
            earlier = [t.end_timestamp for t in ticks if t.timestamp < tick.timestamp and t.end_timestamp]
            before = f"{end - max(earlier):.1f} s" if earlier else "n/a"
            rows.append(
                (
                    tick.timestamp,
                    f"sensor tick started (the tick before it ended {before} before the run ended)",
                )
            )
            if tick.end_timestamp:
                rows.append(
                    (tick.end_timestamp, f"sensor tick ended ({tick.end_timestamp - tick.timestamp:.1f} s)")
                )
    if run is not None:
        for record in instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None:
                continue
            kind = event.event_type_value
            if kind in RUN_EVENTS:
                rows.append((record.timestamp, RUN_EVENTS[kind]))
            elif kind in STEP_EVENTS:
                rows.append((record.timestamp, f"  {kind.lower().replace('_', ' ')}: {event.step_key}"))
    print(f"  {'t (s)':>7}  event (t = 0: the Coalesce run ended)")
    for t, label in sorted(rows):
        print(f"  {t - end:7.1f}  {label}")


def last_step_end(instance: dg.DagsterInstance, run_id: str) -> float:
    """When the run's last step ended: its results (and any incident) are recorded by then."""
    return max(
        r.timestamp
        for r in instance.all_logs(run_id)
        if r.dagster_event is not None
        and r.dagster_event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE")
    )


def stop_group(proc: subprocess.Popen | None) -> None:
    """SIGTERM the daemon's process group (daemon, code server, run workers), SIGKILL what is left."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for each stage")
    parser.add_argument("--nights", type=int, default=5, help="nights to play, the last the reference night")
    args = parser.parse_args()

    template = seeded_template(CACHE)
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        root = clone_world(template, Path(tmp) / "local")
        lw = LocalWorld(root)
        daemon: subprocess.Popen | None = None
        instance: dg.DagsterInstance | None = None
        try:
            lw.start()
            os.environ.update(lw.env())
            home = root / "dagster_home"
            home.mkdir(exist_ok=True)
            shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
            refresh_coalesce_state(dg.DagsterInstance.from_config(str(home)))
            env = {**os.environ, **lw.env(), "DAGSTER_HOME": str(home)}
            log_path = root / "logs" / "dagster-daemon.log"
            t_start = time.time()
            with open(log_path, "ab") as log:
                daemon = subprocess.Popen(
                    [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                    cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            instance = dg.DagsterInstance.from_config(str(home))

            def first_tick():
                if daemon.poll() is not None:
                    raise RuntimeError(f"dagster-daemon exited with {daemon.returncode}; see {log_path}")
                return [t for t in sensor_ticks(instance, SENSOR) if t.end_timestamp]

            ticks = wait_for("the run sensor's first tick", first_tick, args.timeout)
            print(f"dagster-daemon started; the run sensor's first tick ended {ticks[-1].end_timestamp - t_start:.1f} s "
                  f"later ({ticks[-1].status.value}: {ticks[-1].skip_reason or ticks[-1].cursor})")  # fmt: skip

            world = DistributorWorld()
            client = lw.coalesce_client()
            played = json.loads((root / "seeded.json").read_text())["nights_played"]
            latencies: list[tuple[str, float]] = []

            # Ordinary nights: the checks run records its results (where an incident would be written).
            for i in range(args.nights - 1):
                night = world.play_night(lw.snowflake, client, played + i)
                end = coalesce_end_wall(lw, night.run_id)
                run = wait_for(
                    f"the checks run of Coalesce run {night.run_id}",
                    lambda night=night: (
                        (r := checks_run(instance, night.run_id)) is not None and r.is_finished and r
                    ),
                    args.timeout,
                )
                recorded = last_step_end(instance, run.run_id)
                latencies.append((f"night {night.night} (checks recorded)", recorded - end))
                print(f"\nordinary night {night.night}: Coalesce run {night.run_id} {night.status}; its checks run "
                      f"{run.status.value}, results recorded {recorded - end:.1f} s after the Coalesce run ended")  # fmt: skip
                timeline(instance, end, night.run_id, [])

            # The reference night.
            store = IncidentStore(warehouse_from_env(), OpsSchema(LOCAL_DATABASE, "DW_OPS"))
            before = {i.incident_id for i in store.list()}
            ref = world.play_reference_night(lw.snowflake, client)
            end = coalesce_end_wall(lw, ref.run_id)
            seen_after_end = time.time() - end

            def new_incident():
                return [i for i in store.list() if i.incident_id not in before]

            incidents = wait_for("the reference night's incident", new_incident, args.timeout, every=0.5)
            seen = time.time()
            incident = incidents[0]
            opened = incident.opened_at.timestamp()
            latencies.append((f"reference night {ref.night} (incident OPENED_AT)", opened - end))
            print(f"\nreference night {ref.night}: Coalesce run {ref.run_id} {ref.status} (this process saw it end "
                  f"{seen_after_end:.1f} s after its end time)")  # fmt: skip
            print(f"incident {incident.incident_id} recorded {opened - end:.1f} s after the Coalesce run ended "
                  f"(OPENED_AT); seen by polling at {seen - end:.1f} s")  # fmt: skip
            print(f"  {incident.title[:160]}")
            # Let the checks run finish, so its whole timeline is on record.
            try:
                wait_for("the reference night's checks run", lambda: (r := checks_run(instance, ref.run_id)) is not None and r.is_finished, 120)  # fmt: skip
            except TimeoutError as e:
                print(f"  ({e})")
            timeline(
                instance,
                end,
                ref.run_id,
                [(opened, "INCIDENT OPENED (OPENED_AT)"), (seen, "incident seen by this process")],
            )

            ticks = sorted(sensor_ticks(instance, SENSOR), key=lambda t: t.timestamp)
            gaps = sorted(b.timestamp - a.timestamp for a, b in itertools.pairwise(ticks))
            if gaps:
                print(f"\nthe run sensor ticked every {gaps[len(gaps) // 2]:.1f} s (median; max {gaps[-1]:.1f} s over "
                      f"{len(gaps)} intervals)")  # fmt: skip
            print("\nlatency, Coalesce run end -> results recorded, per night:")
            for label, seconds in latencies:
                print(f"  {seconds:6.1f} s  {label}")
            figures = sorted(seconds for _, seconds in latencies)
            print(f"detection latency over {len(figures)} nights: median {statistics.median(figures):.1f} s, "
                  f"worst {figures[-1]:.1f} s (goal: median <= 15 s, worst <= 30 s)")  # fmt: skip
        finally:
            stop_group(daemon)
            if instance is not None:
                instance.dispose()
            lw.stop()


if __name__ == "__main__":
    main()
