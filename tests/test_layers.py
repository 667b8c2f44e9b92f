"""The product is layers: each package of ``dw_dagster`` imports only packages declared below it, at module
level or inside a function (read from the source, so a lazy import counts as much as a top-level one).

The declared order, bottom first (README.md, "Layout", says the same):

- ``coalesce``: the Coalesce integration, standalone (``tests/coalesce/test_standalone.py``).
- ``event_log``: Dagster event log storages the instance's ``dagster.yaml`` names.
- ``config``, ``sql``, ``tags``, ``runs``: leaves (configuration files, SQL quoting, run tags, run failures).
- ``records``: the shared records (findings, incidents, diagnoses, plans, receipts, keys, policy).
- ``warehouse``: Snowflake and the ops schema.
- ``context``: the context file and the lineage graph.
- ``checks``, ``cost``, ``governance``: what is measured and judged.
- ``incidents``: the incident store, lifecycle and diagnosis.
- ``notifications``: what people read (Slack, the incident view, receipts).
- ``remediation``: plans, approvals, the gate, the fix's steps.
- ``app``: the composition root: every job, sensor, op wiring, component, command and server.
- ``definitions``, ``__main__``: the entry points deployments and the shell name (``-m dw_dagster.definitions``,
  ``python -m dw_dagster``), over the composition root.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "dw_dagster"

LAYERS = [
    "coalesce", "event_log", "config", "sql", "tags", "runs", "records", "warehouse", "context", "checks",
    "cost", "governance", "incidents", "notifications", "remediation", "app", "definitions", "__main__",
]  # fmt: skip


def unit(module: str) -> str:
    """The package (or top-level module) of ``dw_dagster`` a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def product_imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of a ``dw_dagster`` module."""
    out = []
    for path in sorted(PRODUCT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from dw_dagster import tags` imports the module dw_dagster.tags.
                names = (
                    [f"{node.module}.{a.name}" for a in node.names]
                    if node.module == "dw_dagster"
                    else [node.module]
                )
            else:
                continue
            out += [(module, name, node.lineno) for name in names if name.startswith("dw_dagster.")]
    return out


def test_every_package_has_its_place() -> None:
    units = {unit(m) for m, _, _ in product_imports()} | {
        p.stem if p.is_file() else p.name
        for p in PRODUCT.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"
    }
    assert units - {"__init__"} <= set(LAYERS), f"not in the declared order: {sorted(units - set(LAYERS))}"


def test_no_package_imports_one_above_it() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = [
        f"{module}:{line} imports {name} ({unit(module)} -> {unit(name)})"
        for module, name, line in product_imports()
        if unit(module) != unit(name) and unit(module) in rank and rank[unit(name)] > rank[unit(module)]
    ]
    assert not upward, "\n".join(upward)


def test_the_integration_imports_only_itself() -> None:
    outside = [
        f"{module}:{line} imports {name}"
        for module, name, line in product_imports()
        if unit(module) == "coalesce" and unit(name) != "coalesce"
    ]
    assert not outside, "\n".join(outside)
