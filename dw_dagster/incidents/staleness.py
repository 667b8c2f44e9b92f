"""Stale input, per source table: which table stopped receiving rows, and how long before the build.

Every Source table upstream of the asset is read once, reference tables included, in one statement: for
each of its time columns, the latest value and on how many distinct days it was loaded (and, for a table no
freshness rule names that looks stale, a second: the days it loaded on, for the weekdays it never loads). A table loaded on
several days (replicated, appended) whose latest row is older than the allowed input age stopped (for an
input a freshness rule names, the age its input-freshness check allows that night: more after the nights it
does not load on, ``checks/freshness.py`` ``allowed_age``); a table loaded once (a hand-kept map, a catalogue loaded at set-up) is not stale for being old, unless a freshness
rule of the metrics file names it. A table reloaded whole (a snapshot) shows one load day in its rows: the
checks' record of its latest stamp, night by night, says whether it loads (``_judge_by_record``). Time columns are compared as instants, cast to TIMESTAMP_TZ in the
session's UTC: a TIMESTAMP_NTZ column is read as UTC, as replication stamps are; an LTZ or TZ column by its
own zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from dw_dagster.checks.calendar import routine_weekdays
from dw_dagster.checks.freshness import (
    CADENCE_LOOKBACK_DAYS,
    INPUT_FRESHNESS_CHECK,
    advancing_nights,
    allowed_age,
    quiet_nights,
    quiet_weekdays,
    stalled_nights,
)
from dw_dagster.checks.history import Recorded, input_load_series
from dw_dagster.checks.metrics import InputFreshness
from dw_dagster.incidents.evidence import DiagnosisContext, replication_of
from dw_dagster.incidents.structure import sources_upstream, table, time_columns
from dw_dagster.records.incidents import CauseClass, Diagnosis, Finding, Incident, KeyGap
from dw_dagster.sql import quote_identifier

LIVE_DAYS = 3
"""A table loaded on at least this many distinct days of the last ``LIVE_WINDOW_DAYS`` before the build is
fed continuously (not a one-off load, not a map edited now and then)."""
LIVE_WINDOW_DAYS = 14
DEFAULT_MAX_AGE_HOURS = 26.0
QUIET_WINDOW_DAYS = 28
"""Four of each weekday: the days a table without a freshness rule loaded on show the weekdays it does not
load on (a feed of business days), as an input's own record shows them to its check."""


@dataclass
class SourceAge:
    asset: str
    column: str
    latest: datetime | None
    load_days: int
    age_hours: float | None
    live: bool
    """Fed continuously (a freshness rule names it, or it loaded on ``LIVE_DAYS`` of the last two weeks)."""
    allowed_hours: float
    """The age it may have at the build."""
    stalled: int = 0
    """An input a freshness rule names whose latest load did not advance tonight: the nights like tonight on
    which its record shows it advanced, every one (``freshness.stalled_nights``); else 0."""

    @property
    def stale(self) -> bool:
        return self.live and (
            self.latest is None or (self.age_hours or 0) > self.allowed_hours or self.stalled > 0
        )

    @property
    def shown(self) -> str:
        if self.latest is None:
            return f"{self.asset} has no rows"
        stall = (
            f"; nothing new since the night before, though it loaded on each of the {self.stalled} nights like "
            "tonight on record"
            if self.stalled
            else ""
        )
        return (
            f"{self.asset} (latest {self.column} {self.latest:%Y-%m-%d %H:%M}, {self.age_hours:.1f} h before the "
            f"build{stall})"
        )


def _utc(v: object) -> datetime | None:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if hasattr(v, "year") and hasattr(v, "month"):
        return datetime(v.year, v.month, v.day, tzinfo=UTC)  # type: ignore[attr-defined]
    return None


def allowed_hours(ctx: DiagnosisContext, rule: InputFreshness, day: date) -> float:
    """The age the input-freshness check allows ``rule``'s input on business date ``day``, from the input's
    recorded loads as the check reads them."""
    return judged_inputs(ctx, [rule], day)[rule.input][0]


def judged_inputs(
    ctx: DiagnosisContext, rules: list[InputFreshness], day: date
) -> dict[str, tuple[float, int]]:
    """Per input of ``rules``: the age its check allows on business date ``day``, and the nights like it on
    which its latest load advanced when it did not on ``day`` (``freshness.stalled_nights``; else 0), from
    its recorded loads as the check reads them and the night's own (recorded by the night's checks run)."""
    calendar = ctx.metrics.calendar
    out = {}
    for rule in rules:
        tonight, past = _load_record(ctx, rule.input, day)
        stalled = stalled_nights(tonight.value if tonight else None, past, day, calendar)
        out[rule.input] = (allowed_age(rule, past, day, calendar).hours, stalled)
    return out


def _load_record(
    ctx: DiagnosisContext, source: str, day: date
) -> tuple[Recorded | None, dict[date, Recorded]]:
    """The source's latest load as the checks recorded it on business date ``day`` (None when not), and its
    record of the nights before. Read once per diagnosis (the audited history keeps what it read)."""
    past = dict(
        ctx.history.metric_history(
            input_load_series(source), day + timedelta(days=1), CADENCE_LOOKBACK_DAYS + 1
        )
    )
    return past.pop(day, None), past


def source_ages(ctx: DiagnosisContext, asset: str, built_at: datetime, day: date) -> list[SourceAge]:
    """The age of every Source table upstream of ``asset`` at ``built_at``, the build of business date
    ``day`` (one statement)."""
    parts, meta, params = [], [], []
    since = built_at - timedelta(days=LIVE_WINDOW_DAYS)
    rules = {r.input: r for r in ctx.metrics.freshness.inputs}
    for key in sources_upstream(ctx.graph, asset):
        tbl = table(ctx.graph, key)
        columns = [rules[key].input_column] if key in rules else time_columns(ctx.graph, key)
        for c in columns:
            q = quote_identifier(c)
            parts.append(
                f"SELECT {len(meta)} AS I, MAX(CAST({q} AS TIMESTAMP_TZ)) AS LATEST,"
                f" COUNT(DISTINCT CASE WHEN CAST({q} AS TIMESTAMP_TZ) >= ? THEN CAST({q} AS DATE) END) AS DAYS"
                f" FROM {tbl}"
            )
            params.append(since)
            meta.append((key, c))
    if not parts:
        return []
    rows = ctx.rows(
        f"the latest row of each source table upstream of {asset}", "\nUNION ALL\n".join(parts), tuple(params)
    )
    judged = judged_inputs(ctx, [r for k, r in rules.items() if any(m[0] == k for m in meta)], day)
    best: dict[str, SourceAge] = {}
    for i, latest, days in rows or []:
        key, column = meta[int(i)]
        when = _utc(latest)
        age = (built_at - when).total_seconds() / 3600 if when else None
        rule = rules.get(key)
        limit, stalled = judged[key] if rule else (DEFAULT_MAX_AGE_HOURS, 0)
        live = rule is not None or int(days or 0) >= LIVE_DAYS
        found = SourceAge(key, column, when, int(days or 0), age, live, limit, stalled)
        # A table's latest row is its latest across its time columns.
        if key not in best or (when and (best[key].latest is None or when > best[key].latest)):
            best[key] = found
    recorded = {
        a.asset
        for a in _judge_by_record(ctx, [a for a in best.values() if a.asset not in rules and not a.live], day)
    }
    # A table judged by its record has its quiet nights from it.
    unruled = [
        a
        for a in best.values()
        if a.stale and a.latest is not None and a.asset not in rules and a.asset not in recorded
    ]
    if unruled:
        _allow_quiet_nights(ctx, unruled, built_at, day)
    return list(best.values())


def _judge_by_record(ctx: DiagnosisContext, ages: list[SourceAge], day: date) -> list[SourceAge]:
    """The tables among ``ages`` (no rule names them, their rows show fewer than ``LIVE_DAYS`` load days)
    whose latest load, as the input-freshness checks record it night by night (``input_load`` series, for
    each Source a checked table is built from), advanced on every night like ``day`` on record: a snapshot
    reloaded whole (a batch-control table, FX rates, an export), whose rows hold only the last load. Each is
    live, allowed the default age and 24 h for each night its record shows it does not load on, and stalled
    when its load did not advance on ``day``; returned. A table loaded once never advances: it stays as its
    rows say."""
    calendar = ctx.metrics.calendar
    judged = []
    for a in ages:
        tonight, past = _load_record(ctx, a.asset, day)
        if not advancing_nights(past, day, calendar):
            continue
        a.live = True
        a.allowed_hours = DEFAULT_MAX_AGE_HOURS + 24 * len(
            quiet_nights(quiet_weekdays(past, calendar), day, calendar)
        )
        a.stalled = stalled_nights(tonight.value if tonight else None, past, day, calendar)
        judged.append(a)
    return judged


def _allow_quiet_nights(ctx: DiagnosisContext, ages: list[SourceAge], built_at: datetime, day: date) -> None:
    """A table no freshness rule names, older than the default age, is allowed 24 h more for each night up to
    business date ``day`` on which its own loads of the last four weeks show it does not load (the weekend
    of a feed of business days, ``calendar.routine_weekdays``; the calendar's holidays), as the input-freshness
    check allows an input by its record (``freshness.quiet_nights``). One statement, only when such a table
    looks stale: a Monday's Friday load is no stalled replication, a missed business day still is."""
    until = built_at.astimezone(UTC).date()
    since = until - timedelta(days=QUIET_WINDOW_DAYS)
    parts, params = [], []
    for i, a in enumerate(ages):
        loaded = f"CAST(CAST({quote_identifier(a.column)} AS TIMESTAMP_TZ) AS DATE)"
        parts.append(
            f"SELECT DISTINCT {i} AS I, {loaded} AS D FROM {table(ctx.graph, a.asset)}"
            f" WHERE {loaded} >= ? AND {loaded} < ?"
        )
        params += [since, until]
    rows = ctx.rows(
        "the days of the last four weeks each source table that looks stale loaded on",
        "\nUNION ALL\n".join(parts),
        tuple(params),
    )
    if rows is None:
        return  # unmeasured (noted): the default age stands
    days: dict[int, set[date]] = {}
    for i, d in rows:
        days.setdefault(int(i), set()).add(d.date() if isinstance(d, datetime) else d)
    window = [since + timedelta(days=k) for k in range(QUIET_WINDOW_DAYS)]
    for i, a in enumerate(ages):
        quiet = routine_weekdays({d: d not in days.get(i, set()) for d in window})
        if len(quiet) < 7:  # a table quiet every day has no cadence: it stopped
            a.allowed_hours += 24 * len(quiet_nights(quiet, day, ctx.metrics.calendar))


def stopped(ctx: DiagnosisContext, asset: str, built_at: datetime, day: date) -> list[SourceAge]:
    return [a for a in source_ages(ctx, asset, built_at, day) if a.stale]


def feeding_systems(ctx: DiagnosisContext, keys: list[str]) -> list[str]:
    """The systems that feed the stopped tables (a replication task, a hand-kept sheet)."""
    return list(dict.fromkeys(s for k in keys for s in replication_of(ctx, k)))


def built_at(finding: Finding, ctx: DiagnosisContext) -> datetime:
    """When the night's build ran: the finding's, else the morning after the business date at the cutoff."""
    for name in ("built_at", "run_end_time", "run_start_time"):
        value = finding.evidence.get(name)
        if isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
                return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
            except ValueError:
                pass
    tz = ctx.metrics.business_day
    day = finding.business_date + timedelta(days=1)
    return datetime.combine(day, time(tz.cutoff_hour), ZoneInfo(tz.timezone)).astimezone(UTC)


def stale_diagnosis(
    incident: Incident, finding: Finding, ctx: DiagnosisContext, stalled_only: bool = False
) -> Diagnosis | None:
    """Stale input, per source table: the tables that stopped, by how long, and who feeds them; None when
    no source stopped and the input-freshness finding does not say its input was older than its rule allows
    (a table that only trails a fresh input has another cause: a build that left rows out, a skipped load).
    With ``stalled_only`` (rows went missing), only the inputs whose load did not advance on a night their
    record says it always does (``SourceAge.stalled``): a feed that delivered nothing tonight explains the
    rows that went, a table that merely looks old beside a partial load does not."""
    # The rule whose input the finding names (a table fed by two inputs has a rule for each), else its first.
    rules = [r for r in ctx.metrics.freshness.inputs if r.asset == finding.asset_key]
    named = getattr(finding.evidence.get("input"), "value", finding.evidence.get("input"))
    rule = next((r for r in rules if r.input == named), rules[0] if rules else None)
    if stalled_only:
        upstream = set(sources_upstream(ctx.graph, finding.asset_key))
        inputs = [r for r in ctx.metrics.freshness.inputs if r.input in upstream]
        # The inputs' records first (one read): the tables are read only when one of them stalled.
        if not any(stalled for _, stalled in judged_inputs(ctx, inputs, finding.business_date).values()):
            return None
    built = built_at(finding, ctx)
    stale = stopped(ctx, finding.asset_key, built, finding.business_date)
    if stalled_only:
        stale = [a for a in stale if a.stalled]
        if not stale:
            return None
    if not stale and (
        rule is None
        or finding.check_name != INPUT_FRESHNESS_CHECK
        or not _input_too_old(finding, _allowed_by_check(ctx, rule, finding))
    ):
        # Nothing stopped: a table that only trails its input (the input is within its age) is not stale
        # input; the other classifiers, and the night's other findings, get their turn.
        return None
    keys = [a.asset for a in stale] or [rule.input]  # type: ignore[union-attr]
    systems = feeding_systems(ctx, keys)
    path = ctx.graph.path(systems[0], finding.asset_key) if systems else [*keys, finding.asset_key]
    age = _number(finding.evidence.get("input_age_hours"))
    named = "; ".join(a.shown for a in stale)
    cause = (
        f"{finding.asset_key} was rebuilt on stale input: "
        + (
            named
            if stale
            else f"the latest load of {keys[0]} is {age:.1f} h older than the build"
            if isinstance(age, float)
            else finding.summary
        )
        + (f". {', '.join(systems)} has delivered nothing new (replication stalled?)." if systems else ".")
    )
    evidence = {k: v for k, v in finding.evidence.items() if isinstance(v, int | float | str)}
    evidence["stale_tables"] = ", ".join(a.asset for a in stale) or keys[0]
    if stale and stale[0].age_hours is not None:
        evidence.setdefault("input_age_hours", round(max(a.age_hours or 0 for a in stale), 1))
    first = stale[0] if stale else None
    column = first.column if first else rule.input_column  # type: ignore[union-attr]
    return Diagnosis(
        incident_id=incident.incident_id,
        classification=CauseClass.STALE_INPUT,
        cause=cause,
        evidence=evidence,
        keys=[
            KeyGap(
                column=a.column,
                value=str(a.latest),
                units=0.0,
                rows=0,
                change=f"{a.asset}: no rows since {a.latest} ({a.age_hours:.1f} h before the build)",
            )
            for a in stale
            if a.latest is not None
        ],
        upstream_change=f"no new rows from {', '.join(systems or keys)}",
        cause_asset=keys[0],
        path=path,
        owners=ctx.graph.owners_on(systems or keys),
        test_query=f"SELECT MAX({quote_identifier(column)}) AS LATEST_LOAD FROM {table(ctx.graph, keys[0])}",
    )


def _allowed_by_check(ctx: DiagnosisContext, rule: InputFreshness, finding: Finding) -> float:
    """The age the input-freshness check allowed that night, as its finding records it (recomputed for a
    finding recorded before it did)."""
    recorded = _number(finding.evidence.get("allowed_age_hours"))
    return recorded if recorded is not None else allowed_hours(ctx, rule, finding.business_date)


def _input_too_old(finding: Finding, limit_hours: float) -> bool:
    """The input-freshness finding says its input was older than allowed, or had no loads at all (not only
    that the table trails it). A finding that does not carry the input's age says nothing either way and is
    taken at its word."""
    age = _number(finding.evidence.get("input_age_hours"))
    if age is not None:
        return age > limit_hours
    latest = finding.evidence.get("input_latest_load")
    return latest is None or latest == "None"


def _number(value: object) -> float | None:
    """A figure of a check's metadata as the finding carries it: a number, a metadata value, or the one-item
    list a recorded finding holds it as (``[31.5]``)."""
    value = getattr(value, "value", value)
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
