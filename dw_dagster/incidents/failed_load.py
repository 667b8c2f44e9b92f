"""A failed Coalesce node: a schema change, a failed load, or a test that caught bad data.

A build statement that failed names a column or object that no longer matches (schema change) or not
(failed load). A *test* that failed the node is evidence about the data, and the class is what the data
shows: a unique test that failed on copies of a load is duplication; a test that failed on values that
flipped sign or moved by a factor is a sign or unit change (``drilldown.py``), read through every total
whose measure passes through the node, those below it included.
"""

from __future__ import annotations

import json
import re

from dw_dagster.incidents.drilldown import drill_source, unit_or_sign_diagnosis
from dw_dagster.incidents.duplication import duplicated_values, find_duplicates
from dw_dagster.incidents.evidence import HISTORY_DAYS, DiagnosisContext, good_nights, last_good_night
from dw_dagster.incidents.structure import source_column, sources_upstream
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident

_MISSING = [
    re.compile(r"invalid identifier '(?P<column>[^']+)'", re.I),
    re.compile(r'does not have a column named \\?"(?P<column>[^"\\]+)', re.I),
    re.compile(r'Referenced column \\?"(?P<column>[^"\\]+)\\?" not found', re.I),
]
_PARTS = re.compile(r'"((?:[^"]|"")*)"|([^."]+)')
_SCHEMA_WORDS = re.compile(r"invalid identifier|does not exist|not found|no such column|Binder Error", re.I)
# Coalesce names column test results "<COLUMN>: Unique" and "<COLUMN>: Null".
_UNIQUE_TEST = re.compile(r"^(?P<column>.+):\s*Unique$", re.I)
_TEST_FAILED = re.compile(r"^Test failed", re.I)


def _base(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> dict:
    known = finding.asset_key in ctx.graph
    upstream = sorted(ctx.graph.upstream(finding.asset_key)) if known else []
    return {
        "incident_id": incident.incident_id,
        "path": [*upstream, finding.asset_key],
        "cause_asset": finding.asset_key,
        "owners": ctx.graph.owners_on([finding.asset_key]) if known else [],
    }


def diagnose_failed(incident: Incident, finding: Finding, ctx: DiagnosisContext) -> Diagnosis:
    failed_query = str(finding.evidence.get("failed_query") or "")
    error = str(finding.evidence.get("error") or "")
    evidence = {"coalesce_run_id": finding.coalesce_run_id or "", "failed_query": failed_query}
    key = finding.asset_key
    is_test = bool(_TEST_FAILED.match(error)) and key in ctx.graph
    unique = _UNIQUE_TEST.match(failed_query)
    if is_test and unique:
        found = _duplication_behind_unique_test(incident, finding, ctx, unique["column"].strip(), evidence)
        if found is not None:
            return found
    if is_test:
        for total in _totals_near(ctx, key):
            history = ctx.history.metric_history(total.name, finding.business_date, HISTORY_DAYS)
            before = last_good_night(ctx, history, finding.business_date)
            if before is None:
                continue
            moved = drill_source(
                ctx,
                total,
                finding.business_date,
                good_nights(ctx, history, finding.business_date),
                _group_keys(ctx),
            ).moved
            if moved is not None:
                diagnosis = unit_or_sign_diagnosis(incident, finding, total, moved, ctx, {})
                return diagnosis.model_copy(
                    update={
                        "cause": f"The Coalesce test {failed_query} failed {key}. " + diagnosis.cause,
                        "evidence": {**diagnosis.evidence, **evidence},
                    }
                )
    said = json.dumps(finding.evidence, default=str)
    schema = bool(_SCHEMA_WORDS.search(said))
    missing = _missing_column(error) or _missing_column(said)
    # A column none of the node's inputs declares was never there to drop: the node's own new code reads it.
    unknown = schema and missing is not None and _declared_by_inputs(ctx, key, missing) is False
    return Diagnosis(
        classification=CauseClass.SCHEMA_CHANGE if schema and not unknown else CauseClass.FAILED_LOAD,
        cause=f"The Coalesce build of {key} failed: {finding.summary}"
        + (
            f" The node reads {missing}, which none of its inputs declares: a change to the node (its "
            "deployed definition), not to its sources."
            if unknown
            else " The error names a column or object that no longer matches the node's definition."
            if schema
            else ""
        ),
        evidence=evidence,
        **_base(incident, finding, ctx),
    )


def _missing_column(text: str) -> str | None:
    """The column an error says is missing: Snowflake's ``invalid identifier '"T"."COL"'``, or the local
    Snowflake's (DuckDB's) ``does not have a column named "COL"`` / ``Referenced column "COL" not found``."""
    for pattern in _MISSING:
        if found := pattern.search(text):
            # The identifier's last part, a quoted one whole (``"CUSTOMERS"."A.B"`` is ``A.B``).
            parts = _PARTS.findall(found["column"].replace('\\"', '"'))
            quoted, plain = parts[-1] if parts else ("", "")
            return quoted.replace('""', '"') or plain
    return None


def _declared_by_inputs(ctx: DiagnosisContext, key: str, column: str) -> bool | None:
    """Whether an input of the failed node declares ``column`` (its Coalesce columns, as the pipeline's
    metadata lists them: a column dropped or renamed in the warehouse is still declared there); its inputs
    alone, not a table further up (a stage between may have stopped passing it on). None when no input's
    columns are known."""
    if key not in ctx.graph:
        return None
    inputs = [
        a
        for a in ctx.graph.assets.predecessors(key)
        if "info" in ctx.graph.assets.nodes[a] and ctx.graph.info(a).columns
    ]
    if not inputs:
        return None
    return any(column.upper() in {c.upper() for c in ctx.graph.info(a).columns} for a in inputs)


def _totals_near(ctx: DiagnosisContext, key: str) -> list:
    """The totals whose measure passes through the failed node: those at or above it first, then those
    below it (a test on a fact fails before the marts its values feed are built, but the drill-down reads
    the source's own rows, so a total below the node still names the subset)."""
    up, down = ctx.graph.upstream(key), ctx.graph.downstream(key)
    above = [t for t in ctx.metrics.totals if t.asset == key or t.asset in up]
    return above + [t for t in ctx.metrics.totals if t.asset in down and t not in above]


def _group_keys(ctx: DiagnosisContext) -> list[str]:
    return [g.upper() for t in ctx.metrics.totals for g in t.group_keys]


def _duplication_behind_unique_test(
    incident: Incident, finding: Finding, ctx: DiagnosisContext, column: str, evidence: dict
) -> Diagnosis | None:
    key = finding.asset_key
    repeated = duplicated_values(ctx, key, column)
    origin = source_column(ctx.graph, (key, column))
    candidates = [origin[0]] if origin else []
    candidates += [k for k in sources_upstream(ctx.graph, key) if k not in candidates]
    copies = find_duplicates(ctx, candidates[:4])
    if not repeated and copies is None:
        return None
    extra = sum(k.rows for k in repeated)
    where = copies.asset if copies else key
    keys = (copies.keys if copies and copies.keys else repeated)[:10]
    load = f", brought by {copies.load}" if copies and copies.load else ""
    cause = (
        f"The Coalesce test {finding.evidence.get('failed_query')} failed {key}: {extra:,} extra rows share a "
        f"value of {column}"
        + (f"; {where} holds {copies.extra_rows:,} exact duplicate rows{load}" if copies else "")
        + ". The test caught a duplication, not a broken build: de-duplicate or reload, then rerun."
    )
    base = _base(incident, finding, ctx)
    base["cause_asset"] = where
    if copies:
        base["path"] = ctx.graph.path(copies.asset, key) if copies.asset != key else base["path"]
        base["owners"] = ctx.graph.owners_on(
            [copies.asset, *sorted(ctx.graph.assets.predecessors(copies.asset))]
        )
    return Diagnosis(
        classification=CauseClass.DUPLICATION,
        cause=cause,
        evidence={
            **evidence,
            "duplicated_values": extra,
            "duplicate_rows": copies.extra_rows if copies else extra,
            "duplicates_in": where,
            **({"duplicate_load": copies.load} if copies and copies.load else {}),
        },
        keys=keys,
        upstream_change=f"duplicate rows loaded into {where}{load}",
        test_query=copies.query if copies else None,
        **base,
    )
