"""A unit change found on a total's recorded groups, with no column lineage to say which source table the
values came from: the owners are those of the source that holds the moved subset's key and the measure,
not of whichever source sorts first by name. Two shapes: payments beside a currency-rate lookup, meter
readings beside a calibration table keyed by the same meter."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
import pytest

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.drilldown import Moved, unit_or_sign_diagnosis
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident


def _spec(key: str, columns: list[str], owner: str, deps=()) -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, "VARCHAR") for c in columns])
    table = "DB." + key.replace("/", ".").upper()
    return dg.AssetSpec(
        key, kinds={"coalesce"}, deps=list(deps), owners=[owner],
        metadata={"dagster/table_name": table, "dagster/column_schema": schema, "coalesce/node_type": "Source" if not deps else "Fact"},
    )  # fmt: skip


SHAPES = {
    # (the lookup that sorts first, the source the values came from, the fact, its group key, its measure)
    "payments": (
        ("raw/currency_rates", ["CURRENCY", "RATE"], "team:treasury"),
        ("raw/payments", ["PAYEE_CODE", "AMOUNT", "CURRENCY"], "team:payments"),
        ("core/fct_payments", ["PAYEE_CODE", "AMOUNT"], "team:finance"),
        "PAYEE_CODE", "AMOUNT",
    ),
    "meters": (
        ("raw_meter/calibration", ["METER_ID", "FACTOR"], "team:metrology"),
        ("raw_meter/readings", ["METER_ID", "KWH"], "team:head-end"),
        ("grid/fct_usage", ["METER_ID", "REGION", "KWH"], "team:grid-analytics"),
        "METER_ID", "KWH",
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_the_owners_are_the_source_that_holds_the_key_and_the_measure(shape):
    lookup, source, fact, key, measure = SHAPES[shape]
    specs = [_spec(*lookup), _spec(*source), _spec(*fact[:3], deps=[lookup[0], source[0]])]
    sql = f'SELECT "{key}", SUM("{measure}") AS "VALUE" FROM {{{{ ref(\'X\', \'FACT\') }}}} GROUP BY 1'
    metrics = MetricsFile.model_validate(
        {"totals": [{"name": "t", "owner": "o", "asset": fact[0], "group_keys": [key], "sql": sql}]}
    )
    ctx = DiagnosisContext(
        LineageGraph(specs), metrics, lambda loc, name: f'"DB"."{loc}"."{name}"', None, None
    )
    now = datetime(2026, 6, 24, 5, tzinfo=UTC)
    incident = Incident(
        incident_id="INC-1", cause_key="k", status="open", business_date=date(2026, 6, 23), title="t",
        severity="ERROR", opened_at=now, updated_at=now,
    )  # fmt: skip
    moved = Moved(key, "A-7", measure, 0.001, 40, fact[0], 9_000.0, 9.0, from_history=True)
    finding = Finding(
        asset_key=fact[0], check_name="total_t", severity="ERROR", summary="moved",
        business_date=incident.business_date, cause_scope="job:nightly",
    )  # fmt: skip
    diagnosis = unit_or_sign_diagnosis(incident, finding, metrics.totals[0], moved, ctx, {})
    assert diagnosis.classification is CauseClass.UNIT_CHANGE
    assert source[2] in diagnosis.owners and lookup[2] not in diagnosis.owners, diagnosis.owners
