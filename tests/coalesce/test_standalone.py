"""The Coalesce integration stands alone: nothing in ``dw_dagster/coalesce`` imports the rest of dw-dagster
(checks, incidents, warehouse, notifications, remediation, or anything else), at module level or inside a
function, and its own modules, as the product's, import each other without a cycle. Read from the source, so
a lazy import counts as much as a top-level one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
COALESCE = ROOT / "dw_dagster" / "coalesce"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement is."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            # `from package import module` imports the module.
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_the_integration_imports_nothing_of_the_product() -> None:
    offending = {
        f"{module_name(path)} imports {name}"
        for path in COALESCE.rglob("*.py")
        for name in imports(path)
        if name.startswith(("dw_dagster.", "dw_local")) and not name.startswith("dw_dagster.coalesce")
    }
    assert not offending, sorted(offending)


def import_cycles(package: Path) -> list[list[str]]:
    """The cycles among the modules of ``package``; a package's ``__init__`` re-exporting its modules is no
    edge: a module importing a sibling is the edge that counts."""
    modules = {module_name(p): p for p in package.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        if path.name == "__init__.py":
            continue
        for imported in imports(path):
            if imported in modules and imported != name and modules[imported].name != "__init__.py":
                graph.add_edge(name, imported)
    return list(nx.simple_cycles(graph))


def test_the_integration_has_no_import_cycle() -> None:
    assert import_cycles(COALESCE) == []


def test_the_product_has_no_import_cycle() -> None:
    """Nowhere in dw_dagster does a module import one that imports it back, lazily or not."""
    assert import_cycles(ROOT / "dw_dagster") == []


def test_the_integration_loads_without_the_product() -> None:
    """Importing the integration (and building its component's sensor) loads no product module."""
    probe = (
        "import sys\n"
        "import dw_dagster.coalesce\n"
        "from dw_dagster.coalesce import build_coalesce_polling_sensor, CoalesceWorkspace\n"
        "build_coalesce_polling_sensor(workspace=CoalesceWorkspace(api_token='t', environment_ids=['2']), "
        "asset_specs=[])\n"
        "product = sorted(m for m in sys.modules if m.startswith(('dw_dagster.', 'dw_local')) "
        "and not m.startswith('dw_dagster.coalesce'))\n"
        "print(product)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_product_code_never_imports_the_local_world() -> None:
    offending = {
        f"{module_name(path)} imports {name}"
        for path in (ROOT / "dw_dagster").rglob("*.py")
        for name in imports(path)
        if name.startswith("dw_local")
    }
    assert not offending, sorted(offending)
