"""A Coalesce node's joins and filters as its join text says (``sourceMapping[].join.joinCondition``,
its ``ref(...)`` rendered): the checks follow a key across joins with it (``checks/keys.py``), the diagnosis
measures what a join drops (``incidents/joins.py``), a plan reads the filters it would change."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from dw_dagster.coalesce.sql import RefSyntaxError, resolve_refs
from dw_dagster.context.lineage import Column, LineageGraph
from dw_dagster.sql import quote_identifier, table_parts

_TEMPLATE = re.compile(r"\{\{|\{%|%\}|\}\}")


class JoinParseError(ValueError):
    """A node's join text that sqlglot cannot parse, or whose templates do not render."""


_RANGE = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
"""The conditions that relate the two sides other than by equality: a validity range (``F.D >= R.VALID_FROM
AND F.D < R.VALID_TO``, ``F.D BETWEEN R.VALID_FROM AND R.VALID_TO``) or an ordering."""


@dataclass(frozen=True)
class Relation:
    """A condition of the join relating both sides other than by equality (a validity range)."""

    sql: str
    """Written on the aliases ``L`` and ``R``, the left input's columns of other tables as ``L."ALIAS.COLUMN"``."""
    shown: str
    """As the node writes it."""
    left_columns: tuple[str, ...]
    """The left input's columns it reads, as ``L`` names them."""


@dataclass(frozen=True)
class Reaching:
    """The rows that reach a join: the node's FROM and its joins before it."""

    source: str
    """``FROM ... JOIN ...`` as the node writes it."""
    left: str
    """The join's left alias, as the node writes it."""
    tables: tuple[tuple[str, str, str], ...]
    """The other tables: (alias, alias as the node writes it, fully quoted table)."""

    def select(self, names: list[str]) -> str:
        """A subquery of the left table's columns and ``names`` (``"ALIAS.COLUMN"`` of the other tables)."""
        written = {alias: sql for alias, sql, _ in self.tables}
        columns = [
            f"{written[alias]}.{quote_identifier(column)} AS {quote_identifier(name)}"
            for name in dict.fromkeys(names)
            for alias, _, column in [name.partition(".")]
            if alias in written
        ]
        return f"(SELECT {', '.join([f'{self.left}.*', *columns])} {self.source})"


@dataclass(frozen=True)
class Derived:
    """A FROM that is a subquery of selects of one table each, unioned (two registers of one kind of row in one
    layout): the rows that reach its joins. A UNION matches its inputs' columns by position, so each input's
    column at each position is what the subquery's column of that position holds."""

    sql: str
    """The subquery as the node writes it, refs resolved: ``(SELECT ... UNION ALL SELECT ...)``."""
    columns: tuple[str, ...]
    """Its columns' names (the first select's)."""
    inputs: tuple[tuple[str, tuple[str | None, ...]], ...]
    """Each input: its fully quoted table and, by position, the column it selects (None: a literal or an
    expression)."""

    def sources(self, column: str) -> list[tuple[str, str]]:
        """The inputs' (table, column) that the subquery's ``column`` is read from."""
        if column not in self.columns:
            return []
        at = self.columns.index(column)
        return [(table, read[at]) for table, read in self.inputs if read[at] is not None]

    def column_for(self, table: str, column: str) -> str | None:
        """The subquery's column that ``table``'s ``column`` is read into."""
        for name, read in self.inputs:
            if name == table and column in read:
                return self.columns[read.index(column)]
        return None


@dataclass(frozen=True)
class ParsedJoin:
    kind: str
    """INNER, LEFT, RIGHT, FULL or CROSS."""
    left_table: str
    right_table: str
    on: list[tuple[str, str]]
    """Pairs of (left column, right column) equated in the ON clause."""
    right_conditions: tuple[str, ...] = ()
    """Other conditions on the right side alone, in the ON clause or the WHERE clause, written on the
    alias ``R`` (e.g. ``R."ACTIVE" = TRUE``): a right row that fails them matches nothing."""
    right_alias: str = ""
    left_alias: str = ""
    """The aliases the node's SQL gives the two sides (``"STG"``), as its ON clause names them."""
    relations: tuple[Relation, ...] = ()
    """The conditions relating both sides other than by equality, in the ON or the WHERE clause: a left row
    with no right row of its key that meets them matches nothing (a type-2 dimension's version that went)."""
    reaching: Reaching | None = None
    """The rows that reach the join, when its relations read a table joined before the left one (a session's
    date against the version of its subscriber's plan). None: the left table itself."""
    derived: Derived | None = None
    """The left side when it is a subquery (a UNION of registers): ``left_table`` is then its alias, quoted,
    which names no table."""

    def left_tables(self) -> list[str]:
        """The tables the left side reads: the left table, or each input of a subquery."""
        return [t for t, _ in self.derived.inputs] if self.derived is not None else [self.left_table]

    def left_column(self, table: str, column: str) -> str | None:
        """The left side's name for ``table``'s ``column`` (one of :meth:`left_tables`)."""
        return self.derived.column_for(table, column) if self.derived is not None else column

    def left_sources(self, column: str) -> list[tuple[str, str]]:
        """The tables and columns the left side's ``column`` is read from: the left table's own, or each
        input's of a subquery."""
        return self.derived.sources(column) if self.derived is not None else [(self.left_table, column)]

    def left_from(self, *read: str | None) -> str:
        """What the measurements read as the join's left side (alias ``L``): the left table, or the subquery;
        or the rows that reach the join, with the left table's columns, the relations' and ``read``
        (``"ALIAS.COLUMN"``)."""
        if self.derived is not None:
            return self.derived.sql
        if self.reaching is None:
            return self.left_table
        names = [*(c for r in self.relations for c in r.left_columns), *(c for c in read if c)]
        return self.reaching.select(names)


@dataclass(frozen=True)
class ParsedFilter:
    """A condition of the node's WHERE clause on the FROM table alone, written on the alias ``L``."""

    table: str
    condition: str
    columns: tuple[str, ...]


@dataclass
class NodeSql:
    from_table: str | None
    joins: list[ParsedJoin] = field(default_factory=list)
    filters: list[ParsedFilter] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    """Alias -> fully quoted table, for every table the join text reads."""


def _render(node: str, join_text: str, resolve_table: Callable[[str, str], str]) -> exp.Select:
    try:
        sql = "SELECT * " + resolve_refs(join_text, resolve_table)
    except RefSyntaxError as e:
        raise JoinParseError(f"{node}: its join condition's template does not render: {e}") from None
    left = _TEMPLATE.search(sql)
    if left:
        raise JoinParseError(
            f"{node}: its join condition holds a template other than ref(...) at {sql[left.start() :][:40]!r}, "
            "which the diagnosis cannot render"
        )
    try:
        tree = sqlglot.parse_one(sql, read="snowflake")
    except SqlglotError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise JoinParseError(f"{node}: sqlglot cannot parse its join condition: {first}") from None
    if not isinstance(tree, exp.Select):
        raise JoinParseError(f"{node}: its join condition is not a FROM ... clause")
    return tree


def _conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    if condition is None:
        return []
    if isinstance(condition, exp.And):
        return _conjuncts(condition.left) + _conjuncts(condition.right)
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    return [condition]


def _on_alias(condition: exp.Expression, alias: str, as_: str) -> str | None:
    """``condition`` with its columns of ``alias`` written on ``as_``; None if it reads another table, a
    subquery or no column at all."""
    columns = list(condition.find_all(exp.Column))
    if not columns or condition.find(exp.Subquery, exp.Select) is not None:
        return None
    if any(c.table != alias for c in columns):
        return None
    copy = condition.copy()
    for c in copy.find_all(exp.Column):
        c.set("table", exp.to_identifier(as_))
        c.set("this", exp.to_identifier(c.name, quoted=True))
    return copy.sql(dialect="snowflake")


def _relates(condition: exp.Expression, right_alias: str, tables: dict[str, str]) -> bool:
    """Whether ``condition`` relates the right side to tables joined before it other than by equality."""
    if not isinstance(condition, _RANGE) or condition.find(exp.Subquery, exp.Select) is not None:
        return False
    aliases = {c.table for c in condition.find_all(exp.Column)}
    return right_alias in aliases and aliases != {right_alias} and aliases <= tables.keys()


def _relations(
    conditions: list[exp.Expression], left_alias: str, right_alias: str
) -> tuple[tuple[Relation, ...], bool]:
    """The relations written on ``L`` and ``R``, and whether they read tables other than the two."""
    out, others = [], False
    for cond in conditions:
        copy = cond.copy()
        read = []
        for c in copy.find_all(exp.Column):
            if c.table == right_alias:
                name = c.name
                c.set("table", exp.to_identifier("R"))
            else:
                name = c.name if c.table == left_alias else f"{c.table}.{c.name}"
                others = others or c.table != left_alias
                read.append(name)
                c.set("table", exp.to_identifier("L"))
            c.set("this", exp.to_identifier(name, quoted=True))
        shown = cond.sql(dialect="snowflake")
        out.append(Relation(copy.sql(dialect="snowflake"), shown, tuple(dict.fromkeys(read))))
    return tuple(out), others


def _reaching(
    tree: exp.Select, before: int, left: str, names: dict[str, exp.Identifier], tables: dict[str, str]
) -> Reaching:
    """The rows that reach the join at ``before``: the node's FROM and its joins before it."""
    prefix = tree.copy()
    prefix.set("joins", (tree.args.get("joins") or [])[:before])
    prefix.set("where", None)
    prefix.set("expressions", [exp.Star()])
    source = prefix.sql(dialect="snowflake").removeprefix("SELECT * ")
    ident = {a: i.sql(dialect="snowflake") for a, i in names.items()}
    others = tuple((a, ident[a], t) for a, t in tables.items() if a != left and a in ident)
    return Reaching(source, ident[left], others)


def _selects(query: exp.Expression) -> list[exp.Select] | None:
    """The selects a UNION [ALL] of them is made of, in order; None for anything else (an INTERSECT, a
    subquery nested in one)."""
    if isinstance(query, exp.Select):
        return [query]
    if type(query) is exp.Union:  # not an INTERSECT or EXCEPT, which older sqlglot made subclasses of it
        left, right = _selects(query.left), _selects(query.right)
        return None if left is None or right is None else left + right
    return None


def _derived(source: exp.Expression) -> Derived | None:
    """A FROM subquery of selects of one table each (no join, no star, no grouping), unioned; None for
    anything else, whose rows the diagnosis does not read."""
    if not isinstance(source, exp.Subquery) or not source.alias_or_name:
        return None
    selects = _selects(source.this)
    if not selects:
        return None
    inputs = []
    for select in selects:
        table = (select.args.get("from_") or select.args.get("from") or exp.From()).this
        if (
            not isinstance(table, exp.Table)
            or select.args.get("joins")
            or select.args.get("group")
            or any(isinstance(e, exp.Star) or e.find(exp.Star) for e in select.expressions)
        ):
            return None
        read = tuple(
            inner.name if isinstance(inner := e.unalias(), exp.Column) else None for e in select.expressions
        )
        inputs.append((".".join(quote_identifier(p.name) for p in table.parts), read))
    columns = tuple(e.alias_or_name for e in selects[0].expressions)
    if (
        not all(columns)
        or len(set(columns)) != len(columns)
        or any(len(r) != len(columns) for _, r in inputs)
    ):
        return None
    return Derived(f"({source.this.sql(dialect='snowflake')})", columns, tuple(inputs))


def parse_node(node: str, join_text: str, resolve_table: Callable[[str, str], str]) -> NodeSql:
    """The FROM table, the joins (with the table on each side of their equalities) and the filters of a
    Coalesce join condition. Raises :class:`JoinParseError`."""
    tree = _render(node, join_text, resolve_table)
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None:
        return NodeSql(None)
    tables: dict[str, str] = {}
    names: dict[str, exp.Identifier] = {}
    """Alias -> its identifier as the node writes it (quoted or not)."""

    def add(table: exp.Expression) -> None:
        if isinstance(table, exp.Table):
            tables[table.alias_or_name] = ".".join(quote_identifier(p.name) for p in table.parts)
            alias = table.args.get("alias")
            names[table.alias_or_name] = alias.this if alias is not None else table.this

    add(source.this)
    from_alias = source.this.alias_or_name if isinstance(source.this, exp.Table) else None
    derived = _derived(source.this)
    derived_alias = source.this.alias_or_name if derived is not None else None
    where = _conjuncts(tree.args["where"].this) if tree.args.get("where") else []
    out = NodeSql(tables.get(from_alias) if from_alias else None, aliases=tables)
    for index, join in enumerate(tree.args.get("joins") or []):
        add(join.this)
        right_alias = join.this.alias_or_name
        kind = (join.side or join.kind or "INNER").upper()
        pairs: list[tuple[str, str]] = []
        unread = False
        """A condition on the subquery other than an equality: the rows it drops are not measured as written."""
        extra: list[str] = []
        related: list[exp.Expression] = []
        left_alias = None
        for cond in _conjuncts(join.args.get("on")):
            a, b = (cond.left, cond.right) if isinstance(cond, exp.EQ) else (None, None)
            if isinstance(a, exp.Column) and isinstance(b, exp.Column):
                if a.table == right_alias:
                    a, b = b, a
                # The pairs of one left table: an ON that also equates a column of another table joined
                # before (``P.ITEM = L.ITEM AND P.REGION = I.REGION``) keeps that table's pair out, rather
                # than reading I's column on L's table.
                if b.table == right_alias and a.table != right_alias and a.table in (*tables, derived_alias):
                    if left_alias in (None, a.table):
                        pairs.append((a.name, b.name))
                        left_alias = a.table
                    elif derived_alias in (a.table, left_alias):
                        unread = True  # the subquery's join also equates another table's column
                    continue
            shown = _on_alias(cond, right_alias, "R")
            if shown:
                extra.append(shown)
            elif _relates(cond, right_alias, tables):
                related.append(cond)
            elif derived_alias and any(c.table == derived_alias for c in cond.find_all(exp.Column)):
                unread = True
        # A WHERE on the right side alone drops the left rows it does not match, as an inner join would.
        extra += [s for s in (_on_alias(c, right_alias, "R") for c in where) if s]
        # A WHERE that reads the subquery drops rows of it that the join would be blamed for.
        unread = unread or any(c.table == derived_alias for cond in where for c in cond.find_all(exp.Column))
        related += [c for c in where if _relates(c, right_alias, tables)]
        if pairs and left_alias == derived_alias and right_alias in tables and derived is not None:
            if not unread and not related and all(c in derived.columns for c, _ in pairs):
                out.joins.append(
                    ParsedJoin(
                        kind,
                        quote_identifier(left_alias),
                        tables[right_alias],
                        pairs,
                        tuple(extra),
                        right_alias,
                        left_alias,
                        derived=derived,
                    )
                )
        elif pairs and left_alias and right_alias in tables:
            relations, others = _relations(related, left_alias, right_alias)
            earlier = {a: t for a, t in tables.items() if a != right_alias}
            out.joins.append(
                ParsedJoin(
                    kind,
                    tables[left_alias],
                    tables[right_alias],
                    pairs,
                    tuple(extra),
                    right_alias,
                    left_alias,
                    relations,
                    _reaching(tree, index, left_alias, names, earlier) if others else None,
                )
            )
    if from_alias and from_alias in tables:
        for cond in where:
            shown = _on_alias(cond, from_alias, "L")
            if shown:
                cols = tuple(dict.fromkeys(c.name for c in cond.find_all(exp.Column)))
                out.filters.append(ParsedFilter(tables[from_alias], shown, cols))
    return out


def node_inputs(graph: LineageGraph, node: str) -> dict[str, str]:
    """A node's inputs by the name its join's refs give them (a ref's node name is its table's name); a
    name two inputs share is left out, as neither can be told by it."""
    by_name: dict[str, list[str]] = {}
    for parent in graph.assets.predecessors(node):
        parts = table_parts(graph.info(parent).table_name)
        if parts is not None:
            by_name.setdefault(parts[2], []).append(parent)
    return {name: found[0] for name, found in by_name.items() if len(found) == 1}


def _by_unique(graph: LineageGraph, named: dict[str, str], join: ParsedJoin) -> bool:
    """Whether a join's right columns cover a column its table declares unique: one row per key, whatever
    else the join keeps of it (a filter cannot choose among a key's versions where there is one)."""
    right = named[join.right_table]
    unique = {c.upper() for c in graph.info(right).unique} if right in graph else set()
    return bool(unique) and any(r.upper() in unique for _, r in join.on)


def equated(graph: LineageGraph, node: str, *, by_key_alone: bool = False) -> list[tuple[Column, Column]]:
    """The pairs of input columns a node's joins equate (an ON clause's ``L.A = R.B``); none when its join
    text does not parse or names a table that is not one of its inputs. ``by_key_alone``: only the joins that
    relate the two sides by those equalities alone: not a type-2 dimension's, whose row for a key changes
    with the date it is valid from, nor one that keeps only some of the right side's rows (its current
    version, ``"IS_CURRENT" = TRUE``: a key's row there changes when a new version is current) unless the
    right table declares the key unique (then a filter keeps its one row or none)."""
    join = graph.info(node).join
    if not join:
        return []
    inputs = node_inputs(graph, node)

    def resolve(location: str, name: str) -> str:
        # Each input stands for itself by its name alone: only which input each side is matters here.
        if name not in inputs:
            raise JoinParseError(f"{node}: ref('{location}', '{name}') is none of its inputs")
        return quote_identifier(name)

    try:
        joins = parse_node(node, join, resolve).joins
    except JoinParseError:
        return []
    named = {quote_identifier(name): asset for name, asset in inputs.items()}
    return [
        ((named[j.left_table], left), (named[j.right_table], right))
        for j in joins
        # A table named outright (not by a ref) and a union's alias are none of the inputs.
        if j.derived is None
        and j.left_table in named
        and j.right_table in named
        and not (by_key_alone and (j.relations or (j.right_conditions and not _by_unique(graph, named, j))))
        for left, right in j.on
    ]
