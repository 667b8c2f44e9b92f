"""A source reloaded whole every night (a snapshot) holds only its last load's stamp: its rows show one load day,
so it looked loaded once and never stale, and a fact rebuilt on a snapshot that was not reloaded passed every
check but the lag of its fresh input, diagnosed unknown. Its liveness is its record: the checks record the
latest stamp of every Source a judged table is built from (a control table read only in a WHERE subquery, a
snapshot joined), in the night's one statement; a snapshot that advanced on every night like tonight and did
not tonight fails the check and is the stale input. A snapshot that advanced tonight, and a table loaded once,
raise nothing. Two shapes: a batch-control table that says which day a staging node processes, under a
fact fed by timesheets; an FX-rate snapshot joined to orders. On DuckDB under fakesnow."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db, node_spec

from dw_dagster.checks.calendar import BusinessCalendar
from dw_dagster.checks.freshness import InputFreshnessChecks
from dw_dagster.checks.history import HistorySession, Recorded, input_load_series
from dw_dagster.checks.measure import Binds, measure
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.checks.run_context import CheckRun
from dw_dagster.checks.tonight import Night
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.audit import AuditTrail
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.staleness import source_ages, stale_diagnosis, stopped
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

# The check judges ages against now (an ephemeral instance holds no build of the table): tonight's build is now.
BUILT = datetime.now(UTC).replace(microsecond=0)
TONIGHT = BUILT.date() - timedelta(days=1)
RECORD_NIGHTS = 40


class Shape:
    """A pipeline: its fed input (loaded all day), its snapshot (one stamp, reloaded nightly ``hours`` before
    the build), a table loaded once, the nodes between them and the fact a freshness rule judges."""

    def __init__(self, feed, snapshot, once, nodes, fact):
        self.feed, self.snapshot, self.once, self.nodes, self.fact = feed, snapshot, once, nodes, fact


SHAPES = {
    # The staging node reads BATCH_CONTROL only in WHERE WORK_DATE = (SELECT MAX(BATCH_DATE) ...).
    "batch_control": Shape(
        ("raw_timeclock/timesheets", "RAW", "TIMESHEETS", {"HOURS": "FLOAT", "_RECEIVED_AT": "TIMESTAMP_NTZ"}),
        ("raw_ops/batch_control", "RAW", "BATCH_CONTROL", {"BATCH_DATE": "DATE", "_LOADED_AT": "TIMESTAMP_NTZ"}),
        ("ref/assignments", "REF", "ASSIGNMENTS", {"ASSIGNMENT_ID": "NUMBER(38,0)", "CREATED_AT": "TIMESTAMP_NTZ"}),
        [("stage/stg_timesheets", "CORE", "STG_TIMESHEETS", ["raw_timeclock/timesheets", "raw_ops/batch_control"])],
        ("core/fct_billable_hours", "CORE", "FCT_BILLABLE_HOURS", ["stage/stg_timesheets", "ref/assignments"]),
    ),
    "fx_snapshot": Shape(
        ("raw_shop/orders", "RAW", "ORDERS", {"AMOUNT": "NUMBER(18,2)", "LOADED_AT": "TIMESTAMP_TZ"}),
        ("ref/fx_rates", "REF", "FX_RATES", {"CURRENCY": "VARCHAR", "RATE": "FLOAT", "EXPORTED_AT": "TIMESTAMP_NTZ"}),
        ("ref/countries", "REF", "COUNTRIES", {"COUNTRY": "VARCHAR", "ADDED_AT": "TIMESTAMP_NTZ"}),
        [],
        ("mart/fct_orders_eur", "CORE", "FCT_ORDERS_EUR", ["raw_shop/orders", "ref/fx_rates", "ref/countries"]),
    ),
}  # fmt: skip


def _specs(s: Shape) -> list[dg.AssetSpec]:
    """The sources, and each node: its stamp read from its first input, the others read in its join alone
    (the control table in a WHERE subquery, the snapshot and the once-loaded table joined)."""
    specs = [node_spec(k, f"DB.{sc}.{t}", cols) for k, sc, t, cols in (s.feed, s.snapshot, s.once)]
    stamps = {k: next(c for c, t in cols.items() if t.startswith("TIMESTAMP")) for k, _, _, cols in (s.feed,)}
    for key, schema, name, (first, *others) in [*s.nodes, s.fact]:
        lineage = {"LOADED": [(first, stamps.get(first, "LOADED"))]}
        specs.append(
            node_spec(key, f"DB.{schema}.{name}", {"LOADED": "TIMESTAMP_NTZ"}, lineage, "FROM ...", others)
        )
    return specs


def _metrics(s: Shape) -> MetricsFile:
    stamp = next(c for c, t in s.feed[3].items() if t.startswith("TIMESTAMP"))
    rule = {"asset": s.fact[0], "column": "LOADED", "input": s.feed[0], "input_column": stamp}
    return MetricsFile.model_validate({"freshness": {"inputs": [rule]}})


def _stamp(day: date, hours_before_build: float = 5.5) -> datetime:
    """The snapshot's stamp as loaded for business date ``day``: the evening before its build."""
    return BUILT - timedelta(days=(TONIGHT - day).days, hours=hours_before_build)


def _load(conn, s: Shape, snapshot_stamp: datetime) -> None:
    """The feed loaded every hour of the last two weeks up to 3 h before the build, the fact holding it all;
    the snapshot's rows all stamped ``snapshot_stamp``; the once-loaded table set up 90 days ago."""
    cur = conn.cursor()
    naive = {"TIMESTAMP_NTZ"}
    for key, schema, name, cols in (s.feed, s.snapshot, s.once):
        cur.execute(
            f'CREATE OR REPLACE TABLE "DB"."{schema}"."{name}" ({", ".join(f"{c} {t}" for c, t in cols.items())})'
        )

        def row(at: datetime, cols=cols) -> list:
            return [(at.replace(tzinfo=None) if t in naive else at) if t.startswith("TIMESTAMP")
                    else at.date() if t == "DATE" else "EUR" if t == "VARCHAR" else 1.0 for t in cols.values()]  # fmt: skip

        if key == s.feed[0]:
            stamps = [BUILT - timedelta(hours=3 + h) for h in range(0, 14 * 24, 6)]
        elif key == s.snapshot[0]:
            stamps = [snapshot_stamp] * 3
        else:
            stamps = [BUILT - timedelta(days=90)] * 2
        for at in stamps:
            cur.execute(
                f'INSERT INTO "DB"."{schema}"."{name}" VALUES ({", ".join("?" for _ in cols)})', row(at)
            )
    for _key, schema, name, _ in [*s.nodes, s.fact]:
        cur.execute(f'CREATE OR REPLACE TABLE "DB"."{schema}"."{name}" ("LOADED" TIMESTAMP_NTZ)')
        cur.execute(f'INSERT INTO "DB"."{schema}"."{name}" VALUES (?)', [(BUILT - timedelta(hours=3)).replace(tzinfo=None)])  # fmt: skip


def _record(s: Shape) -> dict[str, dict[date, Recorded]]:
    """The nights before tonight as the checks recorded them: the snapshot's stamp advanced every night,
    the once-loaded table's never did."""
    nights = [TONIGHT - timedelta(days=k) for k in range(1, RECORD_NIGHTS + 1)]
    once = (BUILT - timedelta(days=90)).timestamp()
    return {
        input_load_series(s.snapshot[0]): {d: Recorded(business_date=d, value=_stamp(d).timestamp()) for d in nights},
        input_load_series(s.once[0]): {d: Recorded(business_date=d, value=once) for d in nights},
    }  # fmt: skip


class _Context:
    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance


@pytest.fixture
def conn():
    with diagnosis_db("RAW", "REF", "CORE") as conn:
        yield conn


def _checked(conn, s: Shape, snapshot_stamp: datetime):
    """Tonight's input-freshness check of the fact, measured in one statement, and the night it recorded."""
    _load(conn, s, snapshot_stamp)
    specs = _specs(s)
    checks = InputFreshnessChecks(_metrics(s), specs, [dg.AssetKey.from_user_string(s.fact[0])])
    cur = conn.cursor()
    measured = measure(cur, checks.parts(), Binds())
    found: list = []
    with dg.DagsterInstance.ephemeral() as instance:
        night = Night(
            context=_Context(instance), run=CheckRun(TONIGHT, "test-run", None, None), warehouse=None, ops=None,
            history=None, cause_scopes={}, calendar=BusinessCalendar.model_validate({"holidays": []}), levels={},
            incident_days=set(), past=_record(s), reporter=found.append,
        )  # type: ignore[arg-type]  # fmt: skip
        results, errors = checks.evaluate(night, measured)
    return results, errors, found, night


@pytest.mark.parametrize("shape", SHAPES)
def test_a_snapshot_not_reloaded_fails_the_check_of_the_table_built_from_it(conn, shape):
    s = SHAPES[shape]
    # Not reloaded: the stamp of last night's load, 29.5 h before tonight's build.
    results, errors, found, night = _checked(conn, s, _stamp(TONIGHT - timedelta(days=1)))
    assert not errors
    (result,) = results
    assert not result.passed
    assert s.snapshot[0] in (result.description or "") and s.feed[0] not in (result.description or "")
    assert s.once[0] not in (result.description or "")
    assert found[0].evidence["input"] == s.snapshot[0]
    # Both read sources' stamps are on tonight's record, for the nights after.
    assert (
        night.readings[input_load_series(s.snapshot[0])].value
        == _stamp(TONIGHT - timedelta(days=1)).timestamp()
    )
    assert input_load_series(s.once[0]) in night.readings


@pytest.mark.parametrize("shape", SHAPES)
def test_a_snapshot_reloaded_tonight_and_a_table_loaded_once_pass(conn, shape):
    s = SHAPES[shape]
    results, errors, found, night = _checked(conn, s, _stamp(TONIGHT))
    (result,) = results
    assert result.passed and not errors and not found
    assert night.readings[input_load_series(s.snapshot[0])].value == _stamp(TONIGHT).timestamp()


def _ctx(conn, s: Shape, snapshot_tonight: datetime) -> DiagnosisContext:
    """The diagnosis's context, the record as the checks wrote it, tonight's included."""
    ctx = DiagnosisContext(LineageGraph(_specs(s)), _metrics(s), lambda loc, name: f'"DB"."{loc}"."{name}"',
                           HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip
    tonight = {input_load_series(s.snapshot[0]): snapshot_tonight.timestamp(),
               input_load_series(s.once[0]): (BUILT - timedelta(days=90)).timestamp()}  # fmt: skip
    for series, nights in _record(s).items():
        for day, r in {**nights, TONIGHT: Recorded(business_date=TONIGHT, value=tonight[series])}.items():
            ctx.history.record_metric(series, day, r.value, {}, None, None)  # type: ignore[union-attr]
    return ctx


def _incident() -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=TONIGHT, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


def _lag(s: Shape) -> Finding:
    """The night's only failure: the fact trails its fresh input (it rebuilt the day before's rows)."""
    latest = BUILT - timedelta(hours=3)
    return Finding(
        check_name="input_freshness", asset_key=s.fact[0], business_date=TONIGHT,
        summary=f"{s.fact[0]} holds loads up to {latest - timedelta(days=1)}, but {s.feed[0]} has loads up to {latest}",
        cause_scope="job:x",
        evidence={"input": s.feed[0], "input_latest_load": str(latest), "built_at": BUILT.isoformat(),
                  "table_latest_load": str(latest - timedelta(days=1)), "input_age_hours": [3.0]},
    )  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_table_trailing_a_fresh_input_names_the_snapshot_that_did_not_advance(conn, shape):
    s = SHAPES[shape]
    stale = _stamp(TONIGHT - timedelta(days=1))
    _load(conn, s, stale)
    ctx = _ctx(conn, s, stale)
    d = stale_diagnosis(_incident(), _lag(s), ctx.audited(AuditTrail()))
    assert d is not None and d.classification is CauseClass.STALE_INPUT
    assert d.evidence["stale_tables"] == s.snapshot[0], d.cause
    assert d.cause_asset == s.snapshot[0] and "nothing new since the night before" in d.cause
    assert diagnose(_incident(), [_lag(s)], ctx).classification is CauseClass.STALE_INPUT


@pytest.mark.parametrize("shape", SHAPES)
def test_a_snapshot_that_advanced_tonight_and_a_table_loaded_once_are_not_stale(conn, shape):
    s = SHAPES[shape]
    _load(conn, s, _stamp(TONIGHT))
    ctx = _ctx(conn, s, _stamp(TONIGHT))
    assert stopped(ctx.audited(AuditTrail()), s.fact[0], BUILT, TONIGHT) == []
    assert stale_diagnosis(_incident(), _lag(s), ctx.audited(AuditTrail())) is None
    # Its record read, the once-loaded table is still loaded once: old, and not stale.
    ages = {a.asset: a for a in source_ages(ctx.audited(AuditTrail()), s.fact[0], BUILT, TONIGHT)}
    assert ages[s.snapshot[0]].live and not ages[s.once[0]].live
