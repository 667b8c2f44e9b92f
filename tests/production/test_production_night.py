"""The production shape, end to end: Postgres storage, webserver, daemon and gRPC code server as separate
processes, the default run launcher, all from the product's wheel as the image's own steps install it; the
night before the reference night survives the daemon and the checks run's worker killed with SIGKILL, and
the reference night plays through the real daemon down to the receipt. Nothing is lost, nothing is reported
or sent twice."""

from __future__ import annotations

import os
import subprocess
import zipfile
from collections import Counter
from pathlib import Path

import dagster as dg
import httpx
import pytest
from dagster._core.storage.tags import PARENT_RUN_ID_TAG, RETRY_NUMBER_TAG
from image import EXPECTED

from dw_dagster import tags
from dw_dagster.app.commands.ops import deployment as ops_deployment
from dw_dagster.app.settings import Settings
from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.remediation import ProposalKind
from dw_dagster.remediation.approvals import ApprovalBook
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN
from dw_local.worlds.distributor.generator import DistributorWorld

pytestmark = [pytest.mark.world, pytest.mark.timeout(900)]

NODE_OWNER, MAP_OWNER = "Priya Raman", "Dana Ortiz"


def _slack(d) -> list[dict]:
    return httpx.get(f"{d.lw.slack_url}/_sink/messages", timeout=10).json()["messages"]


def _message_keys(d) -> Counter:
    return Counter(
        ((m.get("metadata") or {}).get("event_payload") or {}).get("message_key") for m in _slack(d)
    )


def _store() -> IncidentStore:
    warehouse, ops = ops_deployment()
    return IncidentStore(warehouse, ops)


def _evaluations(d, runs: list[dg.DagsterRun]) -> Counter:
    """(asset, check) -> evaluations recorded by these runs."""
    counts: Counter = Counter()
    for run in runs:
        for record in d.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            data = record.dagster_event.asset_check_evaluation_data
            counts[(data.asset_key.to_user_string(), data.check_name)] += 1
    return counts


def _reported_runs(d) -> Counter:
    """(asset, Coalesce run id) -> materializations the run sensor stored."""
    counts: Counter = Counter()
    for key in d.instance.get_asset_keys():
        for record in d.instance.fetch_materializations(key, limit=1000).records:
            run_id = record.asset_event.metadata.get("coalesce/run_id")
            if run_id is not None:
                counts[(key.to_user_string(), run_id.value)] += 1
    return counts


def test_the_image_steps_ran_in_the_dockerfiles_order_and_installed_the_product_only(prod):
    image = prod.image
    assert image.ran == EXPECTED
    (wheel,) = image.wheels.glob("dw_dagster-*.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("dw_local")]
    site = image.python("import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # The product from the venv's site-packages, not the checkout; the local world not installed at all.
    assert image.python("import dw_dagster; print(dw_dagster.__file__)").startswith(site)
    assert image.python("import importlib.util; print(importlib.util.find_spec('dw_local'))") == "None"
    # The Coalesce state, baked into the installed package at build time.
    assert list(Path(site, "dw_dagster", "app", "defs", ".local_defs_state").glob("*/state"))
    # The code server is the venv's, and answers its health check.
    cmdline = Path(f"/proc/{prod.procs['code-server'].pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[0].decode().startswith(str(image.venv)) or cmdline[1].decode().startswith(str(image.venv))
    health = subprocess.run(
        [str(image.bin / "dagster"), "api", "grpc-health-check", "-p", str(prod.grpc_port)],
        env=image.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert health.returncode == 0, health.stdout + health.stderr


def test_storage_is_postgres_and_the_processes_are_separate(prod):
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    assert isinstance(prod.instance.run_storage, PostgresRunStorage)
    assert isinstance(prod.instance.event_log_storage, PostgresEventLogStorage)
    assert set(prod.procs) == {"code-server", "daemon", "webserver"}
    assert len({p.pid for p in prod.procs.values()}) == 3
    data = prod.graphql("{ version }")
    assert data["version"]


def test_a_night_survives_the_daemon_and_its_checks_run_worker_killed(prod):
    world = DistributorWorld()
    lw = prod.lw
    night = world.play_night(lw.snowflake, lw.coalesce_client(), world.last_played_night(lw.snowflake) + 1)
    assert night.status == "completed"
    coalesce_run = str(night.run_id)

    def started_worker():
        runs = prod.runs(**{tags.COALESCE_RUN_ID: coalesce_run})
        return runs and prod.worker_pid(runs[-1].run_id) and runs[-1]

    first = prod.wait("the night's checks run to start its worker", started_worker, timeout=240, every=0.2)
    # Mid-night: the run worker and the daemon die at once.
    os.kill(prod.worker_pid(first.run_id), 9)
    prod.kill("daemon")
    prod.start("daemon")

    def retried():
        runs = prod.runs(**{tags.COALESCE_RUN_ID: coalesce_run})
        done = [r for r in runs if r.tags.get(RETRY_NUMBER_TAG) and r.status == dg.DagsterRunStatus.SUCCESS]
        return done and (runs, done[0])

    runs, retry = prod.wait("the killed checks run to be retried", retried, timeout=300)
    assert prod.instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.FAILURE
    assert retry.tags[PARENT_RUN_ID_TAG] == first.run_id
    # One checks run for the night and its one retry: the sensor did not request the night again. Each a run
    # of the sensor's target, the checks job the UI names (its retry too), of the checks the night asked for.
    assert sorted(r.run_id for r in runs) == sorted([first.run_id, retry.run_id])
    assert {r.job_name for r in runs} == {"quality_checks"} and all(r.asset_check_selection for r in runs)
    evaluations = _evaluations(prod, runs)
    assert evaluations and set(evaluations.values()) == {1}, evaluations
    assert {run for (_, run), n in _reported_runs(prod).items() if n > 1} == set()


def test_the_reference_night_through_the_real_daemon_down_to_the_receipt(prod):
    world = DistributorWorld()
    lw = prod.lw
    night = world.play_reference_night(lw.snowflake, lw.coalesce_client())
    assert night.status == "completed"  # green: every Coalesce test passed
    store = _store()

    checks = prod.wait(
        "the reference night's checks run",
        lambda: [r for r in prod.runs(**{tags.COALESCE_RUN_ID: str(night.run_id)}) if r.is_success],
    )
    incident = prod.wait("the incident", lambda: next(iter(store.list(status="open")), None))
    diagnosis = prod.wait(
        "the diagnosis run",
        lambda: [
            r
            for r in prod.runs(**{tags.INCIDENT_ID: incident.incident_id})
            if r.job_name == "diagnose_incident" and r.is_success
        ],
    )
    held = prod.wait(
        "the remediation run, submitted and held for approval",
        lambda: [
            r
            for r in prod.runs(
                **{tags.INCIDENT_ID: incident.incident_id, tags.APPROVAL: tags.APPROVAL_PENDING}
            )
            if r.status == dg.DagsterRunStatus.QUEUED
        ],
    )
    posted = prod.wait(
        "the incident's Slack messages", lambda: [m for m in _slack(prod) if incident.incident_id in str(m)]
    )
    assert {m["channel"] for m in posted if not m["thread_ts"]} >= {"#inventory-analytics", "#planning-ops"}

    book = ApprovalBook(store, load_context_file(Settings.from_env().context_file))
    # The owners approve from the proposal, posted once the sensor has bound the run the daemon created.
    prod.wait("the held run bound to its plan", lambda: book.binding(book.plans(incident.incident_id)[-1]))
    for who, extra in ((NODE_OWNER, []), (MAP_OWNER, ["--set", "WAREHOUSE_NAME=Dallas"])):
        result = prod.command("approve", incident.incident_id, "--as", who, *extra)
        assert result.returncode == 0, result.stdout + result.stderr
    (plan,) = book.plans(incident.incident_id)
    (node,) = [p.node_change for p in plan.proposals if p.kind is ProposalKind.NODE_CHANGE and p.node_change]
    apply_and_deploy(lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)

    done = prod.wait(
        "the remediation run to finish",
        lambda: (r := prod.instance.get_run_by_id(held[0].run_id)) and r.is_finished and r,
        timeout=420,
    )
    assert done.status == dg.DagsterRunStatus.SUCCESS, prod.log_tail()
    receipts = prod.wait("the receipt", lambda: store.events(incident.incident_id, kind="receipt"))
    assert len(receipts) == 1 and receipts[0].detail["verified"]
    prod.wait(
        "the receipt in Slack",
        lambda: [m for m in _slack(prod) if "receipt" in str(m).lower() and incident.incident_id in str(m)],
    )

    # Nothing twice: one checks run for the night; a diagnosis per new set of findings (the incident sensor
    # may tick while the checks run still records them), never two for one; each message once; each
    # Coalesce run reported once.
    assert len(checks) == 1
    diagnoses = prod.runs(**{tags.INCIDENT_ID: incident.incident_id})
    run_keys = Counter(r.tags.get("dagster/run_key") for r in diagnoses if r.job_name == "diagnose_incident")
    assert diagnosis and set(run_keys.values()) == {1}, run_keys
    keys = _message_keys(prod)
    assert {k: n for k, n in keys.items() if n > 1} == {}
    assert {run for (_, run), n in _reported_runs(prod).items() if n > 1} == set()
    # The webserver reads the same storage: it lists the runs the daemon launched.
    data = prod.graphql("{ runsOrError { ... on Runs { results { runId status } } } }")
    listed = {r["runId"]: r["status"] for r in data["runsOrError"]["results"]}
    assert listed[checks[0].run_id] == "SUCCESS" and listed[held[0].run_id] == "SUCCESS"
