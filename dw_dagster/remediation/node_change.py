"""The node change proposed for an inner join that drops rows: keep them, bucket them, and test for them.

dw-dagster never edits or deploys a Coalesce node: it reads the node from the Coalesce API, writes the
change as a unified diff of the node's editable definition for the node's owner to apply in Coalesce, and
later checks that what is deployed carries it.

The change, for a join ``INNER JOIN {{ ref('LOC', 'RIGHT') }} "RIGHT"`` that drops left rows:

- the join becomes ``LEFT JOIN``, so rows whose key matches nothing are kept (their units count);
- the node's text columns that come from the right side become ``COALESCE(..., 'UNMAPPED')``, so the kept
  rows land in a visible bucket and the columns' not-null tests still hold;
- a node test returns the rows in that bucket, so the next unmatched key fails the job instead of
  vanishing from a total.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from dw_dagster.coalesce.models import CoalesceNode
from dw_dagster.coalesce.sql import find_refs, quote_identifier

UNMAPPED = "UNMAPPED"
_TEXT_TYPES = ("VARCHAR", "STRING", "TEXT", "CHAR")


def definition(node: CoalesceNode) -> dict[str, Any]:
    """The parts of a node a join change touches, as the node owner reads them in Coalesce."""
    mapping = node.metadata.source_mapping[0] if node.metadata.source_mapping else None
    return {
        "node": f"{node.location_name}.{node.name}",
        "join": (mapping.join.join_condition if mapping and mapping.join else "").strip(),
        "columns": [
            {"name": c.name, "dataType": c.data_type, "transform": c.transform or ""} for c in node.metadata.columns
        ],
        "nodeTests": [{"name": t.name, "sql": t.template_string.strip()} for t in node.metadata.applied_node_tests],
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
        as_yaml(before).splitlines(), as_yaml(after).splitlines(), f"a/{name}.yml", f"b/{name}.yml", lineterm=""
    )
    return "\n".join(lines) + "\n"


def _inner_join_pattern(location: str, name: str) -> re.Pattern[str]:
    ref = rf"\{{\{{\s*ref\(\s*['\"]{re.escape(location)}['\"]\s*,\s*['\"]{re.escape(name)}['\"]\s*\)\s*\}}\}}"
    return re.compile(
        rf"\b((?:LEFT|RIGHT|FULL|CROSS|NATURAL)(?:\s+OUTER)?\s+|INNER\s+)?JOIN(\s+{ref})(\s+(?:AS\s+)?(\"[^\"]+\"|\w+))?",
        re.IGNORECASE,
    )


def keep_unmatched(
    node: CoalesceNode,
    right_table: str,
    resolve_table: Callable[[str, str], str],
    right_columns: Mapping[str, str],
) -> tuple[dict[str, Any], str]:
    """The node's definition with the inner join to ``right_table`` made LEFT, the right side's text
    columns bucketed, and the unmatched-rows test added; returns it and the test's name.

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
    pattern = _inner_join_pattern(location, name)
    match = next(
        (m for m in pattern.finditer(before["join"]) if not m.group(1) or m.group(1).strip().upper() == "INNER"),
        None,
    )
    if match is None:
        raise ValueError(f"node {node.name}: no inner join to {location}.{name} in its join condition")
    alias = (match.group(4) or name).strip('"')
    text = before["join"]
    join = text[: match.start()] + f"LEFT JOIN{match.group(2)}{match.group(3) or ''}" + text[match.end() :]

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
    return {**before, "join": join, "columns": columns, "nodeTests": tests}, test_name


def is_deployed(deployed: Mapping[str, Any], proposed: Mapping[str, Any], test_name: str) -> bool:
    """Whether a node as read from an environment carries the proposed change: the new test with the
    same SQL, and every proposed column transform (whitespace aside)."""

    def norm(s: str) -> str:
        return re.sub(r"\s+", " ", s or "").strip()

    tests = {t["name"]: norm(t["sql"]) for t in deployed.get("nodeTests", [])}
    want = next(t for t in proposed["nodeTests"] if t["name"] == test_name)
    if tests.get(test_name) != norm(want["sql"]):
        return False
    have = {c["name"]: norm(c["transform"]) for c in deployed.get("columns", [])}
    return all(have.get(c["name"]) == norm(c["transform"]) for c in proposed["columns"]) and norm(
        deployed.get("join", "")
    ) == norm(proposed["join"])
