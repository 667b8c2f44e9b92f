"""Freshness: a ``FreshnessPolicy`` from each Coalesce job's schedule, and an input-freshness check.

A fresh build of stale input is the green job that built an old number: the input-freshness check compares
the input's latest load (e.g. ``_LOADED_AT`` of the replicated RAW table) with what the built table
holds and with when it was built. Both maxima are one part of the checks run's measurement statement
(``measure.py``); Snowflake answers MAX of a column from micro-partition metadata, without a scan. So is
the latest stamp of every other Source the checked tables are built from (``read_sources``): a snapshot's
rows hold only its last load, and only this record of it says whether it loads.
"""

import calendar as stdlib_calendar
import functools
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import dagster as dg
from croniter import croniter
from sqlglot import exp

from dw_dagster.checks.calendar import ROUTINE_NIGHTS, WEEKDAYS, BusinessCalendar, routine_weekdays
from dw_dagster.checks.history import Reading, Recorded, input_load_series
from dw_dagster.checks.judge import figure
from dw_dagster.checks.keys import table_columns
from dw_dagster.checks.measure import Part, quoted_table
from dw_dagster.checks.metrics import InputFreshness, JobSchedule, MetricsFile
from dw_dagster.checks.tonight import Night
from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.context.specs import key_from_path
from dw_dagster.sql import is_time_type, table_parts

INPUT_FRESHNESS_CHECK = "input_freshness"
CADENCE_LOOKBACK_DAYS = 56
"""The input's loads of the last eight weeks say on which nights it loads."""
MAX_QUIET_NIGHTS = 14
"""A closure longer than two weeks is a feed that stopped, whatever its record says."""
ADVANCED_ON_NIGHTS = "advanced_on_nights"
"""The metadata key of a finding whose input did not load tonight: the nights like tonight it loaded on."""
MIN_ADVANCING_NIGHTS = 14
"""Nights like tonight on which the input's latest load advanced, every one of them, before a night it did not
is stale whatever its age: two weeks, so a feed that skips one night in ten has most likely shown a skip."""
_DAILY = re.compile(r"^(\d{1,2})\s+(\d{1,2})\s+(\*\s+\*\s+\S+)$")


def freshness_policy_for(schedule: JobSchedule) -> dg.FreshnessPolicy:
    """The build must land within ``grace_minutes`` of each scheduled start."""
    grace = timedelta(minutes=schedule.grace_minutes)
    m = _DAILY.match(schedule.cron.strip())
    weekdays = _weekdays(m[3]) if m else None
    if m and weekdays is not None and grace < timedelta(days=1):
        deadline = timedelta(hours=int(m[2]), minutes=int(m[1])) + grace
        if deadline >= timedelta(days=1):
            # A late start plus its grace falls due the next morning: on the day after each scheduled day.
            weekdays = {(d + 1) % 7 for d in weekdays}
        hours, rest = divmod(int((deadline % timedelta(days=1)).total_seconds()), 3600)
        days = "*" if len(weekdays) == 7 else ",".join(map(str, sorted(weekdays)))
        return _cron_policy(f"{rest // 60} {hours} * * {days}", grace, schedule.timezone)
    # Any other cron: a window of a day plus the grace, which still catches a skipped night.
    return dg.FreshnessPolicy.time_window(fail_window=timedelta(days=1) + grace)


@functools.cache
def _weekdays(fields: str) -> frozenset[int] | None:
    """The days of week (Sunday 0) a ``* * DOW`` cron tail runs on; None for a form a next-day shift cannot
    follow (``5#2``, ``5L``). Once a schedule: croniter's expansion was a third of a 10,000-node load made
    once a node (benchmarks/README.md, "load definitions")."""
    try:
        expanded, nth = croniter.expand(f"0 0 {fields}")
    except ValueError:
        return None
    days = expanded[4]
    if nth:
        return None
    return frozenset(range(7)) if days == ["*"] else frozenset(int(d) % 7 for d in days)


@functools.cache
def _cron_policy(deadline_cron: str, lower_bound_delta: timedelta, timezone: str) -> dg.FreshnessPolicy:
    # Dagster walks the cron to its smallest interval for each policy made: once a schedule, not once an asset.
    return dg.FreshnessPolicy.cron(
        deadline_cron=deadline_cron, lower_bound_delta=lower_bound_delta, timezone=timezone
    )


def freshness_policies(
    metrics: MetricsFile, specs: Sequence[dg.AssetSpec]
) -> dict[dg.AssetKey, dg.FreshnessPolicy]:
    """Each spec's freshness policy, by key: that of the first scheduled job that builds it. The layer sets it
    on the spec in the copy it makes anyway (``OperationsComponent.pipeline_specs``)."""
    schedules = metrics.freshness.schedules
    # Each job's policy made once, not once per asset the job builds.
    by_job: dict[str, dg.FreshnessPolicy] = {}
    out = {}
    for spec in specs:
        jobs = spec.metadata.get("coalesce/jobs")
        names = [j["name"] for j in jobs.data] if jobs is not None else []  # type: ignore[union-attr]
        job = next((n for n in names if n in schedules), None)
        if job is None:
            continue
        policy = by_job.get(job)
        if policy is None:
            policy = by_job[job] = freshness_policy_for(schedules[job])
        out[spec.key] = policy
    return out


def _table_of(specs_by_path: Mapping[str, dg.AssetSpec], path: str) -> tuple[str, str, str]:
    parts = table_parts(specs_by_path[path].metadata.get("dagster/table_name"))
    if parts is None:
        raise dg.DagsterInvariantViolationError(f"freshness.inputs: {path} has no Snowflake table name")
    return parts


def _utc(v: datetime | None) -> datetime | None:
    # Read as TIMESTAMP_TZ (_latest), so aware; a naive one would be a UTC stamp, as replication writes them.
    return None if v is None else (v if v.tzinfo else v.replace(tzinfo=UTC))


def _built_at(instance: dg.DagsterInstance, key: dg.AssetKey) -> datetime | None:
    event = instance.get_latest_materialization_event(key)
    mat = event.asset_materialization if event else None
    stamp = mat.metadata.get("dagster/last_updated_timestamp") if mat else None
    if stamp is not None:
        return datetime.fromtimestamp(float(stamp.value), tz=UTC)
    return datetime.fromtimestamp(event.timestamp, tz=UTC) if event else None


def input_freshness_specs(metrics: MetricsFile, specs: Sequence[dg.AssetSpec]) -> list[dg.AssetCheckSpec]:
    """One check a table, over every input a rule names for it: a table fed by two sources (a union of two
    feeds) has a rule for each, and a check named twice on one asset would judge one of them only."""
    rules = metrics.freshness.inputs
    paths = {s.key.to_user_string() for s in specs}
    missing = sorted({p for r in rules for p in (r.asset, r.input) if p not in paths})
    if missing:
        raise dg.DagsterInvariantViolationError(f"freshness.inputs: no such assets {missing}")
    return [
        dg.AssetCheckSpec(
            name=INPUT_FRESHNESS_CHECK,
            asset=key_from_path(asset),
            additional_deps=[key_from_path(r.input) for r in its],
            description=f"Holds {_names([r.input for r in its])}'s latest load, and that load was at most "
            f"{_names([f'{r.max_input_age_hours:g} h' for r in its])} old when the table was built, more after "
            "the nights it does not load (its own cadence); and it, and every other Source table the table is "
            "built from (a control table its filter reads, a snapshot it joins), advanced tonight if it advanced "
            "on every night like tonight on record",
        )
        for asset, its in _by_asset(rules).items()
    ]


def _by_asset(rules: Sequence[InputFreshness]) -> dict[str, list[InputFreshness]]:
    """The rules grouped by the table they judge, in the file's order."""
    out: dict[str, list[InputFreshness]] = {}
    for r in rules:
        out.setdefault(r.asset, []).append(r)
    return out


def _names(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _latest(table: tuple[str, str, str], column: str) -> exp.Expression:
    # As an instant: a TIMESTAMP_NTZ column read in the session's UTC, an LTZ or TZ one by its own zone.
    latest = exp.Max(this=exp.column(exp.to_identifier(column, quoted=True)))
    query = exp.select(exp.cast(latest, exp.DataType.build("TIMESTAMP_TZ", dialect="snowflake")))
    return query.from_(quoted_table(*table)).subquery()


def _is_source(spec: dg.AssetSpec) -> bool:
    """A table the pipeline reads and does not build: a Coalesce Source node, or a table of another tool."""
    node_type = CoalesceMetadataSet.read(spec.metadata, "node_type")
    named = table_parts(spec.metadata.get("dagster/table_name")) is not None
    return named and (node_type == "Source" or "coalesce" not in (spec.kinds or ()))


def read_sources(specs_by_path: Mapping[str, dg.AssetSpec], asset: str, inputs: set[str]) -> list[str]:
    """The Source tables ``asset`` is built from, through every node upstream, that no freshness rule names
    (``inputs``) and that have a time column: a control table a node reads only in its WHERE (the day to
    process), a snapshot it joins (FX rates, an export reloaded whole). Their rows hold only the last load's
    stamp, so only their record of it, night by night, says whether they load (``advancing_nights``)."""
    seen: set[str] = set()
    todo = [asset]
    while todo:
        spec = specs_by_path.get(todo.pop())
        for dep in spec.deps if spec else ():
            path = dep.asset_key.to_user_string()
            if path not in seen:
                seen.add(path)
                todo.append(path)
    return sorted(
        p
        for p in seen - inputs
        if p in specs_by_path and _is_source(specs_by_path[p]) and _time_columns(specs_by_path[p])
    )


def _time_columns(spec: dg.AssetSpec) -> list[str]:
    return [c.name for c in table_columns(spec) if is_time_type(c.type)]


def _latest_of(table: tuple[str, str, str], columns: Sequence[str]) -> exp.Expression:
    """The latest of the maxima of ``columns``, each read from metadata: GREATEST over COALESCEs that each put
    a different column first, so a column with no value leaves the others' (Snowflake's GREATEST is NULL
    when any argument is)."""
    latest = [_latest(table, c) for c in columns]
    if len(latest) == 1:
        return latest[0]
    rotations = [exp.func("COALESCE", *latest[i:], *latest[:i]) for i in range(len(latest))]
    return exp.func("GREATEST", *rotations)


class InputFreshnessChecks:
    """The input-freshness checks of one checks run: both maxima of each rule, the latest load of every other
    Source table the judged tables are built from (``read_sources``), and their judgement."""

    def __init__(self, metrics: MetricsFile, specs: Sequence[dg.AssetSpec], selected: Sequence[dg.AssetKey]):
        wanted = {k.to_user_string() for k in selected}
        self.rules = {a: its for a, its in sorted(_by_asset(metrics.freshness.inputs).items()) if a in wanted}
        self.specs_by_path = {s.key.to_user_string(): s for s in specs}
        self.calendar = metrics.calendar
        self.timezone = ZoneInfo(metrics.business_day.timezone)
        self.errors: dict[str, str] = {}
        # A rule's input is recorded by its rule's column; the other sources by their latest stamp.
        inputs = {r.input for r in metrics.freshness.inputs}
        self.sources = {a: read_sources(self.specs_by_path, a, inputs) for a in self.rules}

    def series(self) -> dict[str, int]:
        """The series these checks learn the inputs' cadence from -> how many nights back."""
        inputs = [r.input for its in self.rules.values() for r in its]
        sources = [s for its in self.sources.values() for s in its]
        return dict.fromkeys(map(input_load_series, [*inputs, *sources]), CADENCE_LOOKBACK_DAYS)

    def parts(self) -> list[Part]:
        parts = []
        for its in self.rules.values():
            for r in its:
                try:
                    table, source = (_table_of(self.specs_by_path, p) for p in (r.asset, r.input))
                except dg.DagsterInvariantViolationError as e:
                    self.errors[r.asset] = str(e)
                    continue
                query = exp.select(_latest(table, r.column), _latest(source, r.input_column))
                parts.append(Part(("freshness", r.asset, r.input), query))
        for path in sorted({s for its in self.sources.values() for s in its}):
            spec = self.specs_by_path[path]
            query = exp.select(_latest_of(_table_of(self.specs_by_path, path), _time_columns(spec)))
            parts.append(Part(("source_load", path), query, shape="source_load"))
        return parts

    def evaluate(
        self, night: Night, measured: Mapping[Hashable, list[tuple] | Exception]
    ) -> tuple[list[dg.AssetCheckResult], list[str]]:
        """Each table's rules measured judged, one result a table, and why the others could not be."""
        results, errors = [], []
        loads = self._source_loads(night, measured)
        for asset, its in self.rules.items():
            judged = []
            for rule in its:
                found = measured.get(("freshness", asset, rule.input))
                if found is None or isinstance(found, Exception):
                    # Unjudged (a table name missing says so from ``parts``); the table's other inputs are
                    # still judged, so their loads are recorded tonight.
                    why = f"({type(found).__name__}: {found})" if found is not None else "(no part)"
                    self.errors.setdefault(asset, f"input freshness of {rule.input} not measured {why}")
                    continue
                held, latest = found[0]  # type: ignore[index]
                held = self._instant(asset, rule.column, held)
                latest = self._instant(rule.input, rule.input_column, latest)
                series = input_load_series(rule.input)
                if latest is not None:
                    night.record(series, Reading(value=latest.timestamp()))
                past = night.past.get(series, {})
                allowed = allowed_age(rule, past, night.day, self.calendar)
                stalled = stalled_nights(latest and latest.timestamp(), past, night.day, self.calendar)
                judged.append(_judge(night, rule, held, latest, allowed, stalled))
            for source in self.sources[asset]:
                if isinstance(loads[source], str):
                    self.errors.setdefault(asset, f"the latest load of {source} not measured {loads[source]}")
                elif found := _stalled_source(night, asset, source, loads[source], self.calendar):  # type: ignore[arg-type]
                    judged.append(found)
            if asset in self.errors:
                # One input not measured leaves the table's check unjudged: a pass would say all its inputs are fresh.
                errors.append(f"{INPUT_FRESHNESS_CHECK} of {asset}: {self.errors[asset]}")
                continue
            results.append(_result(night, asset, judged))
        return results, errors

    def _source_loads(
        self, night: Night, measured: Mapping[Hashable, list[tuple] | Exception]
    ) -> dict[str, datetime | str | None]:
        """Each read source's latest load, recorded tonight (once, however many tables it feeds); why it was
        not measured instead, when it was not."""
        out: dict[str, datetime | str | None] = {}
        for source in {s for its in self.sources.values() for s in its}:
            found = measured.get(("source_load", source))
            if found is None or isinstance(found, Exception):
                out[source] = f"({type(found).__name__}: {found})" if found is not None else "(no part)"
                continue
            latest = out[source] = _utc(found[0][0])  # type: ignore[index]
            if latest is not None:
                night.record(input_load_series(source), Reading(value=latest.timestamp()))
        return out

    def _instant(self, path: str, column: str, value: datetime | None) -> datetime | None:
        """A load column's maximum as an instant; a DATE column's (read as its midnight, UTC) as the end of
        that day in the business's time zone: a load made during the day is not up to 24 h older than it
        is, and a table that holds a DATE covers every load of that day."""
        moment = _utc(value)
        if moment is None or not _is_date(self.specs_by_path[path], column):
            return moment
        end = datetime.combine(moment.astimezone(UTC).date() + timedelta(days=1), time(0), self.timezone)
        return end.astimezone(UTC)


def _is_date(spec: dg.AssetSpec, column: str) -> bool:
    """The column is a DATE, as the table's column schema says (Snowflake's DATETIME is a timestamp)."""
    return any(
        c.name.upper() == column.upper() and c.type.upper().split("(")[0].strip() == "DATE"
        for c in table_columns(spec)
    )


@dataclass(frozen=True)
class AllowedAge:
    """How old an input's latest load may be tonight, and why."""

    hours: float
    quiet: tuple[str, ...] = ()
    """The nights before the build on which the input does not load, oldest first (a weekday, a holiday)."""

    def describe(self) -> str:
        if not self.quiet:
            return f"{self.hours:g} h"
        n = len(self.quiet)
        return (
            f"{self.hours:g} h: {self.hours - 24 * n:g} h, and 24 h for each of {n} night{'s' if n > 1 else ''} "
            f"it does not load on ({', '.join(self.quiet)})"
        )


def _stood_still(past: Mapping[date, Recorded]) -> dict[date, bool]:
    """Each recorded night whose night before is on record too: whether the input's latest load stood still."""
    still: dict[date, bool] = {}
    for d, r in past.items():
        before = past.get(d - timedelta(days=1))
        if r.value is None or before is None or before.value is None:
            continue
        still[d] = r.value <= before.value
    return still


def quiet_weekdays(past: Mapping[date, Recorded], calendar: BusinessCalendar) -> frozenset[int]:
    """The weekdays (of the business date) on which an input's latest load does not advance: by its own
    record (``input_load`` series), a weekday with three nights on record is quiet when the load stood still
    on at least three in four of them (at most one in four advanced: ``calendar.routine_weekdays``, the rule
    closed days follow too); a weekday with fewer is quiet when the calendar says it is no business day. An
    input quiet every day has no cadence to follow. Nights whose check failed count too (never flagged out):
    a feed's first Mondays may fail before its record shows it never loads on them, and a stall of a night
    or two is too rare to make a weekday quiet."""
    still = _stood_still(past)
    on_record = Counter(d.weekday() for d in still)
    quiet = set(routine_weekdays(still)) | {
        w for w in range(7) if on_record[w] < ROUTINE_NIGHTS and WEEKDAYS[w] not in calendar.business_days
    }
    return frozenset() if len(quiet) == 7 else frozenset(quiet)


def advancing_nights(past: Mapping[date, Recorded], day: date, calendar: BusinessCalendar) -> int:
    """How many nights like ``day`` the input's record (``input_load`` series, before ``day``) holds, its
    latest load having advanced over the night before on every one of them: the nights of the weekdays it
    loads on (not ``quiet_weekdays``: a weekday-only feed keeps its weekend) that are no holiday of the
    calendar. 0 when the record does not say the load advances on every such night: it stood still on one
    (a feed that skips a night now and then is judged by its age alone), ``day`` is a quiet weekday or a
    holiday, or the record is short (under ``MIN_ADVANCING_NIGHTS`` such nights, or under three of
    ``day``'s weekday)."""
    quiet = quiet_weekdays(past, calendar)
    if day.weekday() in quiet or calendar.holiday(day) is not None:
        return 0
    loading = {
        d: s
        for d, s in _stood_still(past).items()
        if d.weekday() not in quiet and calendar.holiday(d) is None
    }
    same = sum(1 for d in loading if d.weekday() == day.weekday())
    if any(loading.values()) or len(loading) < MIN_ADVANCING_NIGHTS or same < ROUTINE_NIGHTS:
        return 0
    return len(loading)


def stalled_nights(
    latest: float | None, past: Mapping[date, Recorded], day: date, calendar: BusinessCalendar
) -> int:
    """The nights like ``day`` on which the input's latest load advanced (``advancing_nights``) when it did
    not advance tonight (``latest``, epoch seconds, against the night before's record); else 0. A feed whose
    last load lands a day before the build is within a fixed age on the night its load never came: its own
    record says the night's load is missing."""
    before = past.get(day - timedelta(days=1))
    if latest is None or before is None or before.value is None or latest > before.value:
        return 0
    return advancing_nights(past, day, calendar)


def allowed_age(
    rule: InputFreshness, past: Mapping[date, Recorded], day: date, calendar: BusinessCalendar
) -> AllowedAge:
    """The age the input's latest load may have when the table of business date ``day`` is built: the
    rule's age (26 h unless the file sets it: a night's load, and its delay), and 24 h more for each night
    before the build on which the input does not load (a feed of business days: the weekend before a Monday;
    of a business that closes on its holidays, the holidays), so a gap the feed always has passes and a
    missed business day still fails. A set age counts from a loading night too: files copy the default 26
    h for every input, and a team that sets it for a weekday feed means the Monday after a quiet weekend
    to pass (the quiet nights are only those the input's own loads show, or the calendar's closed days)."""
    nights = quiet_nights(quiet_weekdays(past, calendar), day, calendar)
    return AllowedAge(rule.max_input_age_hours + 24 * len(nights), nights)


def quiet_nights(quiet: frozenset[int], day: date, calendar: BusinessCalendar) -> tuple[str, ...]:
    """The nights up to ``day`` on which a feed of ``quiet`` weekdays (Monday 0) does not load, back to the
    last night it does, named (a weekday, a holiday of the calendar), oldest first; at most two weeks."""
    nights: list[str] = []
    d = day
    while quiet and len(nights) < MAX_QUIET_NIGHTS:
        holiday = calendar.holiday(d)
        if d.weekday() not in quiet and holiday is None:
            break
        nights.insert(0, holiday[0] if holiday else stdlib_calendar.day_name[d.weekday()])
        d -= timedelta(days=1)
    return tuple(nights)


def _judge(
    night: Night,
    rule: InputFreshness,
    held: datetime | None,
    latest: datetime | None,
    allowed: AllowedAge,
    stalled: int,
) -> tuple[list[str], dict[str, object]]:
    """One rule's problems tonight (none: its input is fresh) and its figures."""
    key = key_from_path(rule.asset)
    built = _built_at(night.context.instance, key) or datetime.now(UTC)
    problems = []
    if latest is None:
        problems.append(f"{rule.input} has no loads at all")
    else:
        age = built - latest
        if age > timedelta(hours=allowed.hours):
            problems.append(
                f"built on stale input: {rule.input}'s latest load was {age.total_seconds() / 3600:.1f} h "
                f"old when {rule.asset} was built (allowed {allowed.describe()})"
            )
        elif stalled:
            problems.append(
                f"built on stale input: {rule.input}'s latest load ({latest:%Y-%m-%d %H:%M} UTC) did not advance "
                f"since the night before, though it advanced on each of the {stalled} nights like tonight on "
                "record"
            )
        if held is None or latest - held > timedelta(minutes=rule.max_lag_minutes):
            problems.append(
                f"{rule.asset} holds loads up to {held}, but {rule.input} has loads up to {latest}"
            )
    metadata: dict[str, object] = {
        "input": rule.input,
        "input_latest_load": str(latest),
        "table_latest_load": str(held),
        "built_at": built.isoformat(),
        "allowed_age_hours": figure(allowed.hours, 1),
    }
    if allowed.quiet:
        metadata["allowed_age"] = allowed.describe()
    if stalled:
        metadata[ADVANCED_ON_NIGHTS] = stalled
    if latest is not None:
        metadata["input_age_hours"] = figure((built - latest).total_seconds() / 3600, 1)
    return problems, metadata


def _stalled_source(
    night: Night, asset: str, source: str, latest: datetime | None, calendar: BusinessCalendar
) -> tuple[list[str], dict[str, object]] | None:
    """A read source whose latest load did not advance tonight though its record says it advanced on every
    night like tonight (``stalled_nights``): its problem and figures; else None. Judged by its record alone:
    a source reloaded whole holds one load's rows, and no rule gives it an age."""
    past = night.past.get(input_load_series(source), {})
    stalled = stalled_nights(latest and latest.timestamp(), past, night.day, calendar)
    if not stalled or latest is None:
        return None
    problem = (
        f"built on stale input: {source}'s latest load ({latest:%Y-%m-%d %H:%M} UTC) did not advance since the "
        f"night before, though it advanced on each of the {stalled} nights like tonight on record"
    )
    built = _built_at(night.context.instance, key_from_path(asset)) or datetime.now(UTC)
    return [problem], {
        "input": source,
        "input_latest_load": str(latest),
        "built_at": built.isoformat(),
        "input_age_hours": figure((built - latest).total_seconds() / 3600, 1),
        ADVANCED_ON_NIGHTS: stalled,
    }


def _result(
    night: Night, asset: str, judged: Sequence[tuple[list[str], dict[str, object]]]
) -> dg.AssetCheckResult:
    """A table's check over its inputs: failed when any input is stale, its figures those of the first stale
    input (the diagnosis reads them, ``input`` naming which), else of the first input."""
    problems = [p for found, _ in judged for p in found]
    metadata = next((m for found, m in judged if found), judged[0][1])
    if problems:
        night.report(INPUT_FRESHNESS_CHECK, asset, "; ".join(problems), metadata)
    return dg.AssetCheckResult(
        check_name=INPUT_FRESHNESS_CHECK,
        asset_key=key_from_path(asset),
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(problems) or None,
        metadata=metadata,
    )
