"""Recorded totals: business numbers recorded nightly, reconciled with their source, then baselined.

Reconcile first (detection.md): a total paired with its source total must keep its gap to the source, in
total and group by group; a change of the gap beyond tolerance fails on day one, with no history, and the
group keys name where the gap sits. Then the judgement of the total (``judge.py``: the calendar, small
counts, accepted levels) and of each of its groups (``groups.py``: shifts between groups with a flat total,
groups with a NULL value). A baseline with too little history says so.
"""

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import dagster as dg
import sqlglot
from sqlglot import exp

from dw_dagster.checks import cumulative
from dw_dagster.checks.attributes import (
    MAX_VALUES,
    attribute_part,
    attribute_series,
    not_regrouped,
    shifted_shares,
)
from dw_dagster.checks.groups import (
    GroupMove,
    GroupVerdict,
    judge_groups,
    null_groups_problem,
    usual_null_groups,
)
from dw_dagster.checks.history import Reading, Recorded, group_rows_series, total_series
from dw_dagster.checks.implied import implied_evidence, implied_note, implied_problem, reconcile_implied
from dw_dagster.checks.judge import Judgement, deviation, figure, judge, judgement_metadata
from dw_dagster.checks.measure import Part
from dw_dagster.checks.metrics import MetricsFile, RecordedTotal
from dw_dagster.checks.reconcile import Reconciled, reconcile
from dw_dagster.checks.repointed import MAX_MAPPED, mapping_label, mapping_part, mapping_series, repointed
from dw_dagster.checks.row_values import (
    AMONG,
    PER,
    RowBases,
    RowValues,
    judge_row_values,
    paired_part,
    row_count_series,
    row_value_part,
    row_value_series,
    subset_keys,
    take_row_values,
)
from dw_dagster.checks.signs import flipped, signed_by, signs_groups, signs_series
from dw_dagster.checks.tonight import Night
from dw_dagster.checks.total_value import TotalValue, rows_counted
from dw_dagster.coalesce.sql import resolve_refs
from dw_dagster.context.specs import key_from_path

HISTORY_DAYS = 120

TableResolver = Callable[[str, str], str]


def check_name(total: RecordedTotal) -> str:
    return f"total_{total.name}"


def group_label(keys: Sequence[str], row: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={plain_value(row[k])}" for k in keys)


def plain_value(v: Any) -> str:
    """How a key value reads in a group label (``ACCOUNT_ID=42``, not ``42.0``); diagnosis matches
    its keys against the recorded labels, so both use this."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def total_value(
    total: RecordedTotal, sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> TotalValue:
    """The total from the rows its SQL returned (``columns``: their names)."""
    columns = [c.upper() for c in columns]
    if "VALUE" not in columns:
        raise ValueError(f"totals.{total.name}.sql: expected a column named VALUE, got columns {columns}")
    missing = [k for k in total.group_keys if k.upper() not in columns]
    if missing:
        raise ValueError(
            f"totals.{total.name}.sql: group_keys {missing} are not columns of the result {columns}"
        )
    found = [dict(zip(columns, r, strict=True)) for r in rows]
    if not total.group_keys and len(found) != 1:
        raise ValueError(f"totals.{total.name}.sql: expected one row without group_keys, got {len(found)}")
    keys = [k.upper() for k in total.group_keys]
    groups = {
        group_label(keys, r): (None if r["VALUE"] is None else float(r["VALUE"])) for r in found if keys
    }
    counted = {group_label(keys, r): int(r["ROWS"]) for r in found if keys and r.get("ROWS") is not None}
    return TotalValue(
        value=float(sum(float(r["VALUE"]) for r in found if r["VALUE"] is not None)),
        groups=groups,
        rows=counted,
        value_columns=value_columns(sql),
        # The SUM of no rows is NULL: over none (an empty day), the total is 0.
        null_value=not keys and found[0]["VALUE"] is None and found[0].get("ROWS") != 0,
    )


def compute_total(cur: Any, total: RecordedTotal, resolve_table: TableResolver) -> TotalValue:
    """Runs the total's one aggregate query alone."""
    sql = resolve_refs(total.sql, resolve_table)
    cur.execute(sql)
    return total_value(total, sql, [d[0] for d in cur.description], cur.fetchall())


@dataclass(frozen=True)
class TotalQuery:
    """A total's SQL with its refs resolved, and how the night's statement selects its columns."""

    total: RecordedTotal
    sql: str
    part: Part | None
    """None when sqlglot cannot name the SQL's columns: the total is then measured alone."""
    columns: list[str] = field(default_factory=list)


def total_query(total: RecordedTotal, resolve_table: TableResolver) -> TotalQuery:
    sql = resolve_refs(total.sql, resolve_table)
    try:
        tree = sqlglot.parse_one(sql, read="snowflake")
    except sqlglot.errors.ParseError:
        return TotalQuery(total, sql, None)
    if not isinstance(tree, exp.Query):
        return TotalQuery(total, sql, None)
    # Each output column by the name the warehouse gives it, as written (its quoting kept).
    named: dict[str, exp.Identifier] = {}
    for projection in tree.selects:
        if projection.is_star:
            return TotalQuery(total, sql, None)
        ident = projection.args.get("alias") if isinstance(projection, exp.Alias) else projection.this
        if not isinstance(projection, exp.Alias | exp.Column) or not isinstance(ident, exp.Identifier):
            continue  # an unnamed expression: neither VALUE nor a group key
        if ident.name.upper() in named:
            return TotalQuery(total, sql, None)
        named[ident.name.upper()] = ident
    if not total.group_keys and "ROWS" not in named and (rows := rows_counted(tree)) is not None:
        tree = tree.select(rows)
        named["ROWS"] = rows.args["alias"]
    wanted = [k.upper() for k in total.group_keys] + ["VALUE"] + (["ROWS"] if "ROWS" in named else [])
    if any(w not in named for w in wanted):
        return TotalQuery(total, sql, None)  # alone, its error names what is missing
    alias = exp.to_identifier("q", quoted=True)
    query = exp.select(*(exp.column(named[w].copy(), table=alias) for w in wanted)).from_(
        tree.subquery(alias)
    )
    return TotalQuery(total, sql, Part(("total", total.name), query), wanted)


def value_columns(sql: str) -> list[str]:
    """The columns VALUE is computed from, read with sqlglot (none when the SQL does not parse)."""
    value = _value_expression(sql)
    return [] if value is None else list(dict.fromkeys(c.name for c in value.find_all(exp.Column)))


def counted_unit(total: RecordedTotal) -> str:
    """What the total's value counts: its items when VALUE counts rows and its groups are the items it lists
    (``COUNT(*)`` by SKU, no ``item_key``: ``195 SKUs``); a summed measure carries no unit of ours (its name
    says what it sums: ``carrier_cost_eur``, never ``13,958,451 invoicing groups``)."""
    if total.item_key:
        return ""
    try:
        sql = resolve_refs(total.sql, lambda location, name: '"T"')
    except ValueError:
        return ""
    return total.item_noun if isinstance(_value_expression(sql), exp.Count) else ""


def _value_expression(sql: str) -> exp.Expression | None:
    """The expression VALUE is computed by, read with sqlglot (None when the SQL does not parse)."""
    try:
        tree = sqlglot.parse_one(sql, read="snowflake")
    except sqlglot.errors.ParseError:
        return None
    for projection in getattr(tree, "expressions", []):
        if isinstance(projection, exp.Alias) and projection.alias.upper() == "VALUE":
            return projection.this
    return None


def _fmt(v: float | None, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:,.0f}{unit}"


def total_specs(metrics: MetricsFile) -> list[dg.AssetCheckSpec]:
    """One check per recorded total, on the asset it is computed from."""
    return [
        dg.AssetCheckSpec(
            name=check_name(t),
            asset=key_from_path(t.asset),
            description=t.description
            or f"Recorded total {t.name}"
            + (f", reconciled with {t.reconcile_with.total}" if t.reconcile_with else ""),
            metadata={"dw/owner": t.owner, "dw/hurts": t.hurts.value},
        )
        for t in metrics.totals
    ]


class Totals:
    """The recorded totals of one checks run: each queried once even when another total reconciles
    against it, in the night's statement unless sqlglot cannot name its columns."""

    def __init__(
        self,
        metrics: MetricsFile,
        resolve_table: TableResolver,
        checks: Sequence[str],
        attributes: Mapping[str, Sequence[str]] = {},  # noqa: B006 - read only
        bases: Mapping[str, RowBases] = {},  # noqa: B006 - read only
        implied: Mapping[str, Sequence[str]] = {},  # noqa: B006 - read only
        keys: Mapping[str, Collection[str]] = {},  # noqa: B006 - read only
        implied_rows: Mapping[str, Sequence[str]] = {},  # noqa: B006 - read only
        references: Mapping[str, Mapping[str, Sequence[str]]] = {},  # noqa: B006 - read only
        signed: Mapping[str, Sequence[str]] = {},  # noqa: B006 - read only
    ):
        by_check = {check_name(t): t for t in metrics.totals}
        # Reconciled totals first (declared, then implied): on a bad night the gap to the source is the
        # finding that opens (and titles) the incident, whatever order Dagster hands the selection in.
        everyone = {**implied_rows, **implied}
        self.selected = sorted(
            (by_check[c] for c in checks),
            key=lambda t: (t.reconcile_with is None, t.name not in everyone, t.name),
        )
        # A total's implied sources are judged with the values this run measures anyway (implied.py); on the
        # rows alone where a factor joined in converts the measure.
        self.implied = {t.name: list(everyone[t.name]) for t in self.selected if t.name in everyone}
        self.rows_only = {t.name for t in self.selected if t.name in implied_rows}
        # The attributes that are join keys (attributes.carried_keys): judged for a key re-pointed whole.
        self.keys = keys
        self.needed = {t.name: t for t in self.selected}
        for t in self.selected:
            if t.reconcile_with:
                self.needed.setdefault(t.reconcile_with.total, metrics.get(t.reconcile_with.total))
        self.resolve_table = resolve_table
        self.queries: dict[str, TotalQuery] = {}
        self.values: dict[str, TotalValue] = {}
        self.errors: dict[str, str] = {}
        for name, total in self.needed.items():
            try:
                self.queries[name] = total_query(total, resolve_table)
            except Exception as e:  # noqa: BLE001 - reported as an errored check, never as passed
                self.errors[name] = f"{type(e).__name__}: {e}"
        # Each selected total measured again by the dimension attributes its table carries from a reference
        # table (attributes.py) and, per subset, for its typical row (row_values.py). A total whose SQL cannot
        # be (a join, a CTE, ...) has neither: its check says which columns went undrilled and why.
        self.attribute_parts: dict[tuple[str, str], Part] = {}
        self.mapping_parts: dict[tuple[str, str], tuple[Part, list[str]]] = {}
        self.signed = {t.name: list(signed.get(t.name, ())) for t in self.selected}
        self.row_value_parts: dict[tuple[str, str, str], Part] = {}
        self.undrilled: dict[str, str] = {}
        for t in self.selected:
            q = self.queries.get(t.name)
            more = bases.get(t.name, RowBases())
            columns = subset_keys(t, attributes.get(t.name, ()), more.keys) if q is not None else []
            if not columns:
                continue
            if why := not_regrouped(q.sql):
                self.undrilled[t.name] = f"{', '.join(columns)} not drilled: {why}"
                continue
            for column in attributes.get(t.name, ()):
                part = attribute_part(t, q.sql, column)
                if part is not None:
                    self.attribute_parts[(t.name, column)] = part
                # And by the reference row's key it is read by, where the table carries it (repointed.py).
                keys = references.get(t.name, {}).get(column)
                if keys and (part := mapping_part(t, q.sql, keys, column)) is not None:
                    self.mapping_parts[(t.name, column)] = (part, list(keys))
            if t.cumulative not in ("auto", "no"):
                continue  # declared cumulative: its rows grow through the period
            for column in columns:
                # Each subset's typical row; per unit of a companion converted at a joined factor; against
                # the same items in the other subsets (not on the item key itself: each item is its own
                # subset there), per unit of the companion when one.
                per = more.companion if more.joined else None
                paired = more.item if more.item and more.item.upper() != column.upper() else None
                for basis, part in (
                    # With each subset's signs of the numeric columns VALUE sums (signs.py), of the same rows.
                    ("", row_value_part(t, q.sql, column, more=signed_by(self.signed[t.name]))),
                    (f"{PER}{per}", per and row_value_part(t, q.sql, column, per)),
                    (f"{AMONG}{paired}", paired and paired_part(t, q.sql, column, paired, more.companion)),
                ):
                    if part:
                        self.row_value_parts[(t.name, column, basis)] = part
        self.attribute_values: dict[tuple[str, str], tuple[float, dict[str, float | None]]] = {}
        self.mappings: dict[tuple[str, str], dict[str, float | None]] = {}
        self.signs: dict[str, dict[str, dict[str, float]]] = {}
        """Each total -> its subset keys, in the order they are judged -> tonight's signs (signs.py)."""
        self.row_values: dict[str, list[RowValues]] = {}

    def series(self) -> list[str]:
        """The series these totals judge against: their own, their attributes' and their implied sources'."""
        return [
            *self.needed,
            *(group_rows_series(t.name) for t in self.selected if t.group_keys),
            *(
                s
                for sources in self.implied.values()
                for src in sources
                for s in (src, group_rows_series(src))
            ),
            *(attribute_series(t, c) for t, c in self.attribute_parts),
            *(mapping_series(t, c) for t, c in self.mapping_parts),
            *(signs_series(t, c) for t, c, b in self.row_value_parts if not b and self.signed.get(t)),
            *(row_value_series(t, c, b) for t, c, b in self.row_value_parts),
            *(row_count_series(t, c) for t, c, b in self.row_value_parts if not b),
        ]

    def parts(self) -> list[Part]:
        return [
            *(q.part for q in self.queries.values() if q.part is not None),
            *self.attribute_parts.values(),
            *(part for part, _ in self.mapping_parts.values()),
            *self.row_value_parts.values(),
        ]

    def take(self, measured: Mapping[Hashable, list[tuple] | Exception], cur: Any) -> None:
        """Tonight's value of each total from the night's statement (``cur`` runs alone those not in it)."""
        for name, q in self.queries.items():
            try:
                if q.part is None:
                    self.values[name] = compute_total(cur, q.total, self.resolve_table)
                    continue
                rows = measured[q.part.key]
                if isinstance(rows, Exception):
                    raise rows
                self.values[name] = total_value(q.total, q.sql, q.columns, rows)
            except Exception as e:  # noqa: BLE001 - reported as an errored check, never as passed
                self.errors[name] = f"{type(e).__name__}: {e}"
        for (name, column), part in self.attribute_parts.items():
            rows = measured.get(part.key)
            # An attribute that could not be measured is not judged tonight; the total still is.
            if rows is None or isinstance(rows, Exception) or len(rows) > MAX_VALUES:
                continue
            groups = {f"{column}={plain_value(v)}": (None if x is None else float(x)) for v, x in rows}
            self.attribute_values[(name, column)] = (sum(x for x in groups.values() if x is not None), groups)
        for (name, column), (part, keys) in self.mapping_parts.items():
            rows = measured.get(part.key)
            # Like an attribute's, and only with it (an attribute of too many values is not judged); a lookup
            # of more keys than are kept is not judged by its keys.
            if (name, column) not in self.attribute_values:
                continue
            if rows is None or isinstance(rows, Exception) or len(rows) > MAX_MAPPED:
                continue
            self.mappings[(name, column)] = {
                mapping_label(
                    keys, [plain_value(v) for v in row[: len(keys)]], column, plain_value(row[-2])
                ): (None if row[-1] is None else float(row[-1]))
                for row in rows
            }
        for (name, column, basis), part in self.row_value_parts.items():
            rows = measured.get(part.key)
            # Like an attribute's: not measured, not judged tonight; the total still is.
            if rows is None or isinstance(rows, Exception):
                continue
            if not basis and self.signed.get(name):
                # The subset's signs, after its typical row's four columns (row_value_part's ``more``).
                by_sign = signs_groups(column, self.signed[name], [(r[0], *r[4:]) for r in rows])
                if by_sign is not None:
                    self.signs.setdefault(name, {})[column] = by_sign
                rows = [r[:4] for r in rows]
            found = take_row_values(column, rows, " or ".join(value_columns(self.queries[name].sql)), basis)
            if found is not None:
                self.row_values.setdefault(name, []).append(found)

    def evaluate(self, night: Night) -> list[dg.AssetCheckResult]:
        for name, v in self.values.items():
            night.record(name, Reading(value=v.value, groups=v.groups))
            night.context.op_execution_context.log_event(
                dg.AssetObservation(
                    asset_key=key_from_path(self.needed[name].asset),
                    metadata={f"dw/total/{name}": dg.MetadataValue.float(float(v.value))},
                    tags={"dw/business_date": night.day.isoformat()},
                )
            )
        for name, v in self.values.items():
            if self.needed[name].group_keys and v.rows:
                rows = {g: float(n) for g, n in v.rows.items()}
                night.record(group_rows_series(name), Reading(value=sum(rows.values()), groups=rows))
        for (name, column), (value, groups) in self.attribute_values.items():
            night.record(attribute_series(name, column), Reading(value=value, groups=groups))
        for (name, column), groups in self.mappings.items():
            value = sum(x for x in groups.values() if x is not None)
            night.record(mapping_series(name, column), Reading(value=value, groups=groups))
        for name, by_key in self.signs.items():
            for column, groups in by_key.items():
                # A series read by its groups alone (each subset's rows and sums of each sign).
                night.record(signs_series(name, column), Reading(value=0.0, groups=dict(groups)))
        for name, found in self.row_values.items():
            for rv in found:
                night.record(
                    row_value_series(name, rv.column, rv.basis),
                    Reading(value=rv.value, groups=dict(rv.typical)),
                )
                if rv.basis:
                    continue  # the subsets' rows are recorded once, with their own typical rows
                rows = {g: float(n) for g, n in rv.rows.items()}
                night.record(
                    row_count_series(name, rv.column), Reading(value=sum(rows.values()), groups=rows)
                )
        return [
            evaluate_total(
                night,
                t,
                self.values,
                self.attribute_values,
                self.row_values.get(t.name, ()),
                undrilled=self.undrilled.get(t.name),
                implied=self.implied.get(t.name, ()),
                keys=self.keys.get(t.name, ()),
                rows_only=t.name in self.rows_only,
                mappings=self.mappings,
                signs=self.signs.get(t.name, {}),
                signed=self.signed.get(t.name, ()),
            )
            for t in self.selected
            if t.name in self.values and not (t.reconcile_with and t.reconcile_with.total in self.errors)
        ]

    def unfinished(self) -> dict[str, str]:
        """The selected checks that could not be evaluated -> why."""
        out = {}
        for t in self.selected:
            cause = t.name if t.name in self.errors else t.reconcile_with.total if t.reconcile_with else None
            if cause in self.errors:
                out[check_name(t)] = f"recorded total {cause} could not be computed: {self.errors[cause]}"
        return out


def evaluate_total(
    night: Night,
    total: RecordedTotal,
    values: Mapping[str, TotalValue],
    attributes: Mapping[tuple[str, str], tuple[float, dict[str, float | None]]] = {},  # noqa: B006 - read only
    row_values: Sequence[RowValues] = (),
    undrilled: str | None = None,
    implied: Sequence[str] = (),
    keys: Collection[str] = (),
    rows_only: bool = False,
    mappings: Mapping[tuple[str, str], Mapping[str, float | None]] = {},  # noqa: B006 - read only
    signs: Mapping[str, Mapping[str, float]] = {},  # noqa: B006 - read only
    signed: Sequence[str] = (),
) -> dg.AssetCheckResult:
    day = night.day
    value = values[total.name]
    own = night.past[total.name]
    excluded = night.excluded(own)
    # A month-to-date total is judged on tonight's increment, as an ordinary daily number (cumulative.py).
    # Detected from the clean nights and the resets read as faults before the period was known: a bad night's
    # drop that a later night undid (a stock emptied and reloaded) is no period's start.
    period = cumulative.period_of(
        total.cumulative, cumulative.detection_values(own, day, value.value), day, value.value
    )
    judged, judged_value, judged_groups = own, value.value, value.groups
    tonight = cumulative.tonight(own, day, value.value, value.groups, period) if period else None
    if period is not None:
        if tonight is None:
            judged_value, judged_groups = value.value, {}
            judged = {}  # no comparable night before tonight: nothing to judge the increment against
        else:
            # An increment covering the days since a failed or skipped build is judged against past
            # increments over as many days.
            judged_value, judged_groups = tonight.value, tonight.groups
            judged = cumulative.increments(own, period, tonight.span)

    def verdict_on(d: date, v: float):
        return judge(
            {k: r.value for k, r in judged.items() if k < d},
            d,
            v,
            total.baseline,
            total.hurts,
            calendar=night.calendar,
            excluded_days=excluded,
            rebases=night.levels.get(total_series(total.name), ()),
            share=night.share(total.asset),
        )

    verdict = verdict_on(day, judged_value)
    by_group = judge_groups(
        total,
        day,
        judged_value,
        judged_groups,
        judged,
        verdict,
        calendar=night.calendar,
        excluded_days=excluded,
        rebases=night.levels,
        share=night.share(total.asset),
        # A cumulative total's rows are to date too: no chance of no row tonight from them.
        rows=night.past.get(group_rows_series(total.name)) if period is None else None,
        rows_tonight=float(sum(value.rows.values())) if value.rows and period is None else None,
    )
    metadata: dict[str, Any] = {
        "value": dg.MetadataValue.float(float(value.value)),
        "business_date": day.isoformat(),
        **judgement_metadata(verdict),
    }
    carried: list[tuple[date, float, float]] = []
    if period is not None:
        days = f", over the {tonight.span} days since the last build" if tonight and tonight.span > 1 else ""
        metadata["baseline_judged_on"] = (
            f"the increment ({cumulative.describe(period)} to date{days}): {judged_value:,.0f}"
        )
        # A bad night of this period whose increment is still in tonight's total: the same fault.
        for d in cumulative.flagged_in_period(day, period, own):
            if d in judged and (was := judged[d].value) is not None:
                then = verdict_on(d, was)
                if then.severity == "ERROR" and then.result.expected is not None:
                    carried.append((d, was, then.result.expected))
    # A group that lost rows while the others held (a partial load of one channel's partition): its rows say so
    # more plainly than its heavy-tailed value can.
    by_rows, rows_verdict = (
        rows_by_group(night, total, value, excluded)
        if period is None and not by_group.problem
        else (None, None)
    )
    if by_group.moves:
        metadata["groups_moved"] = dg.MetadataValue.md(_moves_table(by_group.moves))
    if by_rows is not None and by_rows.moves:
        metadata["group_rows_moved"] = dg.MetadataValue.md(_moves_table(by_rows.moves))
    if by_group.note:
        metadata["groups_note"] = by_group.note
    if undrilled:
        metadata["not_drilled"] = undrilled
    problems: list[str] = []
    evidence: dict[str, Any] = {
        "total": total.name,
        "value": value.value,
        "baseline": verdict.result.model_dump(mode="json"),
        "groups_moved": [m.model_dump(mode="json") for m in by_group.moves],
    }
    for name, v in [(total.name, value)] + (
        [(total.reconcile_with.total, values[total.reconcile_with.total])] if total.reconcile_with else []
    ):
        past = night.past.get(name, {})
        # A NULL-valued group the total's own history holds (rows a lookup never matches) is judged on its
        # rows against their record; one new tonight, or larger than its record, is a finding.
        usual = usual_null_groups(
            day,
            v.groups,
            v.rows,
            past,
            night.past.get(group_rows_series(name), {}),
            total.baseline,
            calendar=night.calendar,
            excluded_days=night.excluded(past),
            share=night.share(total.asset),
        )
        if usual:
            metadata.setdefault("null_groups_note", "; ".join(usual.values()))
        nulls = null_groups_problem(
            name, {g: x for g, x in v.groups.items() if g not in usual}, v.rows, v.value_columns
        )
        if v.null_value:
            nulls = f"{name}: VALUE is NULL: a NULL total is not counted as zero"
        if nulls:
            problems.append(nulls)
            evidence.setdefault("null_groups", {})[name] = sorted(g for g, x in v.groups.items() if x is None)

    if total.reconcile_with:
        source_name = total.reconcile_with.total
        rec = reconcile(
            day,
            value,
            values[source_name],
            own,
            night.past[source_name],
            total.reconcile_with,
        )
        evidence["reconciliation"] = {"source": source_name, **rec.model_dump(mode="json")}
        metadata.update(
            {
                "source_total": source_name,
                "source_value": dg.MetadataValue.float(float(values[source_name].value)),
                "gap_units": figure(rec.gap_change),
                "tolerance_units": figure(rec.tolerance),
            }
        )
        if rec.target_change_pct is not None:
            metadata["day_change_pct"] = figure(rec.target_change_pct)
        if rec.source_change_pct is not None:
            metadata["source_day_change_pct"] = figure(rec.source_change_pct)
        if rec.groups:
            metadata["gap_by_group"] = dg.MetadataValue.md(_groups_table(rec))
        if not rec.passed:
            where = ", ".join(
                f"{g.group} ({_fmt(g.gap_change)} units{'; in source, absent in target' if g.missing_in_target else ''})"
                for g in rec.groups[:3]
            )
            problems.append(
                f"{total.name} {_signed_pct(rec.target_change_pct)} while {source_name} "
                f"{_signed_pct(rec.source_change_pct)}: the gap to the source changed by {_fmt(rec.gap_change)} "
                f"units (tolerance {_fmt(rec.tolerance)})" + (f"; held by {where}" if where else "")
            )

    if implied:
        # Sources the column lineage says the measure is built from alone: the ratio to their sum, against
        # its own record (implied.py). A declared reconciliation that failed keeps the evidence.
        gaps = reconcile_implied(night.day, night, total, implied, values, rows_only=rows_only)
        metadata["implied_reconciliation"] = evidence["implied_reconciliation"] = implied_note(
            total.name, gaps
        )
        if problem := implied_problem(total.name, gaps):
            problems.append(problem)
            if evidence.get("reconciliation", {}).get("passed") is not False:
                evidence["reconciliation"] = implied_evidence(total.name, gaps, values, night)

    if carried and verdict.severity is None:
        of = f" {counted_unit(total)}" if counted_unit(total) else ""
        for d, was, expected in carried:
            problems.append(
                f"{total.name} ({value.value:,.0f}) still carries {d.isoformat()}'s increment of {was:,.0f}{of} "
                f"against the {expected:,.0f} expected ({was - expected:+,.0f}): a total to date over its "
                f"{cumulative.describe(period)} keeps a bad night until it starts again or that night is rebuilt"
            )
        evidence["carried_from"] = [d.isoformat() for d, _, _ in carried]
    if verdict.severity is not None:
        moved = ", ".join(m.describe() for m in by_group.moves[:3])
        what = total.name
        if period is not None:
            span = tonight.span if tonight else 1
            what += (
                f"'s increment over the {span} days since its last build"
                if span > 1
                else "'s increment tonight"
            )
        problems.append(
            f"{what} = {deviation(verdict, counted_unit(total))}"
            + (f"; moved: {moved}" if moved else "")
            + (f" ({verdict.describe()})" if verdict.notes else "")
        )
    if by_group.problem:
        problems.append(by_group.problem)
    elif by_rows is not None and rows_verdict is not None and by_rows.problem:
        problems.append(by_rows.problem)
        evidence["group_rows_moved"] = [m.model_dump(mode="json") for m in by_rows.moves]
        # The rows against their calendar-aware expectation: a fall on a month-end night may still be above
        # the ordinary night before it, which is all the diagnosis's last good night can say.
        evidence["rows_baseline"] = rows_verdict.result.model_dump(mode="json")
    fixed = any(r.kind == "remediation" for r in night.levels.get(total_series(total.name), ()))
    if period is None and verdict.severity is None and not problems and not fixed:
        # One subset's rows scaled by a factor while the others held: within the total's spread, and its
        # subset's, when the measure is heavy-tailed; its typical row is not (row_values.py). Judged before
        # the attributes: a scaled subset shifts their shares too, and the unit change is what explains it.
        for rv in row_values:
            series = row_value_series(total.name, rv.column, rv.basis)
            move = judge_row_values(
                total,
                day,
                rv,
                night.past.get(series, {}),
                night.past.get(row_count_series(total.name, rv.column), {}),
                excluded_days=excluded,
                share=night.share(total.asset),
            )
            if move is not None:
                problems.append(move.describe(rv.measure or "VALUE"))
                evidence["row_values_moved"] = {"series": series, **move.model_dump(mode="json")}
                night.flag(series)
                night.flag(row_count_series(total.name, rv.column))
                break
        # A subset whose values of a column switched sign: its typical row reads their absolute value. Of the
        # keys that show it, the coarsest: the fewest values that hold it (a meter model, not its meters).
        found = {}
        for key, groups in signs.items() if "row_values_moved" not in evidence else ():
            past = night.past.get(signs_series(total.name, key), {})
            flips = flipped(key, signed, day, groups, past, value.value, night.excluded(past))
            if flips:
                found[key] = flips
        if found:
            key = min(found, key=lambda k: (len(found[k]), -sum(f.rows for f in found[k])))
            first = found[key][0]
            problems.append(
                "a subset's values switched sign: " + "; ".join(f.describe() for f in found[key][:5])
            )
            evidence["sign_flipped"] = {
                "subset": first.subset,
                "measure": first.column,
                "factor": -1.0,
                "rows": first.rows,
                "before": first.per_row_before,
                "after": first.amount / first.rows,
                "flips": [f.model_dump(mode="json") for f in found[key][:5]],
            }
            night.flag(signs_series(total.name, key))
    if (
        verdict.severity is None
        and not by_group.problem
        and not fixed
        and not {"row_values_moved", "sign_flipped"} & set(evidence)
    ):
        # Money moved between the values of an attribute no total groups by (a reference row re-pointed).
        for (name, column), (total_of_values, groups) in attributes.items():
            past = night.past.get(attribute_series(name, column), {})
            if name != total.name or not past:
                continue
            if period is not None:
                # A period-to-date total's values grow through the period, its values' shares do not: judged
                # on the nights of tonight's period alone (its first nights have none to go by).
                start = cumulative.period_start(day, period)
                past = {d: r for d, r in past.items() if d >= start}
            by = total.model_copy(update={"name": f"{total.name} by {column}", "group_keys": [column]})
            shifted = (
                judge_groups(
                    by,
                    day,
                    total_of_values,
                    groups,
                    past,
                    verdict,
                    calendar=night.calendar,
                    excluded_days=excluded,
                    rebases={},
                    share=night.share(total.asset),
                )
                if period is None
                else GroupVerdict(moves=[])
            )
            # Only a shift: a value that gained alone is a new key mapped to it, one that fell alone lost
            # rows the total's own check sees. On a night unlike the others (the calendar's), each value's
            # level has one or two like nights to go by, and a period-to-date total's level grows: its share
            # of the total has every ordinary night.
            shift, moves = shifted.problem, shifted.moves
            if not (shift and shift.startswith("a shift between groups")):
                ordinary = excluded | {d for d in past if night.calendar.day(d) is not None}
                moves = shifted_shares(
                    total, day, groups, past, excluded_days=ordinary, share=night.share(total.asset)
                )
                lost = ", ".join(m.describe() for m in moves if m.status == "lost")
                gained = ", ".join(m.describe() for m in moves if m.status == "gained")
                shift = (
                    f"a shift between groups' shares while {total.name} stayed within its usual range: lost {lost}; "
                    f"gained {gained}"
                )
            if column in keys and not any(m.status == "went" for m in moves):
                # A join key's values move between themselves every day (a subscriber changing plans, a new
                # campaign of an advertiser taking its share): a key re-pointed upstream empties its value.
                continue
            # The keys of the reference rows re-pointed tonight, where the table carries them: what moved,
            # named by its row, however small against the values' spread (repointed.py).
            mapped = mappings.get((name, column))
            rows_moved = (
                []
                if mapped is None or period is not None
                else repointed(
                    column, day, mapped, night.past.get(mapping_series(name, column), {}), value.value
                )
            )
            if moves and shift.startswith("a shift between groups"):
                # The keys named beside a shift are those that moved from a value that lost to one that gained.
                lost = {m.group for m in moves if m.status in ("lost", "went")}
                gained = {m.group for m in moves if m.status in ("gained", "new")}
                rows_moved = [
                    r
                    for r in rows_moved
                    if f"{column}={r.before}" in lost and f"{column}={r.after}" in gained
                ]
                shown = "; ".join(r.describe() for r in rows_moved[:5])
                problems.append(
                    f"{shift} ({column} is carried from a reference table)"
                    + (f"; re-pointed: {shown}" if shown else "")
                )
            elif rows_moved:
                shown = "; ".join(r.describe() for r in rows_moved[:5])
                problems.append(
                    f"a reference row re-pointed while {total.name} and its {column} values' shares stayed "
                    f"within their usual range: {shown} ({column} is carried from a reference table)"
                )
            else:
                continue
            evidence["attribute_shift"] = {
                "column": column,
                "series": attribute_series(name, column),
                "moves": [m.model_dump(mode="json") for m in moves],
                "repointed": [r.model_dump(mode="json") for r in rows_moved],
            }
            if rows_moved:
                # An incident's night: its moves teach no lifecycle (repointed.py).
                night.flag(mapping_series(name, column))
            break
    # Only a deviation the calendar explains, or a group gone that its record cannot tell from a closure for
    # the night, is a WARN; reconciliation, shifts and NULLs are ERRORs.
    doubt = by_group.doubt or (by_rows.doubt if by_rows is not None else None)
    if doubt and not problems:
        problems.append(doubt)
    severity = (
        "WARN"
        if len(problems) == 1 and (verdict.severity == "WARN" or problems[0] == doubt)
        else ("ERROR" if problems else None)
    )
    result = dict(check_name=check_name(total), asset_key=key_from_path(total.asset), metadata=metadata)
    if severity == "ERROR":
        night.flag(total.name)
        summary = "; ".join(problems)
        night.report(check_name(total), total.asset, summary, evidence)
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.ERROR, description=summary, **result
        )
    if severity == "WARN":
        # Shown on the check, never an incident; the night stays in the history to train its like days.
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.WARN, description=problems[0], **result
        )
    if verdict.insufficient and not total.reconcile_with:
        # Nothing could judge the number tonight: visible, and not a pass.
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"insufficient baseline: {verdict.result.points} comparable nights, "
            f"{total.baseline.min_points} needed",
            **result,
        )
    return dg.AssetCheckResult(passed=True, description=verdict.describe() or None, **result)


def rows_by_group(
    night: Night, total: RecordedTotal, value: TotalValue, excluded: set[date]
) -> tuple[GroupVerdict, Judgement] | tuple[None, None]:
    """The total's rows judged group by group as its value is (``judge_groups``): a group whose rows fell
    alone while the others held, rows that moved between groups, a group whose rows went; with the
    judgement of all its rows. Nones when the total's SQL returns no ``ROWS`` or no night of them is on
    record. A count is light-tailed where the value is not: half of one channel's payments lost is beyond
    its rows' record on the first night, while its dollars, a few large payments among many small, move
    that much on their own."""
    past = night.past.get(group_rows_series(total.name), {})
    if not total.group_keys or not value.rows or not past:
        return None, None
    day = night.day
    rows = {g: float(n) for g, n in value.rows.items()}
    counted = total.model_copy(update={"name": f"{total.name}'s rows"})
    history: dict[date, Recorded] = dict(past)
    verdict = judge(
        {d: r.value for d, r in history.items()},
        day,
        sum(rows.values()),
        total.baseline,
        total.hurts,
        calendar=night.calendar,
        excluded_days=excluded,
        share=night.share(total.asset),
    )
    found = judge_groups(
        counted,
        day,
        sum(rows.values()),
        rows,
        history,
        verdict,
        calendar=night.calendar,
        excluded_days=excluded,
        rebases={},
        share=night.share(total.asset),
        # A fall of the rows within their record is no finding of its own, however large against the
        # total's minimum change (a quarter of the day's rows in one channel of half of them): the groups say
        # where it is.
        moved=verdict.severity is not None,
        rows=history,
        rows_tonight=sum(rows.values()),
    )
    if verdict.severity == "ERROR" and not found.problem:
        moved = ", ".join(m.describe(" rows") for m in found.moves[:3])
        found = found.model_copy(
            update={
                "problem": f"{counted.name} = {deviation(verdict, 'rows')}"
                + (f"; moved: {moved}" if moved else "")
            }
        )
    return found, verdict


def _moves_table(moves: list[GroupMove]) -> str:
    lines = [
        "| group | tonight | expected | change | share before | share after | |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for m in moves[:20]:
        share = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
        lines.append(
            f"| {m.group} | {_fmt(m.value)} | {_fmt(m.expected)} | {_fmt(m.change)} | {share(m.share_before)} "
            f"| {share(m.share_after)} | {m.status} |"
        )
    return "\n".join(lines)


def _signed_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{'rose' if v >= 0 else 'fell'} {abs(v):.1f}%"


def _groups_table(rec: Reconciled) -> str:
    lines = ["| group | source | target | gap change | |", "|---|---:|---:|---:|---|"]
    for g in rec.groups[:20]:
        note = "absent in target" if g.missing_in_target else ""
        lines.append(f"| {g.group} | {_fmt(g.source)} | {_fmt(g.target)} | {_fmt(g.gap_change)} | {note} |")
    return "\n".join(lines)
