"""``dw-dagster demo replay``: the reference night end to end on a fresh local world, headless.

Everything runs for real: the Coalesce simulator runs the nightly job against the local Snowflake, the
code location's sensors, checks, diagnosis and remediation job run in this process on the local world's
Dagster instance (:class:`LocalDaemon`), Slack messages land in the stand-in, and the owners approve with
the same ``dw-dagster approve`` command a person types. The times are the world's: the simulator's clock,
moved to the reference night's hours as the story goes (the approvals at 07:40, the deploy at 08:05), which
this process, the commands it runs and the Slack stand-in read too (``world_clock.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from dw_dagster.context.models import load_context_file
from dw_dagster.incidents.diagnosis import by_priority
from dw_dagster.incidents.events import findings_of, latest_diagnosis
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_asset import INCIDENTS_KEY
from dw_dagster.records.remediation import ProposalKind, Receipt
from dw_dagster.remediation.approvals import ApprovalBook
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.daemon import LocalDaemon, dagster_home
from dw_local.engineer import apply_and_deploy
from dw_local.world import LOCAL_COALESCE_TOKEN, LocalWorld, WorldError, WorldPorts, sim_control
from dw_local.world_clock import clock_env, on_world_clock
from dw_local.worlds.distributor.generator import DistributorWorld

NODE_OWNER = "Priya Raman"
MAP_OWNER = "Dana Ortiz"
MAP_OWNER_SETS = {"WAREHOUSE_NAME": "Dallas"}


@dataclass
class Timeline:
    clock: Callable[[], datetime]
    tz: ZoneInfo
    events: list[dict[str, Any]] = field(default_factory=list)
    echo: Callable[[str], None] | None = None

    def add(
        self,
        system: str,
        what: str,
        numbers: dict[str, Any] | None = None,
        at: datetime | None = None,
        **extra: Any,
    ) -> None:
        local = (at or self.clock()).astimezone(self.tz)
        event = {"time": local.strftime("%a %Y-%m-%d %H:%M:%S %Z"), "system": system, "what": what,
                 "numbers": numbers or {}, **extra}  # fmt: skip
        self.events.append(event)
        if self.echo:
            self.echo(f"{event['time']}  {system:<22} {what}")


def _cli(lw: LocalWorld, *args: str) -> str:
    """Runs ``dw-dagster ...`` as a person would, against this world; returns its output."""
    env = {**os.environ, **lw.env(), "DAGSTER_HOME": str(dagster_home(lw.root)), **clock_env(lw.root)}
    script = Path(sys.executable).with_name("dw-dagster")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dw_dagster"]
    done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise WorldError(f"dw-dagster {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def replay(root: Path, template: Path, echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Plays the reference night on a fresh copy of the seeded world under ``root``; returns the timeline."""
    from dw_local.seeding import clone_world

    shutil.rmtree(root, ignore_errors=True)
    clone_world(template, root)
    world = DistributorWorld()
    tz = ZoneInfo(world.spec.timezone)
    # One clock: this process, the commands it runs and the Slack stand-in read the world's time.
    with LocalWorld(root, ports=WorldPorts(), clock=True) as lw, on_world_clock(lw.root):
        coalesce = lw.coalesce_client()

        def sim_now() -> datetime:
            return datetime.fromisoformat(sim_control(coalesce, "GET", "clock")["now"].replace("Z", "+00:00"))

        def set_clock(day, at: time) -> None:
            sim_control(coalesce, "POST", "clock", {"now": world.utc(datetime.combine(day, at)).isoformat()})

        tl = Timeline(sim_now, tz, echo=echo)
        daemon = LocalDaemon(lw)
        sunday = world.play_night(lw.snowflake, coalesce, world.last_played_night(lw.snowflake) + 1)
        daemon.tick()
        tl.add("Coalesce", f"Sunday's nightly job (run {sunday.run_id}) {sunday.status}; dw-dagster watched it: no incident",
               {"business_date": str(sunday.business_date)})  # fmt: skip

        night = world.play_reference_night(lw.snowflake, coalesce)
        _reference_day(world, lw, tl, night)
        outcome = daemon.tick()
        store = IncidentStore(
            daemon.defs.resources["snowflake"], OpsSchema(lw.env()["SNOWFLAKE_DATABASE"], "DW_OPS")
        )
        incident = _detection(store, tl, outcome)
        _diagnosis(store, tl, incident, lw)
        book = ApprovalBook(store, load_context_file(daemon.settings.context_file))
        (plan,) = book.plans(incident.incident_id)
        tl.add("dw-dagster", f"Proposed fix {plan.plan_id}: " + "; ".join(p.title for p in plan.proposals),
               {"proposals": len(plan.proposals), "owners": plan.required_teams},
               diffs=[p.node_change.diff for p in plan.proposals if p.node_change])  # fmt: skip

        submitted = outcome.submitted + daemon.tick().submitted
        if len(submitted) != 1:
            raise WorldError(f"expected one remediation run submitted for approval, got {submitted}")
        queued = daemon.instance.get_run_by_id(submitted[0])
        again = daemon.tick()
        tl.add("Dagster", f"Remediation run {queued.run_id} queued, held for approval (dw/approval=pending); "
               f"still {daemon.instance.get_run_by_id(queued.run_id).status.value} after another daemon tick",
               {"launched_without_approval": len(again.launched)})  # fmt: skip

        tuesday = night.business_date + timedelta(days=1)
        set_clock(tuesday, time(7, 40))
        for who, sets in ((NODE_OWNER, {}), (MAP_OWNER, MAP_OWNER_SETS)):
            args = [
                "approve",
                incident.incident_id,
                "--as",
                who,
                *(f"--set={k}={v}" for k, v in sets.items()),
            ]
            typed_at = sim_now()  # when the owner typed it, however long the command then takes
            tl.add("approvals", f"$ dw-dagster {' '.join(args[:2])} --as \"{who}\"" + "".join(f" --set {k}={v}" for k, v in sets.items())
                   + f": {_cli(lw, *args)}", at=typed_at)  # fmt: skip

        set_clock(tuesday, time(8, 5))
        (node,) = [
            p.node_change for p in plan.proposals if p.kind is ProposalKind.NODE_CHANGE and p.node_change
        ]
        deploy_run = apply_and_deploy(lw.coalesce_url, LOCAL_COALESCE_TOKEN, node)
        tl.add("Coalesce", f"{NODE_OWNER} applies the {node.node_name} change in Coalesce and deploys it (deploy run {deploy_run})",
               {"deploy_run_id": deploy_run})  # fmt: skip

        launched = daemon.tick().launched
        receipt = _remediation(store, tl, incident.incident_id, coalesce, launched)
        checks = daemon.tick()
        _after_fix(store, tl, incident.incident_id, checks,
                   f"The run sensor saw the rerun; its checks on the rebuilt tables count for {night.business_date}")  # fmt: skip
        # The end state: the next nightly run after the fix, which the fix's row-count step must not alarm.
        following = world.play_night(lw.snowflake, coalesce, night.night + 1)
        _after_fix(store, tl, incident.incident_id, daemon.tick(),
                   f"The next nightly job (run {following.run_id}, {following.business_date}) {following.status}, watched")  # fmt: skip
        latest = (
            daemon.instance.fetch_materializations(INCIDENTS_KEY, limit=1).records[0].asset_materialization
        )
        tl.add("Dagster", f"dw/incidents after the fix: its latest materialization leads with the receipt of {incident.incident_id}",
               {"first_entry": next(iter(latest.metadata)) if latest else None})  # fmt: skip
        tl.add("dw-dagster", "Receipt written (append-only) and posted to the incident's Slack threads",
               {"verified": receipt.verified}, receipt=receipt.model_dump(mode="json"))  # fmt: skip
    return tl.events


def _after_fix(store: IncidentStore, tl: Timeline, incident_id: str, outcome, what: str) -> None:
    """A night watched after the fix: its checks, and the row-count steps the fix or the checks explain (not
    incidents)."""
    explained = store.events(incident_id, kind="explained")
    red = outcome.failed()
    tl.add("dw-dagster", f"{what} (open incidents: {len(store.list(status='open'))})",
           {"checks": len(outcome.checks), "failed": len(red), "errored": len(outcome.errored()),
            "explained_by_the_fix": len(explained), "open_incidents": len(store.list(status="open"))},
           failed_checks=[f"{c.check} on {c.asset}: {c.description}" for c in red],
           # Steps the checks explained themselves (a new key's rows): passed, judged on the new level.
           levels=sorted(f"{c.check} on {c.asset}: {getattr(lvl, 'value', lvl)}" for c in outcome.checks
                         if c.passed and (lvl := c.metadata.get("baseline_level"))),
           explained=sorted({f"{e.detail.get('check_name')} on {e.detail.get('asset_key')} ({e.detail.get('business_date')})"
                             for e in explained}))  # fmt: skip


def _reference_day(world: DistributorWorld, lw: LocalWorld, tl: Timeline, night) -> None:
    ref = world.spec.reference_night
    day = night.business_date
    with lw.snowflake.connect() as conn:
        cur = conn.cursor()
        cur.execute(
            'SELECT SUM("TRANSACTION_QUANTITY"), COUNT(DISTINCT "INVENTORY_ITEM_ID"), MAX("_QLIK_LOADED_AT"), COUNT(*)'
            ' FROM "RAW_EBS"."MTL_ONHAND_QUANTITIES_DETAIL" WHERE "ORGANIZATION_ID" = %s',
            (ref.new_org.id,),
        )
        units, skus, loaded, rows = cur.fetchone()
    from_org = next(o for o in world.spec.orgs if o.id == ref.from_org)
    tl.add("Oracle EBS", f"Supply chain opens inventory org {ref.new_org.code} ({ref.new_org.name}), org id {ref.new_org.id}, "
           f"and posts transfers out of {from_org.code} ({from_org.name})",
           {"org_id": ref.new_org.id, "units": int(units), "skus": int(skus)},
           at=world.utc(datetime.combine(day, ref.opened_at)).replace(tzinfo=ZoneInfo("UTC")))  # fmt: skip
    tl.add("Qlik Replicate", f"CDC applies the rows to RAW_EBS.MTL_ONHAND_QUANTITIES_DETAIL with ORGANIZATION_ID = {ref.new_org.id}",
           {"rows": int(rows)}, at=loaded.replace(tzinfo=ZoneInfo("UTC")))  # fmt: skip
    run = lw.coalesce_client().get_run(night.run_id)
    results = lw.coalesce_client().get_run_results(night.run_id)
    queries = [q for n in results.data for q in n.query_results]
    tests = [q for q in queries if ":" in q.name or q.name.isupper()]
    tl.add("Coalesce", f"Scheduler runs job inventory_nightly on PROD (run {night.run_id})", {"nodes": len(results.data)},
           at=run.run_start_time)  # fmt: skip
    tl.add("Coalesce", f"Every test passes; job {night.status}",
           {"queries": len(queries), "failed": sum(not q.success for q in queries), "tests": len(tests)}, at=run.run_end_time)  # fmt: skip


def _detection(store: IncidentStore, tl: Timeline, outcome) -> Any:
    (incident,) = store.list(status="open")
    # The numbers that opened it: the finding the diagnosis starts from, as the check recorded it.
    opened_by = by_priority(findings_of(store, incident.incident_id))[0]
    rec = opened_by.evidence.get("reconciliation") or {}
    numbers = {
        "total": opened_by.evidence.get("total"),
        "change_pct": rec.get("target_change_pct"),
        "source_total": rec.get("source"),
        "source_change_pct": rec.get("source_change_pct"),
        "gap_units": rec.get("gap_change"),
        "tolerance_units": rec.get("tolerance"),
    }
    tl.add("dw-dagster", f"Network on-hand units fall against a flat EBS total: incident {incident.incident_id} opens",
           {k: v for k, v in numbers.items() if v is not None}, failed_checks=sorted(c.check for c in outcome.failed()),
           summary=opened_by.summary)  # fmt: skip
    return incident


def _diagnosis(store: IncidentStore, tl: Timeline, incident, lw: LocalWorld) -> None:
    found = latest_diagnosis(store, incident.incident_id)
    if found is None:
        raise WorldError(f"{incident.incident_id}: no diagnosis")
    diagnosis, radius = found
    key = diagnosis.keys[0] if diagnosis.keys else None
    by = {a.asset_key: a for a in radius.assets}
    reorder = by.get("mart/mart_reorder_candidates")
    change = reorder.change.get("reorder_candidates", {}) if reorder else {}
    tl.add("dw-dagster + Snowflake", f"{diagnosis.classification.value}: {diagnosis.cause}",
           {"org_id": key.value if key else None, "gap_units": diagnosis.evidence.get("gap_units"),
            "skus": key.distinct_items if key else None, "network_change_pct": diagnosis.evidence.get("target_change_pct"),
            "ebs_change_pct": diagnosis.evidence.get("source_change_pct"),
            "reorder_rows_before": change.get("before"), "reorder_rows_after": change.get("after"),
            "newly_flagged_skus": len(radius.newly_flagged),
            "next_read": next((a.next_read for a in radius.assets if a.next_read and "S&OP" in a.next_read), None)})  # fmt: skip
    messages = httpx.get(f"{lw.slack_url}/_sink/messages").json()["messages"]
    roots = [m for m in messages if not m["thread_ts"]]
    tl.add("Slack", "Incident to the owners' channels with the test query; the buyers told to hold expedite orders",
           {"channels": sorted({m["channel"] for m in roots}), "messages": len(messages),
            "hold_skus": len(radius.newly_flagged)})  # fmt: skip


def _remediation(store: IncidentStore, tl: Timeline, incident_id: str, coalesce, launched) -> Receipt:
    receipts = [Receipt.model_validate(e.detail) for e in store.events(incident_id, kind="receipt")]
    if not receipts:
        refused = store.events(incident_id, kind="refused")
        raise WorldError(
            f"the remediation run did not write a receipt (launched: {launched}; refused: {[e.detail for e in refused]})"
        )
    receipt = receipts[-1]
    for c in receipt.changes:
        tl.add("Snowflake", c.what)
    run = coalesce.get_run(receipt.coalesce_run_id)
    tl.add("Coalesce", f"Rerun {receipt.coalesce_run_id} scoped to {run.run_details.include_nodes_selector if run.run_details else '?'} "
           f"as {receipt.coalesce_run_as} {run.run_status.value}",
           {"coalesce_run_id": receipt.coalesce_run_id, "nodes": run.run_details.nodes_in_run if run.run_details else None},
           at=run.run_end_time)  # fmt: skip
    numbers: dict[str, Any] = {}
    for v in receipt.verification:
        numbers.update({f"{v.expectation.subject}.{k}": val for k, val in v.observed.items()})
        numbers[f"{v.expectation.subject}.passed"] = v.passed
    tl.add("dw-dagster", "Verification " + ("passed" if receipt.verified else "FAILED") + ": "
           + "; ".join(v.detail for v in receipt.verification), numbers)  # fmt: skip
    return receipt
