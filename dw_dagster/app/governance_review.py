"""The run sensor's hook into governance: after a finished Coalesce run is reported, review the columns of
its environment (:mod:`dw_dagster.governance.watch`) and record the findings in the incident store.

A node's columns change only by a deploy of the environment, and every deploy is a Coalesce run of type
``deploy``. So the review lists the nodes (one ``GET /nodes?detail=true``, seconds for thousands of nodes)
only when the environment's newest deploy run is not the one recorded when they were last listed: a run
after no deploy has no new column to find, and costs one ``GET /runs``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

import dagster as dg

from dw_dagster.coalesce.client import CoalesceClient
from dw_dagster.coalesce.run_models import CoalesceRunType
from dw_dagster.coalesce.workspace_models import CoalesceNode
from dw_dagster.context.models import ContextFile
from dw_dagster.governance.columns import last_seen, loaded_columns, record_seen, seen_deployed
from dw_dagster.governance.watch import SensitiveColumnWatch
from dw_dagster.incidents.store import IncidentStore
from dw_dagster.records.incidents import RecordOutcome


def review_run(
    context: dg.SensorEvaluationContext,
    client: CoalesceClient,
    store: IncidentStore,
    *,
    environment_id: str,
    touched: Iterable[dg.AssetKey],
    business_date: date,
    coalesce_run_id: str,
    context_file: ContextFile | None,
) -> list[RecordOutcome]:
    """Flags the sensitive new columns of the environment a finished run belongs to. A review that fails
    (the Coalesce API down) records nothing, so the next run's review still sees the same columns as new.

    ``context_file``: the governance owners and patterns (the code location's, as its component loaded it)."""
    try:
        deployed = newest_deploy(client, environment_id)
        previous = last_seen(context.instance, environment_id)
        if previous is not None and deployed is not None:
            if deployed == seen_deployed(context.instance, environment_id):
                return []  # nothing deployed since the nodes were last listed
        metadata = {n.key: n.metadata for n in context.repository_def.asset_graph.asset_nodes}
        keys = {}
        for key, md in metadata.items():
            node_id = getattr(md.get("coalesce/node_id"), "value", md.get("coalesce/node_id"))
            if node_id is not None:
                keys[str(node_id)] = key
        nodes = client.list_nodes(environment_id, detail=True)
        if previous is None:
            previous = loaded_columns(metadata, environment_id)

        def asset_key_of(node: CoalesceNode) -> str:
            key = keys.get(node.id)
            return key.to_user_string() if key else f"{node.location_name or '-'}/{node.name}".lower()

        watch = SensitiveColumnWatch(context_file, store.warehouse)
        touched_keys = set(touched)
        review = watch.review(
            environment_id=environment_id,
            nodes=nodes,
            previous=previous,
            asset_key_of=asset_key_of,
            touched_node_ids=[n for n, k in keys.items() if k in touched_keys],
            business_date=business_date,
            coalesce_run_id=coalesce_run_id,
            run_tag={"coalesce_run": coalesce_run_id},
        )
        outcomes = [store.record_finding(f) for f in review.findings]
    except Exception as e:  # noqa: BLE001 - the run is still reported; the columns stay new until reviewed
        context.log.error(f"Reviewing the new columns of environment {environment_id} failed: {e}")
        return []
    for problem in review.errors:
        context.log.warning(problem)
    for finding in review.findings:
        context.log.warning(f"{finding.summary} (governance: {', '.join(finding.evidence['owners']) or '-'})")
    columns = {n.id: [c.name for c in n.metadata.columns] for n in nodes}
    record_seen(context.instance, environment_id, columns, deployed)
    return outcomes


def newest_deploy(client: CoalesceClient, environment_id: str) -> str | None:
    """The environment's newest deploy run, asked before its nodes are listed: its id once it has ended,
    ``"none"`` if it has none; None while it is in progress (the nodes may be changing under the listing)."""
    page = client.list_runs(
        environment_id, run_type=CoalesceRunType.DEPLOY, order_by="id", order_by_direction="desc", limit=1
    )
    if not page.data:
        return "none"
    run = page.data[0]
    return str(run.id) if run.run_status.is_terminal else None
