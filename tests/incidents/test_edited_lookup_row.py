"""A factor on one key's row of a lookup joined on that key alone (a rate card, a price list) is that row
edited: a reference data change. The same factor on a feed of dated rows joined on the key and the date (a
day's exchange rates, a day's tariffs) is tonight's rows posted in another unit: a unit change. Two shapes:
timesheets billed from a rate card (against FX rates by currency and day), orders priced from a price list
(against a daily tariff by product and day). The diagnosis reads only the lineage here: no warehouse."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from diagnosis_db import node_spec

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.drilldown import Moved, unit_or_sign_diagnosis
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident

TONIGHT = date(2026, 10, 27)
N, V, D = "NUMBER(38,0)", "VARCHAR", "DATE"


def _resolve(location: str, name: str) -> str:
    return f'"DB"."{location}"."{name}"'


def _graph(fact: str, lookup: str, key: str, measure: str, dated: bool) -> LineageGraph:
    """``raw/<fact>`` rows joined to ``raw/<lookup>`` on ``key`` (and the day, when ``dated``) into
    ``core/fct``, whose AMOUNT is the fact's quantity times the lookup's ``measure``."""
    on = f'"F"."{key}" = "L"."{key}"' + (' AND "F"."DAY" = "L"."DAY"' if dated else "")
    lookup_columns = {key: V, measure: N, **({"DAY": D} if dated else {})}
    return LineageGraph([
        node_spec(f"raw/{fact}", f"DB.RAW.{fact.upper()}", {key: V, "QTY": N, "DAY": D}),
        node_spec(f"raw/{lookup}", f"DB.RAW.{lookup.upper()}", lookup_columns),
        node_spec(
            "core/fct", "DB.CORE.FCT", {key: V, "AMOUNT": N},
            {key: [(f"raw/{fact}", key)], "AMOUNT": [(f"raw/{fact}", "QTY"), (f"raw/{lookup}", measure)]},
            f"FROM {{{{ ref('RAW', '{fact.upper()}') }}}} \"F\"\n"
            f"INNER JOIN {{{{ ref('RAW', '{lookup.upper()}') }}}} \"L\" ON {on}",
        ),
    ])  # fmt: skip


SHAPES = {
    "rate_card": ("timesheets", "job_grades", "JOB_CODE", "BILL_RATE", "ENG2"),
    "price_list": ("orders", "prices", "SKU", "UNIT_PRICE", "A-100"),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dated", [False, True], ids=["by_key", "by_key_and_day"])
def test_a_factor_on_a_lookup_row_joined_by_its_key_alone_is_that_row_edited(shape, dated):
    fact, lookup, key, measure, value = SHAPES[shape]
    graph = _graph(fact, lookup, key, measure, dated)
    metrics = MetricsFile.model_validate(
        {"totals": [{"name": "billed", "owner": "o", "asset": "core/fct",
                     "sql": "SELECT SUM(\"AMOUNT\") AS \"VALUE\" FROM {{ ref('CORE', 'FCT') }}"}]}
    )  # fmt: skip
    ctx = DiagnosisContext(graph, metrics, _resolve, None, None)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    incident = Incident(incident_id="INC-1", cause_key="k", status="open", title="billed fell",
                        business_date=TONIGHT, severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
    finding = Finding(check_name="total_billed", asset_key="core/fct", business_date=TONIGHT,
                      summary="billed fell", cause_scope="job")  # fmt: skip
    moved = Moved(column=key, value=value, measure=measure, factor=0.1, rows=1, asset=f"raw/{lookup}",
                  before=6200.0, after=620.0)  # fmt: skip
    d = unit_or_sign_diagnosis(incident, finding, metrics.totals[0], moved, ctx, {})
    assert [k.label for k in d.keys] == [f"{key}={value}"]
    if dated:
        assert d.classification is CauseClass.UNIT_CHANGE, d.cause
    else:
        assert d.classification is CauseClass.REFERENCE_DATA_CHANGE, d.cause
        assert f"a lookup joined on {key}, was edited" in d.cause and d.cause_asset == f"raw/{lookup}"
