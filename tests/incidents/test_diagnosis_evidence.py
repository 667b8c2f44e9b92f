"""The class and keys come from the evidence that explains the gap, ranked by how much of it each explains:
a group whose value is NULL tonight (value loss on that key, whichever finding came first), the group that
holds a fall (volume loss naming it). Two shapes: bill payments by channel, metered energy by region. On
DuckDB under fakesnow, with the totals' histories as the checks record them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 6, 23)
SHAPES = {
    "payments": ("CHANNEL", {"web": 250_000.0, "mobile": 400_000.0, "branch": 150_000.0, "phone": 60_000.0}),
    "energy": ("REGION", {"North": 41_000.0, "South": 38_000.0, "East": 22_000.0, "West": 9_000.0}),
}


def _spec(key: str, table: str, columns: list[str], deps: list[str] = ()) -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, "VARCHAR") for c in columns])
    node = "Fact" if deps else "Source"
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=list(deps),
                        metadata={"dagster/table_name": table, "dagster/column_schema": schema,
                                  "coalesce/node_type": node})  # fmt: skip


def _ctx(conn, column: str) -> DiagnosisContext:
    metrics = MetricsFile.model_validate({"totals": [{
        "name": "daily_amount", "owner": "finance", "asset": "core/fct", "group_keys": [column], "hurts": "down",
        "sql": f"SELECT \"{column}\", SUM(\"AMOUNT\") AS \"VALUE\" FROM {{{{ ref('CORE', 'FCT') }}}} GROUP BY 1",
    }]})  # fmt: skip
    graph = LineageGraph([_spec("raw/journal", "DB.RAW.JOURNAL", [column, "AMOUNT"]),
                          _spec("core/fct", "DB.CORE.FCT", [column, "AMOUNT"], ["raw/journal"])])  # fmt: skip
    return DiagnosisContext(graph, metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                            HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip


@pytest.fixture
def conn():
    with diagnosis_db("RAW", "CORE") as conn:
        yield conn


def _record(ctx: DiagnosisContext, column: str, nights: dict[date, dict[str, float | None]]) -> None:
    for day, groups in nights.items():
        labelled = {f"{column}={g}": v for g, v in groups.items()}
        ctx.history.record_metric(  # type: ignore[union-attr]
            "daily_amount", day, sum(v for v in labelled.values() if v is not None), labelled, None, None
        )


def _incident() -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_null_valued_group_that_explains_the_fall_is_value_loss_on_its_key(conn, shape):
    column, usual = SHAPES[shape]
    ctx = _ctx(conn, column)
    nulled = next(iter(usual))
    tonight = {g: (None if g == nulled else v) for g, v in usual.items()}
    _record(ctx, column, {TONIGHT - timedelta(days=k): usual for k in range(1, 8)} | {TONIGHT: tonight})
    # The first finding is the total's fall; another names the NULL group.
    fall = Finding(
        check_name="total_daily_amount",
        asset_key="core/fct",
        business_date=TONIGHT,
        summary="daily_amount fell",
        cause_scope="job:x",
        evidence={"baseline": {"expected": 860_000.0}},
    )
    nulls = fall.model_copy(update={"summary": "rows with no AMOUNT",
                                    "evidence": {"null_groups": {"daily_amount": [f"{column}={nulled}"]}}})  # fmt: skip
    d = diagnose(_incident(), [fall, nulls], ctx)
    assert d.classification is CauseClass.VALUE_LOSS, d.cause
    assert [k.label for k in d.keys] == [f"{column}={nulled}"]
    assert d.keys[0].units == -usual[nulled] and "NULL" in d.keys[0].change


@pytest.mark.parametrize("shape", SHAPES)
def test_a_partial_load_of_one_group_names_that_group(conn, shape):
    column, usual = SHAPES[shape]
    ctx = _ctx(conn, column)
    partial = list(usual)[1]
    tonight = {g: (v * 0.5 if g == partial else v * 1.02) for g, v in usual.items()}
    _record(ctx, column, {TONIGHT - timedelta(days=k): usual for k in range(1, 8)} | {TONIGHT: tonight})
    fall = Finding(check_name="total_daily_amount", asset_key="core/fct", business_date=TONIGHT,
                   summary="daily_amount fell", cause_scope="job:x", evidence={"baseline": {"expected": 860_000.0}})  # fmt: skip
    d = diagnose(_incident(), [fall], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.keys and d.keys[0].label == f"{column}={partial}", d.keys
    assert f"the fall is in {column}={partial}" in d.cause
