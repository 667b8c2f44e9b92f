"""The night's measurements in one statement: every recorded total, row count, small table's keys and
input-freshness maximum of a checks run, as one ``UNION ALL`` built with sqlglot.

Each measurement is a :class:`Part`, a query of its own. The statement gives each part its own columns
(parts of one ``shape``, such as every ``COUNT(*)``, share theirs) and NULL in every other, with the part's
number first, so one result carries every part's rows with the types the warehouse gave them. When the
statement fails (a table missing, a column renamed, no grant), its halves are sent, down to the parts that
fail alone, so the failure is that part's only and the others are measured. Values are bound (``Binds``), identifiers quoted by the
parts that name them.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

# What a bound value reads as until the statement is rendered; cannot occur in a parsed query's text.
_MARK = "__dw_bind_"
_MARKED = re.compile(rf"{_MARK}(b\d+)__")


class Binds:
    """The values bound to the statements of one checks run: ``binds(value)`` is a placeholder to put in a
    sqlglot tree, rendered as ``?`` and bound server-side, in the order the placeholders stand in the text."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __call__(self, value: Any) -> exp.Expression:
        name = f"b{len(self.values)}"
        self.values[name] = value
        return exp.Placeholder(this=name)

    def render(self, tree: exp.Expression) -> tuple[str, tuple[Any, ...] | None]:
        """The Snowflake SQL of ``tree`` and the values its placeholders bind, in their order in the text
        (None when it binds none). ``tree`` is marked in place: it is the statement's own (``combined`` builds
        it from copies of the parts), and copying the night's whole statement first cost as much again."""
        used: list[str] = []

        def mark(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Placeholder):
                used.append(node.name)
                return exp.var(f"{_MARK}{node.name}__")
            return node

        # Nor is it copied for the generator (which may rewrite it): the statement is rendered once and dropped.
        sql = tree.transform(mark, copy=False).sql(dialect="snowflake", copy=False)
        if not used:
            return sql, None
        if len(_MARKED.findall(sql)) != len(used):
            raise ValueError(f"a query's text holds {_MARK!r}, which marks bound values")
        # Positional: each value in the order its mark stands in the rendered text.
        order = [m[1] for m in _MARKED.finditer(sql)]
        return _MARKED.sub("?", sql), tuple(self.values[name] for name in order)


@dataclass(frozen=True)
class Part:
    """One measurement: its query, whose columns come back in order."""

    key: Hashable
    query: exp.Select
    """Its own SELECT (no ORDER BY or LIMIT: it is one branch of a ``UNION ALL``)."""
    shape: str | None = None
    """Parts of one shape return the same types, so they share their columns (every ``COUNT(*)``)."""

    @property
    def width(self) -> int:
        return len(self.query.selects)


def quoted_table(database: str, schema: str, name: str) -> exp.Table:
    return exp.table_(
        exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(schema, quoted=True),
        catalog=exp.to_identifier(database, quoted=True),
    )


def _layout(parts: Sequence[Part]) -> tuple[dict[Hashable, int], int]:
    """The first column of each part's own columns (after the part number), and how many there are."""
    start: dict[Hashable, int] = {}
    shapes: dict[str, int] = {}
    width = 0
    for part in parts:
        if part.shape is not None and part.shape in shapes:
            start[part.key] = shapes[part.shape]
            continue
        start[part.key] = width
        if part.shape is not None:
            shapes[part.shape] = width
        width += part.width
    return start, width


def combined(parts: Sequence[Part]) -> tuple[exp.Query, dict[Hashable, int]]:
    """The one statement: each part's SELECT with ``<n> AS "PART"`` first and its columns in their places,
    NULL in the others, ``UNION ALL``; and where each part's columns start in its rows."""
    start, width = _layout(parts)
    branches = []
    for n, part in enumerate(parts):
        own = part.query.selects
        columns: list[exp.Expression] = [exp.Literal.number(n)]
        for i in range(width):
            j = i - start[part.key]
            columns.append(_unaliased(own[j]) if 0 <= j < part.width else exp.null())
        branch = part.query.copy()
        names = ["PART", *(f"C{i}" for i in range(width))]
        branch.set(
            "expressions", [exp.alias_(c, name, quoted=True) for c, name in zip(columns, names, strict=True)]
        )
        branches.append(branch)
    # The branches are this statement's own copies: joined as they are (a copy of the growing statement per
    # branch made building it quadratic in the parts).
    statement = branches[0] if len(branches) == 1 else exp.union(*branches, distinct=False, copy=False)
    return statement, {p.key: 1 + start[p.key] for p in parts}


def _unaliased(projection: exp.Expression) -> exp.Expression:
    return (projection.this if isinstance(projection, exp.Alias) else projection).copy()


def measure(cur: Any, parts: Sequence[Part], binds: Binds) -> dict[Hashable, list[tuple] | Exception]:
    """Every part's rows, from one statement. When it fails, each half is measured the same way, down to
    the parts that fail alone: those have their exception instead of rows, and one bad part among n costs
    about 2 log2(n) more statements, on that night only."""
    if not parts:
        return {}
    statement, start = combined(parts)
    try:
        cur.execute(*binds.render(statement))
        rows = cur.fetchall()
    except Exception as e:  # noqa: BLE001 - measured half by half below, so the failure is its part's only
        if len(parts) == 1:
            return {parts[0].key: e}
        half = len(parts) // 2
        return {**measure(cur, parts[:half], binds), **measure(cur, parts[half:], binds)}
    out: dict[Hashable, list[tuple] | Exception] = {p.key: [] for p in parts}
    for row in rows:
        part = parts[int(row[0])]
        out[part.key].append(tuple(row[start[part.key] : start[part.key] + part.width]))  # type: ignore[union-attr]
    return out
