"""The node changes dw-dagster proposes, as diffs of a node's editable definition: keep the rows an inner join
drops (bucketed and tested), or normalise the values a source scaled or flipped for one subset (and test
that they stay normal).

dw-dagster never edits or deploys a Coalesce node: it reads the node from the Coalesce API, writes the
change as a unified diff of the node's editable definition for the node's owner to apply in Coalesce, and
later checks that what is deployed carries it.

The change, for a join ``INNER JOIN {{ ref('LOC', 'RIGHT') }} "RIGHT"`` that drops left rows:

- the join becomes ``LEFT JOIN``, so rows whose key matches nothing are kept (their units count);
- the node's text columns that come from the right side become ``COALESCE(..., 'UNMAPPED')``, so the kept
  rows land in a visible bucket and the columns' not-null tests still hold;
- a node test returns the rows in that bucket, so the next unmatched key fails the job instead of
  vanishing from a total.

The change, for a source column whose values moved by a factor ``f`` (or flipped sign) for ``KEY = v``:

- each of the node's columns computed from it reads ``CASE WHEN "SRC"."KEY" = v THEN "SRC"."COL" / f ELSE
  "SRC"."COL" END`` instead of the column;
- a node test fails when the subset moves again: for a sign, rows of the subset with the wrong sign; for a
  unit, the subset's average against the other rows' average outside the band around its usual ratio
  (``sqrt(f)`` either side, from the data).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from dw_dagster.coalesce.sql import find_refs
from dw_dagster.coalesce.workspace_models import CoalesceNode
from dw_dagster.records.remediation import NodeChange
from dw_dagster.sql import quote_identifier

UNMAPPED = "UNMAPPED"
_TEXT_TYPES = ("VARCHAR", "STRING", "TEXT", "CHAR")


def definition(node: CoalesceNode) -> dict[str, Any]:
    """The parts of a node a join change touches, as the node owner reads them in Coalesce."""
    mapping = node.metadata.source_mapping[0] if node.metadata.source_mapping else None
    return {
        "node": f"{node.location_name}.{node.name}",
        "join": (mapping.join.join_condition if mapping and mapping.join else "").strip(),
        "columns": [
            {"name": c.name, "dataType": c.data_type, "transform": c.transform or ""}
            for c in node.metadata.columns
        ],
        "nodeTests": [
            {"name": t.name, "sql": t.template_string.strip()} for t in node.metadata.applied_node_tests
        ],
    }


def _block_strings(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _block_strings)


def as_yaml(defn: Mapping[str, Any]) -> str:
    return yaml.dump(dict(defn), Dumper=_Dumper, sort_keys=False, width=200, allow_unicode=True)


def unified_diff(before: Mapping[str, Any], after: Mapping[str, Any], name: str) -> str:
    lines = difflib.unified_diff(
        as_yaml(before).splitlines(),
        as_yaml(after).splitlines(),
        f"a/{name}.yml",
        f"b/{name}.yml",
        lineterm="",
    )
    return "\n".join(lines) + "\n"


_KEYWORDS = (
    r"(?:ON|USING|WHERE|GROUP|ORDER|HAVING|QUALIFY|LEFT|RIGHT|INNER|FULL|CROSS|NATURAL|JOIN|LATERAL|UNION)\b"
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def _join_pattern(location: str, name: str) -> re.Pattern[str]:
    ref = rf"\{{\{{\s*ref\(\s*['\"]{re.escape(location)}['\"]\s*,\s*['\"]{re.escape(name)}['\"]\s*\)\s*\}}\}}"
    return re.compile(
        rf"\b((?:LEFT|RIGHT|FULL|CROSS|NATURAL)(?:\s+OUTER)?\s+|INNER\s+)?JOIN(\s+{ref})"
        rf"(\s+(?:AS\s+)?(?!{_KEYWORDS})(\"[^\"]+\"|\w+))?",
        re.IGNORECASE,
    )


def _inner_joins(join: str, location: str, name: str) -> list[re.Match[str]]:
    """Inner joins to the ref, matched on the text with comments blanked (offsets kept), so a commented-out
    join is never taken for a live one."""
    masked = _COMMENTS.sub(lambda m: " " * len(m.group()), join)
    return [
        m
        for m in _join_pattern(location, name).finditer(masked)
        if not m.group(1) or m.group(1).strip().upper() == "INNER"
    ]


def keep_unmatched(
    node: CoalesceNode,
    right_table: str,
    resolve_table: Callable[[str, str], str],
    right_columns: Mapping[str, str],
) -> tuple[dict[str, Any], tuple[str, str], str]:
    """The node's definition with the inner join to ``right_table`` made LEFT, the right side's text
    columns bucketed, and the unmatched-rows test added; returns it, the right side's ref and the test's name.

    ``right_columns`` maps each of the node's columns that comes from the right side to the right-side
    column it reads (from column lineage).

    Raises:
        ValueError: the join text has no inner join to ``right_table``, or no text column to bucket.
    """
    before = definition(node)
    refs = [r for r in find_refs(before["join"]) if resolve_table(*r) == right_table]
    if not refs:
        raise ValueError(f"node {node.name}: its join does not read {right_table}")
    location, name = refs[0]
    matches = _inner_joins(before["join"], location, name)
    if not matches:
        raise ValueError(f"node {node.name}: no inner join to {location}.{name} in its join condition")
    match, text = matches[0], before["join"]
    alias_text = match.group(4) or name
    # Snowflake folds an unquoted alias to upper case; quoted, it is used as written.
    alias = alias_text.strip('"') if alias_text.startswith('"') else alias_text.upper()
    join = text[: match.start()] + "LEFT JOIN" + text[match.start(2) :]

    columns: list[dict[str, Any]] = []
    bucketed: list[str] = []
    for column in before["columns"]:
        source = right_columns.get(column["name"])
        is_text = str(column["dataType"]).upper().startswith(_TEXT_TYPES)
        if source is None or not is_text:
            columns.append(dict(column))
            continue
        expr = column["transform"] or f"{quote_identifier(alias)}.{quote_identifier(source)}"
        columns.append({**column, "transform": f"COALESCE({expr}, '{UNMAPPED}')"})
        bucketed.append(column["name"])
    if not bucketed:
        raise ValueError(f"node {node.name}: no text column from {location}.{name} to bucket as {UNMAPPED}")
    test_name = f"NO_UNMATCHED_{name}"
    own_ref = f"{{{{ ref('{node.location_name}', '{node.name}') }}}}"
    test = {
        "name": test_name,
        "sql": f"SELECT * FROM {own_ref} WHERE {quote_identifier(bucketed[0])} = '{UNMAPPED}'",
    }
    tests = [t for t in before["nodeTests"] if t["name"] != test_name] + [test]
    return {**before, "join": join, "columns": columns, "nodeTests": tests}, (location, name), test_name


_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")


def _literal(value: str | None, numeric: bool) -> str:
    """A key value from data as a literal of the node's SQL (a node definition binds nothing): a numeric key
    only as a plain number, a text key as Snowflake reads a string constant, where a backslash escapes (so
    doubling the quotes alone would let ``x\\' OR 1=1 --`` end the string)."""
    from sqlglot import exp

    if value is None:
        return "NULL"
    if numeric:
        if not _NUMBER.fullmatch(value):
            raise ValueError(f"a numeric key written as a number, got {value!r}")
        return value
    return exp.Literal.string(value).sql(dialect="snowflake")


def normalise(
    node: CoalesceNode,
    column: str,
    source: tuple[str, str],
    key: tuple[str, str | None, bool],
    factor: float,
    test: tuple[str, str, float, float],
) -> tuple[dict[str, Any], str]:
    """The node's definition with ``column`` normalised for one subset, and a node test that it stays so;
    returns it and the test's name.

    ``source`` is (alias, column) of the source column whose values moved, as the node reads it; ``key``
    the subset's (source column, value, numeric); ``test`` the node's own (key column, measured column) and
    the band (low, high) of the subset's average over the other rows' (sign changes: the sign the values
    should have, +1 or -1, twice).

    Raises:
        ValueError: the node has no such column, or the column does not read the source column.
    """
    import sqlglot
    from sqlglot import exp

    before = definition(node)
    alias, src_column = source
    key_column, key_value, numeric = key
    target = next((c for c in before["columns"] if c["name"] == column), None)
    if target is None:
        raise ValueError(f"node {node.name}: no column {column}")
    ref = f"{quote_identifier(alias)}.{quote_identifier(src_column)}"
    cond = (
        f"{quote_identifier(alias)}.{quote_identifier(key_column)} IS NULL"
        if key_value is None
        else f"{quote_identifier(alias)}.{quote_identifier(key_column)} = {_literal(key_value, numeric)}"
    )
    fixed = f"-{ref}" if abs(factor + 1) < 1e-9 else f"{ref} / {factor:g}"
    case = f"CASE WHEN {cond} THEN {fixed} ELSE {ref} END"
    text = target["transform"] or ref
    tree = sqlglot.parse_one(text, read="snowflake")
    hits = 0

    def swap(n: exp.Expression) -> exp.Expression:
        nonlocal hits
        if isinstance(n, exp.Column) and n.name == src_column and (n.table in ("", alias)):
            hits += 1
            return sqlglot.parse_one(case, read="snowflake")
        return n

    new = tree.transform(swap).sql(dialect="snowflake")
    if not hits:
        raise ValueError(f"node {node.name}: column {column} does not read {alias}.{src_column}")
    columns = [{**c, "transform": new} if c["name"] == column else dict(c) for c in before["columns"]]
    node_key, node_col, low, high = test
    own = f"{{{{ ref('{node.location_name}', '{node.name}') }}}}"
    k, m = quote_identifier(node_key), quote_identifier(node_col)
    subset = f"{k} IS NULL" if key_value is None else f"{k} = {_literal(key_value, numeric)}"
    safe = re.sub(r"[^A-Z0-9_]", "_", f"{node_col}_{node_key}_{key_value or 'NULL'}".upper())
    if factor < 0:
        test_name = f"SIGN_OF_{safe}"
        wrong = "<" if low > 0 else ">"
        sql = f"SELECT * FROM {own} WHERE {subset} AND {m} {wrong} 0"
    else:
        test_name = f"SCALE_OF_{safe}"
        sql = (
            f"SELECT * FROM (SELECT AVG(CASE WHEN {subset} THEN {m} END) AS SUBSET_AVG,"
            f" AVG(CASE WHEN NOT ({subset}) OR {k} IS NULL THEN {m} END) AS OTHERS_AVG FROM {own})"
            f" WHERE SUBSET_AVG NOT BETWEEN {low:.6g} * OTHERS_AVG AND {high:.6g} * OTHERS_AVG"
        )
    tests = [t for t in before["nodeTests"] if t["name"] != test_name] + [{"name": test_name, "sql": sql}]
    return {**before, "columns": columns, "nodeTests": tests}, test_name


def _norm(sql: str) -> str:
    return re.sub(r"\s+", " ", sql or "").strip().upper()


def is_deployed(deployed: Mapping[str, Any], change: NodeChange) -> bool:
    """Whether a node as read from an environment carries the proposed change, however its owner typed
    it: no inner join to the right side left (a join change), the changed columns' new transforms, and the
    new test with the proposed SQL (case and whitespace aside). Unrelated edits do not matter."""
    if change.right_ref and _inner_joins(deployed.get("join", ""), *change.right_ref):
        return False
    tests = {t["name"]: _norm(t["sql"]) for t in deployed.get("nodeTests", [])}
    want = next(t for t in change.after["nodeTests"] if t["name"] == change.test_name)
    if tests.get(change.test_name) != _norm(want["sql"]):
        return False
    before = {c["name"]: c["transform"] for c in change.before["columns"]}
    have = {c["name"]: _norm(c["transform"]) for c in deployed.get("columns", [])}
    return all(
        have.get(c["name"]) == _norm(c["transform"])
        for c in change.after["columns"]
        if c["transform"] != before.get(c["name"])
    )
