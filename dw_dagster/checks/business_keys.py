"""Duplicate business keys: a table whose Coalesce node declares a business key (``isBusinessKey``, one or
more columns: ``coalesce/business_key``) holds one row per key, so rows that share a key are duplicates,
whatever the row count's baseline says. A small table loaded twice doubles within its count's noise; its
key does not hold.

Each monitored table built as a table (a view's count would run its query) has its rows and distinct keys
counted every night, one part of the night's statement (``measure.py``): tonight's build is what the table
holds. How many rows more than one a key the table holds is recorded as the series ``key_repeats:<asset>``,
and a key that repeated on a recorded night (not an incident's) is not unique by design (an aggregate whose
declared key is part of its grain): it never alarms. A node that tracks changes (a type-2 history) declares
no key here (``coalesce/translator.py``). A key unique on every recorded night (``MIN_NIGHTS`` at least)
that repeats tonight is a finding the diagnosis classes as duplication (``incidents/duplication.py``); with
fewer nights to tell, a WARN.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

import dagster as dg
from sqlglot import exp

from dw_dagster.checks.history import Reading, Recorded
from dw_dagster.checks.measure import Part, quoted_table
from dw_dagster.checks.recorded_totals import HISTORY_DAYS
from dw_dagster.checks.tonight import Night
from dw_dagster.coalesce.metadata import CoalesceMetadataSet
from dw_dagster.sql import table_parts

BUSINESS_KEY_CHECK = "business_key"
REPEATS_LOOKBACK_DAYS = HISTORY_DAYS
MIN_NIGHTS = 5


def repeats_series(asset_key: str) -> str:
    return f"key_repeats:{asset_key}"


@dataclass(frozen=True)
class BusinessKey:
    table: tuple[str, str, str]
    columns: list[str]


def business_key(spec: dg.AssetSpec) -> BusinessKey | None:
    """The key of a table the checks can count it in: a built node's, materialized as a table."""
    values = spec.metadata
    table = table_parts(values.get("dagster/table_name"))
    columns = CoalesceMetadataSet.key_columns(values)
    if (
        table is None
        or not columns
        or CoalesceMetadataSet.read(values, "materialization") == "view"
        or CoalesceMetadataSet.read(values, "node_type") == "Source"
    ):
        return None
    return BusinessKey(table, columns)


def keyed(specs: Sequence[dg.AssetSpec]) -> dict[dg.AssetKey, BusinessKey]:
    return {s.key: found for s in specs if (found := business_key(s))}


def business_key_specs(keys: Mapping[dg.AssetKey, BusinessKey]) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            name=BUSINESS_KEY_CHECK,
            asset=asset,
            description=f"One row per business key ({', '.join(key.columns)}): no two rows share it",
        )
        for asset, key in keys.items()
    ]


def repeats_part(key: Hashable, table: tuple[str, str, str], columns: Sequence[str]) -> Part:
    """Tonight's rows with a key and distinct keys of a table, as a part of the night's statement: a
    ``COUNT(*)`` per key under ``SUM`` and ``COUNT``, as ``COUNT(DISTINCT a, b)`` is not portable; a row
    whose key has a NULL is not counted (no key to share)."""
    keys = [exp.column(exp.to_identifier(c, quoted=True)) for c in columns]
    per_key = (
        exp.select(exp.alias_(exp.Count(this=exp.Star()), "N", quoted=True))
        .from_(quoted_table(*table))
        .where(*(k.is_(exp.null()).not_() for k in keys))
        .group_by(*keys)
    )
    n = exp.column(exp.to_identifier("N", quoted=True))
    query = exp.select(exp.Sum(this=n), exp.Count(this=exp.Star())).from_(per_key.subquery("PER_KEY"))
    return Part(("key_repeats", key), query, shape="key_repeats")


@dataclass(frozen=True)
class KeyVerdict:
    severity: str | None
    """ERROR (a finding), WARN (shown, no incident) or None (passed)."""
    description: str


def judge_repeats(
    rows: int, keys: int, past: Mapping[date, Recorded], excluded: set[date], columns: Sequence[str]
) -> KeyVerdict:
    """Tonight's repeats of a declared key against the nights recorded before (``excluded``: incident
    nights, left out as every baseline leaves them out). A key that repeated on any other night is not
    unique by design, however seldom it repeats (a false alarm costs a night's trust); a key unique on
    fewer than ``MIN_NIGHTS`` nights has not shown it is unique yet."""
    repeats = rows - keys
    key = ", ".join(columns)
    nights = [r for d, r in past.items() if d not in excluded and r.value is not None]
    repeated = sum(1 for r in nights if (r.value or 0) > 0)
    if repeats <= 0:
        return KeyVerdict(None, f"{rows:,} rows, each with its own {key}")
    shared = f"{rows:,} rows hold {keys:,} distinct {key}: {repeats:,} more than one a key"
    if repeated:
        return KeyVerdict(
            None, f"{shared}; the key repeated on {repeated} of the {len(nights)} nights recorded: not unique"
        )
    if len(nights) < MIN_NIGHTS:
        return KeyVerdict(
            "WARN", f"{shared}; unique on {len(nights)} nights recorded, {MIN_NIGHTS} needed to tell"
        )
    return KeyVerdict("ERROR", f"{shared}; unique on each of the {len(nights)} nights recorded before")


class BusinessKeys:
    """The duplicate-key checks of one checks run: what to measure, and each table's judgement."""

    def __init__(self, keys: Mapping[dg.AssetKey, BusinessKey], selected: Sequence[dg.AssetKey]):
        chosen = set(selected)
        self.keys = {asset: key for asset, key in keys.items() if asset in chosen}

    def series(self) -> dict[str, int]:
        """The series these checks judge against -> how many nights back."""
        return {repeats_series(k.to_user_string()): REPEATS_LOOKBACK_DAYS for k in self.keys}

    def parts(self) -> list[Part]:
        return [repeats_part(asset, key.table, key.columns) for asset, key in self.keys.items()]

    def evaluate(
        self, night: Night, measured: Mapping[Hashable, list[tuple] | Exception]
    ) -> tuple[list[dg.AssetCheckResult], list[str]]:
        results, errors = [], []
        for asset, key in self.keys.items():
            columns, path = key.columns, asset.to_user_string()
            got = measured.get(("key_repeats", asset))
            if not isinstance(got, list) or len(got) != 1:
                why = f"{type(got).__name__}: {got}" if isinstance(got, Exception) else "not measured"
                errors.append(f"{BUSINESS_KEY_CHECK} of {path}: its keys could not be counted ({why})")
                continue
            total, distinct = got[0]
            rows, keys = int(total or 0), int(distinct or 0)
            series = repeats_series(path)
            past = night.past.get(series, {})
            verdict = judge_repeats(rows, keys, past, night.excluded(past), columns)
            night.record(series, Reading(value=float(rows - keys)))
            metadata = {
                "rows": dg.MetadataValue.int(rows),
                "distinct_keys": dg.MetadataValue.int(keys),
                "business_key": ", ".join(columns),
            }
            description = f"{BUSINESS_KEY_CHECK} of {path}: {verdict.description}"
            if verdict.severity == "ERROR":
                night.flag(series)
                night.report(
                    BUSINESS_KEY_CHECK,
                    path,
                    description,
                    {"key": list(columns), "row_count": rows, "distinct_keys": keys, "repeats": rows - keys},
                )
            results.append(
                dg.AssetCheckResult(
                    check_name=BUSINESS_KEY_CHECK,
                    asset_key=asset,
                    passed=verdict.severity is None,
                    severity=dg.AssetCheckSeverity.WARN
                    if verdict.severity == "WARN"
                    else dg.AssetCheckSeverity.ERROR,
                    description=description,
                    metadata=metadata,
                )
            )
        return results, errors
