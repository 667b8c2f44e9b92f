"""What a finding does besides failing a check: recorded on its incident, and the incident shown.

Every run that finds something (the nightly checks, a skipped night, a night whose checks could not run, a
cost jump) records its finding here. The incident is provisional until its diagnosis lands
(``dw_dagster/incidents/store.py``). A finding the record explains (the row-count step of a verified fix)
opens nothing and is not shown as news: it is logged and kept on the fixed incident as ``explained``.
"""

from __future__ import annotations

from collections.abc import Collection

import dagster as dg

from dw_dagster.checks.tonight import Reporter
from dw_dagster.context.specs import key_from_path
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.notifications.incident_asset import incident_materialization
from dw_dagster.notifications.text import humanise_names
from dw_dagster.records.incidents import Finding, RecordOutcome


def record_finding(
    context: dg.OpExecutionContext, store: IncidentStore, finding: Finding, ancestors: Collection[str] = ()
) -> RecordOutcome:
    """Records ``finding`` on its incident and, when it is news, shows the incident in the UI and the log;
    the outcome's ``explained_by`` says the record explains it (the check then reports at WARN)."""
    outcome = store.record_finding(finding, ancestors=ancestors)
    # The run's log line reads as the incident's messages do: names in words, not the metrics file's keys.
    said = humanise_names(finding.summary)
    if outcome.explained_by:
        context.log.info(f"not an incident: {said}; explained by {outcome.explained_by}")
        return outcome
    if outcome.new_finding:
        findings = store.events(outcome.incident.incident_id, kind="finding")
        context.log_event(incident_materialization(outcome.incident, findings))
        verb = (
            "opened" if outcome.new_incident else "reopened" if outcome.reopened else "updated (provisional)"
        )
        context.log.warning(f"incident {outcome.incident.incident_id} {verb}: {said}")
    return outcome


def checks_reporter(context: dg.AssetCheckExecutionContext, store: IncidentStore) -> Reporter:
    """The nightly checks' reporter: a failing check's finding, matched against the fixes upstream of it."""

    def report(finding: Finding) -> RecordOutcome:
        ancestors = _ancestors(context, finding.asset_key)
        return record_finding(context.op_execution_context, store, finding, ancestors)

    return report


def _ancestors(context: dg.AssetCheckExecutionContext, asset: str) -> set[str]:
    # The job's asset graph (the whole code location's, also in a checks-only subset run).
    graph = context.op_execution_context.job_def.asset_layer.asset_graph
    key = key_from_path(asset)
    if not graph.has(key):
        return set()
    return {k.to_user_string() for k in graph.get_ancestor_asset_keys(key)}
