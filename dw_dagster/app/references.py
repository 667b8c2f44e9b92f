"""Every reference between the context file, the metrics file and the asset graph must resolve at load.

Each file is valid on its own (pydantic); this checks what they say about each other once the asset graph
is known: a total on a misspelt asset is a check that never runs, a rule that matches no asset silently
hands its tables to the next rule's owners, and an unknown team is nobody to approve or to alert. Loading
fails with every problem at once, each naming the file and the field.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from pathlib import Path

import dagster as dg

from dw_dagster.checks.metrics import MetricsFile
from dw_dagster.coalesce.sql import RefSyntaxError, find_refs
from dw_dagster.config import DwConfigError
from dw_dagster.context.models import ContextFile

TableResolver = Callable[[str, str], str]


class _Graph:
    """What the references are checked against: asset keys, Coalesce nodes' columns, Coalesce jobs.

    Each index is built when a reference first asks for it: a code location whose files name nothing (or
    no job) would otherwise index every spec of the workspace on every load for nothing."""

    def __init__(self, specs: Sequence[dg.AssetSpec]):
        self._specs = specs

    @cached_property
    def assets(self) -> dict[str, dg.AssetSpec]:
        return {s.key.to_user_string(): s for s in self._specs}

    @cached_property
    def nodes(self) -> list[str]:
        return sorted(k for k, s in self.assets.items() if "coalesce/node_id" in s.metadata)

    @cached_property
    def jobs(self) -> set[str]:
        found: set[str] = set()
        for spec in self._specs:
            jobs = spec.metadata.get("coalesce/jobs")
            for job in getattr(jobs, "value", jobs) or []:
                found.add(job["name"])
        return found

    def columns(self, key: str) -> set[str] | None:
        schema = self.assets[key].metadata.get("dagster/column_schema")
        return {c.name.upper() for c in schema.columns} if isinstance(schema, dg.TableSchema) else None

    def unknown_asset(self, key: str) -> str | None:
        if key in self.assets:
            return None
        near = [k for k in self.assets if k.rsplit("/", 1)[-1] == key.rsplit("/", 1)[-1]]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"no asset {key!r} in the asset graph{hint}"

    def matches(self, pattern: str, among: Sequence[str] | None = None) -> bool:
        return any(fnmatch.fnmatchcase(k, pattern) for k in (self.assets if among is None else among))


def _refs(sql: str | None, resolve_table: TableResolver | None) -> Iterator[str]:
    if not sql or resolve_table is None:
        return
    try:
        for location, name in find_refs(sql):
            try:
                resolve_table(location, name)
            except ValueError as e:
                yield str(e)
    except RefSyntaxError as e:
        yield str(e)


def _metrics_problems(
    metrics: MetricsFile, context: ContextFile | None, graph: _Graph, resolve_table: TableResolver | None
) -> Iterator[str]:
    for i, t in enumerate(metrics.totals):
        where = f"totals[{i}] ({t.name})"
        if context is not None and t.owner not in context.teams:
            yield f"{where}.owner: unknown team {t.owner!r}; teams: {', '.join(sorted(context.teams))}"
        if problem := graph.unknown_asset(t.asset):
            yield f"{where}.asset: {problem}"
        for problem in _refs(t.sql, resolve_table):
            yield f"{where}.sql: {problem}"
    for j, pattern in enumerate(metrics.volume.assets):
        if not graph.matches(pattern):
            yield f"volume.assets[{j}]: {pattern!r} matches no asset"
    for key in metrics.volume.bounds:
        if problem := graph.unknown_asset(key):
            yield f"volume.bounds.{key}: {problem}"
    for k, f in enumerate(metrics.freshness.inputs):
        for field in ("asset", "input"):
            if problem := graph.unknown_asset(getattr(f, field)):
                yield f"freshness.inputs[{k}].{field}: {problem}"
    for job in metrics.freshness.schedules:
        if graph.jobs and job not in graph.jobs:
            yield f"freshness.schedules.{job}: no Coalesce job {job!r}; jobs: {', '.join(sorted(graph.jobs))}"


def _context_problems(
    context: ContextFile, graph: _Graph, resolve_table: TableResolver | None
) -> Iterator[str]:
    for i, rule in enumerate(context.coalesce_owners):
        if not graph.matches(rule.match, graph.nodes):
            yield f"coalesce_owners[{i}].match: {rule.match!r} matches no Coalesce asset"
    for name, domain in context.domains.items():
        for j, pattern in enumerate(domain.assets):
            if not graph.matches(pattern):
                yield f"domains.{name}.assets[{j}]: {pattern!r} matches no asset"
    for i, ref in enumerate(context.reference_tables):
        where = f"reference_tables[{i}] ({ref.asset})"
        if problem := graph.unknown_asset(ref.asset):
            yield f"{where}.asset: {problem}"
            continue
        columns = graph.columns(ref.asset)
        named = {
            "key_column": [ref.key_column],
            "copy_from_donor": ref.copy_from_donor,
            "audit_columns": list(ref.audit_columns.values()),
        }
        for field, names in named.items():
            missing = [c for c in names if columns is not None and c.upper() not in columns]
            if missing:
                yield f"{where}.{field}: {missing} not among the table's columns {sorted(columns or ())}"
        for problem in _refs(ref.draft_sql, resolve_table):
            yield f"{where}.draft_sql: {problem}"


def check_references(
    specs: Sequence[dg.AssetSpec],
    *,
    context: ContextFile | None,
    context_path: Path | str | None,
    metrics: MetricsFile,
    metrics_path: Path | str | None,
    resolve_table: TableResolver | None = None,
) -> None:
    """Raises :class:`DwConfigError` listing every reference that does not resolve, one line each."""
    graph = _Graph(specs)
    lines = [f"{metrics_path}: {p}" for p in _metrics_problems(metrics, context, graph, resolve_table)]
    if context is not None:
        lines += [f"{context_path}: {p}" for p in _context_problems(context, graph, resolve_table)]
    if lines:
        raise DwConfigError("\n".join(lines))
