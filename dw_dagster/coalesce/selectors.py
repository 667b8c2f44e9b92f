"""Coalesce node selectors: which nodes a Job (or an ad-hoc run) builds.

The syntax, from Coalesce's "Selector Queries" reference:

- a term is a brace of ``attribute: value`` pairs, ANDed: ``{location: SRC name: CUSTOMER}``; the
  attributes are ``name``, ``nodeID``, ``location``, ``nodeType`` and ``subgraph``; a value is a bare word
  or a quoted string (``{subgraph: "My Dimensions"}``), and ``*`` in it matches any run of characters
  (``{name: STG_*}``); values match case-insensitively;
- ``+{X}`` is X and everything upstream of it, ``{X}+`` is X and everything downstream, ``+{X}+`` both;
- ``A OR B`` is the union of two terms, ``A AND B`` their intersection (AND binds tighter).

An empty selector selects nothing: a Job whose include selector is empty builds no node. (A run started
with neither a Job nor an include selector refreshes every node; that is the caller's rule, not a
selector's.)
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dw_dagster.coalesce.workspace_models import CoalesceNode

__all__ = [
    "ATTRIBUTES",
    "Selector",
    "SelectorError",
    "SelectorNode",
    "SelectorTerm",
    "as_selector_node",
    "parse_selector",
    "select_nodes",
]

ATTRIBUTES = ("name", "nodeID", "location", "nodeType", "subgraph")


class SelectorError(ValueError):
    """A selector that does not parse; ``position`` is the 0-based offset of the offending text."""

    def __init__(self, text: str, position: int, problem: str):
        self.text = text
        self.position = position
        self.problem = problem
        super().__init__(f"{problem} at position {position} of selector {text!r}")


@dataclass(frozen=True)
class SelectorTerm:
    """One brace: its ``(attribute, pattern)`` pairs, ANDed, and whether it extends up or downstream."""

    attributes: tuple[tuple[str, str], ...]
    upstream: bool = False
    downstream: bool = False


@dataclass(frozen=True)
class Selector:
    """A parsed selector: a union (OR) of intersections (AND) of terms."""

    text: str
    clauses: tuple[tuple[SelectorTerm, ...], ...]

    @property
    def is_empty(self) -> bool:
        return not self.clauses


@dataclass(frozen=True)
class SelectorNode:
    """What a selector looks at in a node. ``dependencies`` are the ``(location, name)`` it reads."""

    id: str
    name: str
    location: str
    node_type: str
    subgraphs: frozenset[str] = frozenset()
    dependencies: tuple[tuple[str, str], ...] = ()


# ------------------
# Parsing
# ------------------

_SPACE = re.compile(r"\s*")
_KEYWORD = re.compile(r"(OR|AND)(?![^\s{}+])", re.IGNORECASE)
_KEY = re.compile(r"([A-Za-z]+)\s*:")
_BARE_VALUE = re.compile(r"[^\s{}\"']+")
_QUOTED_VALUE = re.compile(r"\"([^\"]*)\"|'([^']*)'")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, problem: str, position: int | None = None) -> SelectorError:
        return SelectorError(self.text, self.pos if position is None else position, problem)

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def peek(self, char: str) -> bool:
        self.skip_space()
        return self.text.startswith(char, self.pos)

    def keyword(self) -> str | None:
        self.skip_space()
        match = _KEYWORD.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return match[1].upper()

    def parse(self) -> Selector:
        if self.at_end():
            return Selector(self.text, ())
        clauses = [self.clause()]
        while not self.at_end():
            start = self.pos
            if self.keyword() != "OR":
                raise self.error("expected OR, AND or the end of the selector", start)
            clauses.append(self.clause())
        return Selector(self.text, tuple(clauses))

    def clause(self) -> tuple[SelectorTerm, ...]:
        terms = [self.term()]
        while True:
            start = self.pos
            if self.keyword() != "AND":
                self.pos = start
                return tuple(terms)
            terms.append(self.term())

    def term(self) -> SelectorTerm:
        upstream = self.peek("+")
        if upstream:
            self.pos += 1
        if not self.peek("{"):
            raise self.error("expected '{'" if not self.at_end() else "expected a term after the operator")
        self.pos += 1
        attributes = []
        while not self.peek("}"):
            if self.at_end():
                raise self.error("expected '}'")
            attributes.append(self.attribute())
        if not attributes:
            raise self.error("empty term: expected 'attribute: value'")
        self.pos += 1
        downstream = self.text.startswith("+", self.pos)
        if downstream:
            self.pos += 1
        return SelectorTerm(tuple(attributes), upstream=upstream, downstream=downstream)

    def attribute(self) -> tuple[str, str]:
        start = self.pos
        key = _KEY.match(self.text, self.pos)
        if key is None:
            raise self.error(
                "expected 'attribute: value' (a bare name is not a Coalesce selector; "
                "write {name: NODE_NAME})"
            )
        if key[1] not in ATTRIBUTES:
            raise self.error(f"unknown attribute {key[1]!r} (expected one of {', '.join(ATTRIBUTES)})", start)
        self.pos = key.end()
        self.skip_space()
        quoted = _QUOTED_VALUE.match(self.text, self.pos)
        if quoted is not None:
            self.pos = quoted.end()
            value = quoted[1] if quoted[1] is not None else quoted[2]
        else:
            bare = _BARE_VALUE.match(self.text, self.pos)
            if bare is None or bare[0].endswith(":"):
                raise self.error(f"expected a value for {key[1]!r}")
            self.pos = bare.end()
            value = bare[0]
        if not value:
            raise self.error(f"empty value for {key[1]!r}", start)
        return key[1], value


def parse_selector(text: str | None) -> Selector:
    """Parses a selector; ``None`` or blank text is the empty selector. Raises :class:`SelectorError`."""
    return _Parser(text or "").parse()


# ------------------
# Evaluation
# ------------------


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.IGNORECASE)


# A selector's attributes, as the node fields they match (``subgraph`` matches any of a node's subgraphs).
_FIELDS = {"name": "name", "nodeID": "id", "location": "location", "nodeType": "node_type"}


def _matches(node: SelectorNode, attribute: str, pattern: str) -> bool:
    regex = _glob(pattern)
    if attribute == "subgraph":
        return any(regex.fullmatch(s) for s in node.subgraphs)
    return regex.fullmatch(getattr(node, _FIELDS[attribute])) is not None


def _closure(start: set[str], links: Mapping[str, set[str]]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for other in links.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


@dataclass(frozen=True)
class _ValueIndex:
    """One attribute's values, for the patterns without ``*``: the ids of the nodes whose ASCII value is each
    lower-cased value, and the nodes whose value is not ASCII. Between ASCII texts, matching case-insensitively
    is comparing lower-cased; a non-ASCII character may match an ASCII one (``ſ`` matches ``s`` in Python's
    case-insensitive regex), so those nodes are matched by the pattern's regex, as every node was."""

    ids_by_lower: Mapping[str, set[str]]
    others: list[SelectorNode]

    @classmethod
    def build(cls, nodes: Iterable[SelectorNode], field: str) -> _ValueIndex:
        ids_by_lower: dict[str, set[str]] = defaultdict(set)
        others = []
        for node in nodes:
            value: str = getattr(node, field)
            if value.isascii():
                ids_by_lower[value.lower()].add(node.id)
            else:
                others.append(node)
        return cls(ids_by_lower, others)


class SelectorGraph:
    """An environment's nodes and lineage, built once and asked many selectors (one per job)."""

    def __init__(self, nodes: list[SelectorNode], edges: Iterable[tuple[str, str]] | None):
        self.nodes = nodes
        self._indexes: dict[str, _ValueIndex] = {}
        self._edges = None if edges is None else list(edges)

    @functools.cached_property
    def _lineage(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """Each node's parents and children, made when a selector first asks upstream or downstream (most
        jobs' selectors never do)."""
        ids = {n.id for n in self.nodes}
        edges = self._edges
        if edges is None:
            by_key = {(n.location, n.name): n.id for n in self.nodes}
            edges = [(by_key[dep], n.id) for n in self.nodes for dep in n.dependencies if dep in by_key]
        parents: dict[str, set[str]] = defaultdict(set)
        children: dict[str, set[str]] = defaultdict(set)
        for up, down in edges:
            if up in ids and down in ids:
                parents[down].add(up)
                children[up].add(down)
        return parents, children

    def matching(self, attribute: str, pattern: str) -> set[str]:
        """The ids of the nodes whose ``attribute`` matches ``pattern``. A pattern without ``*`` (a job's
        ``{location: X}``) is looked up in the attribute's index rather than matched against every node:
        a workspace's jobs each asked every node, 20 jobs over 10,000 nodes at each load."""
        if attribute == "subgraph" or "*" in pattern or not pattern.isascii():
            return {n.id for n in self.nodes if _matches(n, attribute, pattern)}
        index = self._indexes.get(attribute)
        if index is None:
            index = self._indexes[attribute] = _ValueIndex.build(self.nodes, _FIELDS[attribute])
        hits = set(index.ids_by_lower.get(pattern.lower(), ()))
        hits.update(n.id for n in index.others if _matches(n, attribute, pattern))
        return hits

    def term(self, term: SelectorTerm) -> set[str]:
        hits = (
            set.intersection(*(self.matching(a, p) for a, p in term.attributes))
            if term.attributes
            else {n.id for n in self.nodes}
        )
        out = set(hits)
        if term.upstream:
            out |= _closure(hits, self._lineage[0])
        if term.downstream:
            out |= _closure(hits, self._lineage[1])
        return out

    def selector(self, selector: Selector) -> set[str]:
        out: set[str] = set()
        for clause in selector.clauses:
            sets = [self.term(t) for t in clause]
            out |= set.intersection(*sets)
        return out

    @classmethod
    def from_nodes(
        cls, nodes: Iterable[Any], edges: Iterable[tuple[str, str]] | None = None
    ) -> SelectorGraph:
        """See :func:`select_nodes` for what ``nodes`` and ``edges`` may be."""
        return cls([as_selector_node(n) for n in nodes], edges)

    def select(self, include: str | Selector | None, exclude: str | Selector | None = None) -> set[str]:
        include_sel = include if isinstance(include, Selector) else parse_selector(include)
        exclude_sel = exclude if isinstance(exclude, Selector) else parse_selector(exclude)
        return self.selector(include_sel) - self.selector(exclude_sel)


# Whether each type of node is a mapping, asked once per type rather than for every field of every node (an
# ABC's isinstance, 100,000 times a load of 10,000 nodes).
_MAPPING_TYPES: dict[type, bool] = {}


def _get(node: Any, api_name: str, attribute: str, default: Any = None) -> Any:
    kind = type(node)
    is_mapping = _MAPPING_TYPES.get(kind)
    if is_mapping is None:
        is_mapping = _MAPPING_TYPES[kind] = issubclass(kind, Mapping)
    if is_mapping:
        return node.get(api_name, default)
    return getattr(node, attribute, default)


def as_selector_node(node: Any) -> SelectorNode:
    """A :class:`SelectorNode` from an API node dict (camelCase keys, summary or full) or an object with
    snake_case attributes such as ``dw_dagster.coalesce.models.CoalesceNode``.
    """
    if isinstance(node, SelectorNode):
        return node
    if type(node) is CoalesceNode:  # the state's own records (every node of a load): their fields, typed
        return SelectorNode(
            id=node.id,
            name=node.name,
            location=node.location_name or "",
            node_type=node.node_type,
            dependencies=tuple(
                (dep.location_name, dep.node_name)
                for mapping in node.metadata.source_mapping
                for dep in mapping.dependencies
            ),
        )
    dependencies = []
    metadata = _get(node, "metadata", "metadata")
    mappings = _get(metadata, "sourceMapping", "source_mapping") if metadata is not None else None
    for mapping in mappings or ():
        for dep in _get(mapping, "dependencies", "dependencies") or ():
            dependencies.append(
                (_get(dep, "locationName", "location_name", ""), _get(dep, "nodeName", "node_name", ""))
            )
    return SelectorNode(
        id=str(_get(node, "id", "id")),
        name=_get(node, "name", "name", ""),
        location=_get(node, "locationName", "location_name", "") or "",
        node_type=_get(node, "nodeType", "node_type", "") or "",
        subgraphs=frozenset(_get(node, "subgraphs", "subgraphs", None) or ()),
        dependencies=tuple(dependencies),
    )


def select_nodes(
    include: str | Selector | None,
    exclude: str | Selector | None,
    nodes: Iterable[Any],
    edges: Iterable[tuple[str, str]] | None = None,
) -> set[str]:
    """The ids of the nodes that ``include`` selects and ``exclude`` does not.

    Args:
        include: The include selector; empty selects nothing.
        exclude: The exclude selector; empty excludes nothing.
        nodes: The environment's nodes: :class:`SelectorNode`, API dicts, or objects with snake_case
            attributes (``id``, ``name``, ``location_name``, ``node_type``, ``metadata``).
        edges: ``(upstream_id, downstream_id)`` pairs for ``+``; by default read from each node's
            ``metadata.sourceMapping[].dependencies`` (so summary nodes without edges have no lineage).

    Raises:
        SelectorError: A selector does not parse.
    """
    return SelectorGraph.from_nodes(nodes, edges).select(include, exclude)
