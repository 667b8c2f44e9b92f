"""What ships: the product's distribution declares every distribution its code imports (directly: a module
one happens to get through another's requirements is one release away from missing), in the extra that
holds the feature when it is optional; and the package's own project declaration (dw_dagster/dg.toml, what an
installed package loads from) says what the checkout's pyproject.toml says."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Where an optional distribution may be imported: its extra's feature and nothing else.
EXTRAS_WHERE = {"mcp": ["dw_dagster/app/mcp/"], "postgres": ["dw_dagster/event_log/postgres.py"]}


def _declared() -> dict[str, str | None]:
    """Distribution name -> the extra that declares it (None: a core requirement)."""
    out: dict[str, str | None] = {
        canonicalize_name(Requirement(r).name): None for r in PYPROJECT["project"]["dependencies"]
    }
    for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items():
        for r in reqs:
            out.setdefault(canonicalize_name(Requirement(r).name), extra)
    return out


def _imports() -> dict[str, set[str]]:
    """Top-level module -> the product files that import it (lazily or not), third-party modules only."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / "dw_dagster").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "dw_dagster":
                    out.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return out


def test_every_imported_distribution_is_declared_directly_where_it_is_used() -> None:
    declared, by_module = _declared(), packages_distributions()
    problems = []
    for module, files in sorted(_imports().items()):
        dists = {canonicalize_name(d) for d in by_module.get(module, [])}
        found = dists & set(declared)
        if not found:
            problems.append(
                f"{module} (from {sorted(dists) or '?'}) is imported by {sorted(files)} and not declared"
            )
            continue
        for dist in found:
            extra = declared[dist]
            if extra is not None:
                outside = [f for f in files if not any(f.startswith(p) for p in EXTRAS_WHERE.get(extra, []))]
                if outside:
                    problems.append(f"{module} is in the [{extra}] extra but imported by {outside}")
    assert not problems, "\n".join(problems)


def test_the_package_declares_the_project_the_checkout_declares() -> None:
    package = tomllib.loads((ROOT / "dw_dagster" / "dg.toml").read_text())
    assert package["directory_type"] == PYPROJECT["tool"]["dg"]["directory_type"] == "project"
    assert package["project"] == PYPROJECT["tool"]["dg"]["project"]
    assert package["project"]["code_location_target_module"] == PYPROJECT["tool"]["dagster"]["module_name"]


def test_the_wheel_carries_the_project_declaration_and_the_components() -> None:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["dw_dagster"]
    assert "dg.toml" in data and any(p.startswith("app/defs/") for p in data)
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["dw_dagster*"]
