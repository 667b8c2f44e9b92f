"""What is wrong with a set of nodes, each problem naming the node and the field: duplicates, unmapped
locations, refs and column sources that name nothing, columns that cannot be selected, dependency cycles.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dw_dagster.coalesce.sql import RefSyntaxError, find_refs, resolve_refs
from dw_local.coalesce_sim.node_graph import NodeGraph
from dw_local.coalesce_sim.problems import Problem
from dw_local.coalesce_sim.project_specs import PARAMETER_TEMPLATE, EnvironmentSpec, NodeSpec

_LEFTOVER_TEMPLATE = re.compile(r"\{\{|\{%")


def _ref_problems(text: str, field: str, subject: str, known: set[tuple[str, str]]) -> list[Problem]:
    try:
        refs = find_refs(text)
    except RefSyntaxError as e:
        return [Problem(subject, field, str(e))]
    problems = [
        Problem(subject, field, f"ref('{loc}', '{name}') names no node of the project")
        for loc, name in refs
        if (loc, name) not in known
    ]
    if _LEFTOVER_TEMPLATE.search(PARAMETER_TEMPLATE.sub("_", resolve_refs(text, lambda loc, name: "_"))):
        supported = "{{ ref('LOCATION', 'NODE') }} and {{ parameters.NAME }}"
        problems.append(Problem(subject, field, f"only {supported} templates are supported"))
    return problems


def check_nodes(nodes: Sequence[NodeSpec], environments: Sequence[EnvironmentSpec]) -> list[Problem]:
    """What is wrong with a set of nodes: duplicates, unmapped locations, refs and column sources that
    name nothing, columns that cannot be selected, and dependency cycles."""
    problems: list[Problem] = []
    by_key: dict[tuple[str, str], NodeSpec] = {}
    for node in nodes:
        if node.key in by_key:
            problems.append(Problem(f"node {node.label}", "name", "two nodes have this location and name"))
        by_key.setdefault(node.key, node)
    known = set(by_key)
    columns = {(n.locationName, n.name, c.name) for n in nodes for c in n.columns}

    for node in nodes:
        subject = f"node {node.label}"
        for env in environments:
            if node.locationName not in env.storageMappings:
                problems.append(
                    Problem(
                        subject,
                        "locationName",
                        f"{node.locationName!r} has no storage mapping in environment {env.id} ({env.name})",
                    )
                )
        if node.is_source and node.join.strip():
            problems.append(Problem(subject, "join", "a Source node is read, never built: it has no join"))
        problems += _ref_problems(node.join, "join", subject, known)
        seen_columns: set[str] = set()
        for i, column in enumerate(node.columns):
            if column.name in seen_columns:
                problems.append(Problem(subject, f"columns[{i}].name", f"duplicate column {column.name!r}"))
            seen_columns.add(column.name)
            for j, source in enumerate(column.sources):
                if tuple(source.split(".")) not in columns:
                    field = f"columns[{i}].sources[{j}]"
                    problems.append(Problem(subject, field, f"{source} names no column of the project"))
            if not node.is_source and column.transform is None and len(column.sources) != 1:
                problems.append(
                    Problem(
                        subject,
                        f"columns[{i}].transform",
                        f"needed: without a transform a column selects its single source "
                        f"(this one has {len(column.sources)})",
                    )
                )
        seen_tests: set[str] = set()
        for i, test in enumerate(node.tests):
            if test.name in seen_tests:
                problems.append(Problem(subject, f"tests[{i}].name", f"duplicate test {test.name!r}"))
            seen_tests.add(test.name)
            problems += _ref_problems(test.sql, f"tests[{i}].sql", subject, known)

    if not problems:
        cycle = NodeGraph(nodes).cycle()
        if cycle:
            names = " -> ".join(n.label for n in cycle)
            problems.append(Problem(f"node {cycle[0].label}", "join", f"dependency cycle: {names}"))
    return problems
