"""A night's incident is explained by the first of its findings that a classifier explains, in priority order:
a finding that explains nothing (a total that moved a little, a table that only trails a fresh input) does
not make the whole incident ``unknown`` when a real fault is among the others. An input that only trails is
not stale input; an input older than its rule allows still is. Two shapes: payments read straight from a
replicated journal, and meter readings joined to a meter register for their region. On DuckDB under
fakesnow, with the totals' histories as the checks record them."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import dagster as dg
import pytest
from diagnosis_db import diagnosis_db

from dw_dagster.checks.history import HistorySession, input_load_series
from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.context.lineage import LineageGraph
from dw_dagster.incidents.audit import AuditTrail
from dw_dagster.incidents.diagnosis import diagnose
from dw_dagster.incidents.evidence import DiagnosisContext
from dw_dagster.incidents.staleness import stale_diagnosis, stopped
from dw_dagster.records.incidents import CauseClass, Finding, Incident
from dw_dagster.warehouse.ops import OpsSchema

TONIGHT = date(2026, 6, 23)
BUILT = datetime.combine(TONIGHT + timedelta(days=1), time(5), UTC)


class Shape:
    """A pipeline: its source tables (the replicated one first), the fact the totals read, the group key."""

    def __init__(self, name, group, usual, sources, fact, measure):
        self.name, self.group, self.usual = name, group, usual
        self.sources, self.fact, self.measure = sources, fact, measure

    @property
    def input(self) -> str:
        return self.sources[0][0]


SHAPES = {
    "payments": Shape(
        "payments", "CHANNEL",
        {"web": 250_000.0, "mobile": 400_000.0, "branch": 150_000.0, "phone": 60_000.0},
        [("raw/journal", "RAW", "JOURNAL", {"CHANNEL": "VARCHAR", "AMOUNT": "NUMBER(18,2)", "_LOADED_AT": "TIMESTAMP_NTZ"})],
        ("core/fct_payments", "CORE", "FCT_PAYMENTS", {"CHANNEL": "VARCHAR", "AMOUNT": "NUMBER(18,2)"}),
        "AMOUNT",
    ),
    "meters": Shape(
        "meters", "REGION",
        {"North": 41_000.0, "South": 38_000.0, "East": 22_000.0, "West": 9_000.0},
        [("raw_meter/readings", "RAW", "READINGS", {"METER_ID": "NUMBER(38,0)", "KWH": "FLOAT", "READ_AT": "TIMESTAMP_NTZ"}),
         ("ref/meters", "REF", "METERS", {"METER_ID": "NUMBER(38,0)", "REGION": "VARCHAR"})],
        ("grid/fct_readings", "GRID", "FCT_READINGS", {"REGION": "VARCHAR", "KWH": "FLOAT"}),
        "KWH",
    ),
}  # fmt: skip


def _spec(key: str, table: str, columns: dict[str, str], deps=(), node="Source") -> dg.AssetSpec:
    schema = dg.TableSchema(columns=[dg.TableColumn(c, t) for c, t in columns.items()])
    return dg.AssetSpec(key, kinds={"coalesce"}, deps=list(deps),
                        metadata={"dagster/table_name": table, "dagster/column_schema": schema,
                                  "coalesce/node_type": node})  # fmt: skip


def _time_column(shape: Shape) -> str:
    return next(c for c, t in shape.sources[0][3].items() if t.startswith("TIMESTAMP"))


def _ctx(conn, shape: Shape, rule: bool = True) -> DiagnosisContext:
    fact, fschema, fname, _ = shape.fact
    sql = f"SELECT \"{shape.group}\", SUM(\"{shape.measure}\") AS \"VALUE\" FROM {{{{ ref('{fschema}', '{fname}') }}}} GROUP BY 1"  # fmt: skip
    metrics = MetricsFile.model_validate({
        "totals": [
            {"name": "daily_value", "owner": "finance", "asset": fact, "group_keys": [shape.group], "hurts": "down", "sql": sql},
            {"name": "daily_other", "owner": "finance", "asset": fact, "group_keys": [shape.group], "hurts": "both", "sql": sql},
        ],
        "freshness": {"inputs": [{"asset": fact, "column": _time_column(shape),
                                  "input": shape.input, "input_column": _time_column(shape), "max_input_age_hours": 26}]
                      if rule else []},
    })  # fmt: skip
    specs = [_spec(k, f"DB.{s}.{t}", cols) for k, s, t, cols in shape.sources]
    specs.append(_spec(fact, f"DB.{fschema}.{fname}", shape.fact[3], [k for k, *_ in shape.sources], "Fact"))
    return DiagnosisContext(LineageGraph(specs), metrics, lambda loc, name: f'"DB"."{loc}"."{name}"',
                            HistorySession(conn, OpsSchema("DB")), conn.cursor())  # fmt: skip


@pytest.fixture
def conn():
    with diagnosis_db("RAW", "REF", "CORE", "GRID") as conn:
        yield conn


def _load(
    conn,
    shape: Shape,
    latest_hours_before_build: float,
    built: datetime = BUILT,
    days=range(7),
    span: int = 14,
) -> None:
    """The replicated source loaded every day of the last ``span`` days (of ``days``, Monday 0), its latest
    load this long before the build; a reference table (where the shape has one) loaded once, long ago."""
    cur = conn.cursor()
    for _key, schema, name, cols in shape.sources:
        cur.execute(
            f'CREATE OR REPLACE TABLE "DB"."{schema}"."{name}" ({", ".join(f"{c} {t}" for c, t in cols.items())})'
        )
    _, schema, name, cols = shape.sources[0]
    stamp = _time_column(shape)
    latest = (built - timedelta(hours=latest_hours_before_build)).replace(tzinfo=None)
    for d in range(span):
        at = latest - timedelta(days=d)
        if at.weekday() not in days:
            continue
        values = ", ".join("?" for _ in cols)
        row = [at if c == stamp else (1 if t.startswith("NUMBER(38") else 10.0 if t != "VARCHAR" else "web")
               for c, t in cols.items()]  # fmt: skip
        cur.execute(f'INSERT INTO "DB"."{schema}"."{name}" VALUES ({values})', row)


def _record(ctx: DiagnosisContext, name: str, group: str, nights: dict[date, dict[str, float]]) -> None:
    for day, groups in nights.items():
        labelled = {f"{group}={g}": v for g, v in groups.items()}
        ctx.history.record_metric(name, day, sum(labelled.values()), labelled, None, None)  # type: ignore[union-attr]


def _incident(day: date = TONIGHT) -> Incident:
    now = datetime.now(UTC)
    return Incident(incident_id="INC-1", cause_key="k", status="open", business_date=day, title="t",
                    severity="ERROR", opened_at=now, updated_at=now)  # fmt: skip


def _total(shape: Shape, name: str, expected: float, day: date = TONIGHT) -> Finding:
    return Finding(check_name=f"total_{name}", asset_key=shape.fact[0], business_date=day,
                   summary=f"{name} moved", cause_scope="job:x", evidence={"baseline": {"expected": expected}})  # fmt: skip


def _freshness(shape: Shape, age_hours: float) -> Finding:
    """The input-freshness finding as the store gives it back (a check's figure is a one-item list)."""
    latest = BUILT - timedelta(hours=age_hours)
    return Finding(
        check_name="input_freshness", asset_key=shape.fact[0], business_date=TONIGHT,
        summary=f"{shape.fact[0]} holds loads up to {latest - timedelta(hours=20)}, but {shape.input} has loads up to {latest}",
        cause_scope="job:x",
        evidence={"input_latest_load": str(latest), "table_latest_load": str(latest - timedelta(hours=20)),
                  "built_at": BUILT.isoformat(), "input_age_hours": [round(age_hours, 1)]},
    )  # fmt: skip


def _nights(ctx: DiagnosisContext, shape: Shape, partial: str, day: date = TONIGHT) -> None:
    """``daily_value`` lost half of one group on ``day`` (a partial load); ``daily_other`` is 3% up
    everywhere, a move nothing explains (a false alarm riding on the night)."""
    usual = shape.usual
    before = {day - timedelta(days=k): usual for k in range(1, 8)}
    _record(ctx, "daily_value", shape.group,
            before | {day: {g: (v * 0.5 if g == partial else v) for g, v in usual.items()}})  # fmt: skip
    _record(ctx, "daily_other", shape.group, before | {day: {g: v * 1.03 for g, v in usual.items()}})


@pytest.mark.parametrize("shape", SHAPES)
def test_a_finding_that_explains_nothing_does_not_hide_the_fault_behind_it(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _load(conn, s, 3)
    partial = list(s.usual)[1]
    _nights(ctx, s, partial)
    alarm = _total(s, "daily_other", sum(s.usual.values()))
    fault = _total(s, "daily_value", sum(s.usual.values()))
    # Alone, the false alarm explains nothing ...
    assert diagnose(_incident(), [alarm], ctx).classification is CauseClass.UNKNOWN
    # ... and ranked first, it does not make the night's fault unknown.
    d = diagnose(_incident(), [alarm, fault], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.keys and d.keys[0].label == f"{s.group}={partial}", d.keys
    assert d.evidence["explained_by"] == f"total_daily_value on {s.fact[0]}"
    assert any("total_daily_other" in n and "explained nothing" in n for n in d.notes), d.notes
    # Every statement of both attempts is on the audit trail.
    purposes = [q.purpose for q in d.queries]
    assert any("daily_other" in p for p in purposes) and any("daily_value" in p for p in purposes)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_table_that_only_trails_a_fresh_input_is_not_stale_input(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _load(conn, s, 3)  # the input loaded 3 h before the build: within its 26 h
    partial = list(s.usual)[2]
    _nights(ctx, s, partial)
    lag = _freshness(s, 3)
    assert stale_diagnosis(_incident(), lag, ctx.audited(AuditTrail())) is None
    # The input-freshness finding ranks first; the total's fall explains the night.
    d = diagnose(_incident(), [_total(s, "daily_value", sum(s.usual.values())), lag], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.keys[0].label == f"{s.group}={partial}"
    assert d.evidence["explained_by"] == f"total_daily_value on {s.fact[0]}"


@pytest.mark.parametrize("shape", SHAPES)
def test_an_input_older_than_its_rule_allows_is_still_stale_input(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _load(conn, s, 40)  # the replicated source stopped 40 h before the build
    _nights(ctx, s, list(s.usual)[0])
    d = diagnose(_incident(), [_total(s, "daily_value", sum(s.usual.values())), _freshness(s, 40)], ctx)
    assert d.classification is CauseClass.STALE_INPUT, d.cause
    assert d.evidence["stale_tables"] == s.input, "the reference table loaded once is not stale"
    assert "explained_by" not in d.evidence, "the top finding explained it"
    # The finding alone says so too, where the source's own rows could not be read.
    conn.cursor().execute(f'DROP TABLE "DB"."{s.sources[0][1]}"."{s.sources[0][2]}"')
    alone = stale_diagnosis(_incident(), _freshness(s, 40), ctx.audited(AuditTrail()))
    assert alone is not None and alone.classification is CauseClass.STALE_INPUT


def _volume(shape: Shape, rows: int, expected: float) -> Finding:
    return Finding(check_name="volume", asset_key=shape.fact[0], business_date=TONIGHT,
                   summary=f"volume of {shape.fact[0]}: {rows} rows", cause_scope="job:x",
                   evidence={"row_count": rows, "baseline": {"expected": expected}})  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_count_that_rose_with_no_copies_explains_nothing(conn, shape):
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _load(conn, s, 3)  # the sources hold no copies
    _nights(ctx, s, list(s.usual)[1])
    rose = _volume(s, 12_000, 10_000.0)
    alone = diagnose(_incident(), [rose], ctx)
    assert alone.classification is CauseClass.UNKNOWN, "a rise is no volume loss"
    assert "exact duplicate rows in" in alone.cause and s.input in alone.cause
    # Beside a false alarm it does not make the night an explained fault ...
    alarm = _total(s, "daily_other", sum(s.usual.values()))
    assert diagnose(_incident(), [alarm, rose], ctx).classification is CauseClass.UNKNOWN
    # ... while a row count that fell is still volume loss.
    assert diagnose(_incident(), [_volume(s, 7_000, 10_000.0)], ctx).classification is CauseClass.VOLUME_LOSS


SUNDAY = TONIGHT - timedelta(days=2)
MONDAY_BUILD = datetime.combine(SUNDAY + timedelta(days=1), time(5), UTC)
FRIDAY_LOAD = 57  # hours before the Monday build: Friday 20:00


def _weekday_feed(ctx: DiagnosisContext, shape: Shape) -> None:
    """The input loads on business days only, at 20:00, as the input-freshness check records its latest load
    each night (the ``input_load`` series it learns the feed's quiet nights from)."""
    for k in range(1, 60):
        day = TONIGHT - timedelta(days=k)
        loaded = day - timedelta(days=max(0, day.weekday() - 4))  # a weekend night holds Friday's load
        at = datetime.combine(loaded, time(20), UTC).timestamp()
        ctx.history.record_metric(input_load_series(shape.input), day, at, {}, None, None)  # type: ignore[union-attr]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_weekday_feeds_weekend_is_not_stale_input_on_the_monday(conn, shape):
    """The check allows a business-day feed 24 h more for each weekend night before the Monday build (26 h
    and 48 h): its Friday load, 57 h old then, is no stale input, and the night's fault is what it is."""
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _weekday_feed(ctx, s)
    _load(conn, s, FRIDAY_LOAD, MONDAY_BUILD, days=range(5))
    partial = list(s.usual)[1]
    _nights(ctx, s, partial, SUNDAY)
    fault = _total(s, "daily_value", sum(s.usual.values()), SUNDAY)
    fault.evidence["built_at"] = MONDAY_BUILD.isoformat()
    # The table trails its input (held Thursday's load): the check's finding, within the allowance it records.
    lag = _freshness(s, FRIDAY_LOAD)
    lag.business_date, lag.evidence["built_at"] = SUNDAY, MONDAY_BUILD.isoformat()
    lag.evidence["allowed_age_hours"] = [74.0]
    assert stale_diagnosis(_incident(SUNDAY), fault, ctx.audited(AuditTrail())) is None
    d = diagnose(_incident(SUNDAY), [lag, fault], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.keys[0].label == f"{s.group}={partial}"
    # Where the input's own rows cannot be read, the finding is judged by the allowance it records, or, a
    # finding recorded before the check recorded it, by the same allowance from the input's record.
    conn.cursor().execute(f'DROP TABLE "DB"."{s.sources[0][1]}"."{s.sources[0][2]}"')
    assert stale_diagnosis(_incident(SUNDAY), lag, ctx.audited(AuditTrail())) is None
    del lag.evidence["allowed_age_hours"]
    assert stale_diagnosis(_incident(SUNDAY), lag, ctx.audited(AuditTrail())) is None
    lag.evidence["allowed_age_hours"] = [26.0]
    assert stale_diagnosis(_incident(SUNDAY), lag, ctx.audited(AuditTrail())) is not None


@pytest.mark.parametrize("shape", SHAPES)
def test_a_weekday_feed_no_rule_names_is_judged_by_the_weekdays_it_loads_on(conn, shape):
    """Without a freshness rule, the source's own loads of the last four weeks show the weekend it never
    loads on: its Friday load, 57 h old at the Monday build, is no stale input (it was, past a flat 26 h); as
    old at a Wednesday build, Monday's and Tuesday's loads missed, it is."""
    s = SHAPES[shape]
    ctx = _ctx(conn, s, rule=False)
    _load(conn, s, FRIDAY_LOAD, MONDAY_BUILD, days=range(5), span=28)
    assert stopped(ctx.audited(AuditTrail()), s.fact[0], MONDAY_BUILD, SUNDAY) == []
    fault = _total(s, "daily_value", sum(s.usual.values()), SUNDAY)
    fault.evidence["built_at"] = MONDAY_BUILD.isoformat()
    assert stale_diagnosis(_incident(SUNDAY), fault, ctx.audited(AuditTrail())) is None
    wednesday = MONDAY_BUILD + timedelta(days=2)
    (table,) = stopped(ctx.audited(AuditTrail()), s.fact[0], wednesday, SUNDAY + timedelta(days=2))
    assert (table.asset, round(table.age_hours or 0)) == (s.input, FRIDAY_LOAD + 48)
    # A feed that loads every day is still stale past the default age on any night.
    _load(conn, s, 30, MONDAY_BUILD, span=28)
    (daily,) = stopped(ctx.audited(AuditTrail()), s.fact[0], MONDAY_BUILD, SUNDAY)
    assert daily.asset == s.input


@pytest.mark.parametrize("shape", SHAPES)
def test_a_weekday_feed_that_missed_a_business_day_is_stale_input(conn, shape):
    """The same feed, as old at a Wednesday build: Monday's and Tuesday's loads never came, which no quiet
    night explains."""
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    _weekday_feed(ctx, s)
    _load(conn, s, FRIDAY_LOAD + 48, days=range(5))
    d = stale_diagnosis(
        _incident(), _total(s, "daily_value", sum(s.usual.values())), ctx.audited(AuditTrail())
    )
    assert d is not None and d.classification is CauseClass.STALE_INPUT
    assert d.evidence["stale_tables"] == s.input


@pytest.mark.parametrize("shape", SHAPES)
def test_of_two_totals_that_moved_the_one_on_the_table_nearer_the_cause_is_read_first(conn, shape):
    """A source total and the fact's, both short tonight, the fact's finding listed first: the source's is
    read first, as its table is above the fact's in the lineage (its rows are where the loss began)."""
    s = SHAPES[shape]
    ctx = _ctx(conn, s)
    key, schema, name, cols = s.sources[0]
    by = next(c for c, t in cols.items() if not t.startswith("TIMESTAMP"))
    sql = f"SELECT \"{by}\", COUNT(*) AS \"VALUE\" FROM {{{{ ref('{schema}', '{name}') }}}} GROUP BY 1"
    source_total = {"name": "source_rows", "owner": "ops", "asset": key, "group_keys": [by], "sql": sql}
    ctx.metrics = MetricsFile.model_validate(
        {"totals": [*(t.model_dump(exclude_none=True) for t in ctx.metrics.totals), source_total]}
    )
    _load(conn, s, 3)
    partial = list(s.usual)[1]
    _nights(ctx, s, partial)
    usual = {"a": 500.0, "b": 300.0}
    before = {TONIGHT - timedelta(days=k): usual for k in range(1, 8)}
    _record(ctx, "source_rows", by, before | {TONIGHT: {"a": 250.0, "b": 300.0}})
    fact = _total(s, "daily_value", sum(s.usual.values()))
    source = Finding(check_name="total_source_rows", asset_key=key, business_date=TONIGHT,
                     summary="source_rows moved", cause_scope="job:x", evidence={"baseline": {"expected": 800.0}})  # fmt: skip
    d = diagnose(_incident(), [fact, source], ctx)
    assert d.classification is CauseClass.VOLUME_LOSS, d.cause
    assert d.evidence["total"] == "source_rows" and "explained_by" not in d.evidence, d.evidence
    assert d.keys and d.keys[0].label == f"{by}=a", d.keys
