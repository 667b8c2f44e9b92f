"""Duplicate business keys (``checks/business_keys.py``) on two worlds' own Coalesce projects, in the API's
shape: the e-commerce fact whose ORDER_LINE_ID is declared its business key with no unique test, and the bill
payments' fact and marts, one of which declares a key that is only part of its grain. The key is read from
the node metadata (``isBusinessKey``; none on a node that tracks changes), the tables' rows and distinct keys
are a part of the night's one statement, a key unique on the recorded nights that repeats tonight is a
finding, one that repeats every night is not, and the diagnosis classes the finding as duplication, naming
the source that holds the copies. On DuckDB under fakesnow, no world."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.business_keys import (
    BUSINESS_KEY_CHECK,
    BusinessKeys,
    judge_repeats,
    keyed,
    repeats_series,
)
from dw_dagster.checks.history import HistorySession, Recorded
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.coalesce.specs import load_coalesce_asset_specs
from dw_dagster.coalesce.state import CoalesceEnvironmentData, CoalesceWorkspaceData
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceNode
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.sql import table_parts
from dw_dagster.warehouse.ops import OpsSchema
from dw_local.coalesce_sim.api_shapes import node_detail
from dw_local.coalesce_sim.project import load_project

WORLDS = Path(__file__).resolve().parents[2] / "local" / "dw_local" / "scenarios" / "worlds"
TONIGHT = date(2026, 4, 14)

# world: (its environment, the fact loaded twice and the source that holds the copies, the keys the
#         project declares, a table whose declared key is part of its grain: it repeats every night)
SHAPES = {
    "ecommerce": (
        "2",
        "sales/fct_sales",
        "raw_shop/order_lines",
        {"sales/dim_store": ["STORE_ID"], "sales/dim_product": ["PRODUCT_ID"],
         "sales/fct_sales": ["ORDER_LINE_ID"], "mart/mart_channel_revenue": ["CHANNEL"],
         "mart/mart_category_revenue": ["CATEGORY"]},
        "mart/mart_category_revenue",
    ),
    "billpay": (
        "11",
        "core/fct_bill_payments",
        "payhub_raw/bill_payments",
        {"core/dim_biller": ["BILLER_ID"], "core/dim_payee": ["PAYEE_CODE"],
         "core/fct_bill_payments": ["PAYMENT_ID"], "mart/mart_biller_remittance": ["BILLER_ID"],
         "mart/mart_remittance_mtd": ["BILLER_CATEGORY"]},
        "mart/mart_biller_remittance",
    ),
}  # fmt: skip


def _nodes(world: str, environment: str) -> list[dict]:
    project = load_project(WORLDS / world / "project.yaml")
    env = project.environment(environment)
    return [node_detail(n, env) for n in project.file.nodes]


def _specs(raw: list[dict], environment: str) -> list[dg.AssetSpec]:
    data = CoalesceWorkspaceData(
        base_url="https://app.coalescesoftware.io",
        fetched_at=datetime.now(UTC),
        environments=[
            CoalesceEnvironmentData(
                environment=CoalesceEnvironment(id=environment, name="PROD"),
                nodes=[CoalesceNode.model_validate(n) for n in raw],
                jobs=[],
            )
        ],
    )
    return load_coalesce_asset_specs(data)


@pytest.mark.parametrize("world", SHAPES)
def test_the_business_key_is_read_from_the_node_and_not_from_a_node_that_tracks_changes(world):
    environment, fact, _, declared, _ = SHAPES[world]
    raw = _nodes(world, environment)
    found = {k.to_user_string(): key.columns for k, key in keyed(_specs(raw, environment)).items()}
    assert found == declared
    # The fact as a history (type 2): a row per version of its key, which repeats by design.
    name = fact.split("/")[1].upper()
    for node in raw:
        if node["name"] == name:
            node["metadata"]["columns"][-1]["isChangeTracking"] = True
    assert fact not in {k.to_user_string() for k in keyed(_specs(raw, environment))}


def test_a_key_that_repeated_on_a_night_recorded_is_not_unique_by_design():
    nights = {TONIGHT - timedelta(days=d): Recorded(business_date=TONIGHT, value=0.0) for d in range(1, 8)}
    assert judge_repeats(62, 31, nights, set(), ["ADJUSTMENT_ID"]).severity == "ERROR"
    assert judge_repeats(31, 31, nights, set(), ["ADJUSTMENT_ID"]).severity is None
    once = TONIGHT - timedelta(days=3)
    seldom = {**nights, once: nights[once].model_copy(update={"value": 2.0})}
    assert judge_repeats(40, 14, seldom, set(), ["HEALTH_BOARD"]).severity is None
    # An incident's night is left out: the key still held on every other night.
    assert judge_repeats(62, 31, seldom, {once}, ["ADJUSTMENT_ID"]).severity == "ERROR"
    # Too few nights recorded (or only incident nights): shown, never an incident.
    assert judge_repeats(62, 31, {}, set(), ["ADJUSTMENT_ID"]).severity == "WARN"
    assert judge_repeats(62, 31, nights, set(nights), ["ADJUSTMENT_ID"]).severity == "WARN"


def _create(cur, specs: list[dg.AssetSpec]) -> dict[str, tuple[str, str, str]]:
    """Every table of the project, with its columns as the node declares them."""
    tables = {}
    for spec in specs:
        table = table_parts(spec.metadata["dagster/table_name"])
        columns = spec.metadata["dagster/column_schema"].columns
        cur.execute(f'CREATE DATABASE IF NOT EXISTS "{table[0]}"')
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{table[0]}"."{table[1]}"')
        cur.execute(
            f'CREATE TABLE "{table[0]}"."{table[1]}"."{table[2]}" ('
            + ", ".join(f'"{c.name}" {c.type}' for c in columns)
            + ")"
        )
        tables[spec.key.to_user_string()] = table
    return tables


def _insert(cur, table: tuple[str, str, str], column: str, values: list, other: str | None = None) -> None:
    """Rows with ``values`` as their key, NULL elsewhere; with ``other``, that column differs in each."""
    named = f'"{column}"' + (f', "{other}"' if other else "")
    for i, v in enumerate(values):
        cur.execute(
            f'INSERT INTO "{table[0]}"."{table[1]}"."{table[2]}" ({named}) VALUES (?{", ?" if other else ""})',
            (v, i) if other else (v,),
        )


@pytest.mark.parametrize("world", SHAPES)
def test_a_key_unique_on_the_recorded_nights_that_repeats_tonight_is_duplication(world):
    environment, fact, source, declared, grain = SHAPES[world]
    specs = _specs(_nodes(world, environment), environment)
    keys = keyed(specs)
    specs_by_key = {s.key.to_user_string(): s for s in specs}
    with diagnosis_db() as conn:
        cur = conn.cursor()
        tables = _create(cur, specs)
        # The source's rows loaded twice, and so the fact's; the mart repeats its key as every night.
        fact_key, grain_key = declared[fact][0], declared[grain][0]
        _insert(cur, tables[source], fact_key, [1, 2, 3, 1, 2, 3])
        _insert(cur, tables[fact], fact_key, [1, 2, 3, 1, 2, 3, None])
        _insert(cur, tables[grain], grain_key, [7, 7, 8])
        checks = BusinessKeys(keys, list(keys))
        sent = len(checks.parts())
        assert sent == len(declared)
        measured = measure(cur, checks.parts(), Binds())
        history = HistorySession(conn, OpsSchema("DB"))
        nights = [TONIGHT - timedelta(days=d) for d in range(1, 8)]
        past = {
            repeats_series(a): {d: Recorded(business_date=d, value=0.0) for d in nights} for a in declared
        }
        past[repeats_series(grain)] = {d: Recorded(business_date=d, value=1.0) for d in nights}
        findings: list[Finding] = []
        night = Night(context=None, run=CheckRun(TONIGHT, "r1", None, "nightly"), warehouse=None,
                      ops=OpsSchema("DB"), history=history, cause_scopes={}, calendar=None, levels={},
                      incident_days=set(), past=past, reporter=findings.append)  # fmt: skip
        results, errors = checks.evaluate(night, measured)
        assert not errors
        failed = {r.asset_key.to_user_string() for r in results if not r.passed}
        assert failed == {fact}, [r.description for r in results]
        (finding,) = findings
        assert finding.check_name == BUSINESS_KEY_CHECK and finding.evidence["repeats"] == 3
        assert night.readings[repeats_series(fact)].flagged
        assert night.readings[repeats_series(grain)].value == 1.0

        ctx = DiagnosisContext(LineageGraph(specs), MetricsFile.model_validate({"totals": []}),
                               lambda loc, name: f'"{loc}"."{name}"', history, cur)  # fmt: skip
        now = datetime.now(UTC)
        incident = Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT,
                            title="t", severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip
        d = diagnose(incident, findings, ctx)
        assert d.classification is CauseClass.DUPLICATION, d.cause
        assert d.cause_asset == source and d.evidence["duplicate_rows"] == 3

        # No exact copies anywhere (the fact's rows that share a key differ in a number): still duplication,
        # named by the repeated keys.
        for t in (tables[source], tables[fact]):
            cur.execute(f'DELETE FROM "{t[0]}"."{t[1]}"."{t[2]}"')
        columns = [
            c for c in specs_by_key[fact].metadata["dagster/column_schema"].columns if c.name != fact_key
        ]
        number = next(c.name for c in columns if c.type.startswith("NUMBER"))
        _insert(cur, tables[fact], fact_key, [1, 2, 3, 1, 2, 3], other=number)
        d = diagnose(incident, findings, ctx)
        assert d.classification is CauseClass.DUPLICATION, d.cause
        assert d.cause_asset == fact and {k.value for k in d.keys} == {"1", "2", "3"}
