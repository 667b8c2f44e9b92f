"""The seeded world templates the suite uses, built before any test starts when the whole suite runs.

Each template is what a test would otherwise seed lazily on first use (``seeding.seeded_template`` for the
distributor, ``FileScenarioWorld.clone`` for a world file): same function, same content-hash key, same
cross-process lock, so a test that finds its template built just copies it, and running one file alone
still seeds lazily.

Run as a script (``python tests/world_templates.py NAME``) it builds one template: the session start runs
one such process per template, as many at a time as there are test workers and cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DISTRIBUTOR = "distributor"


# Public worlds no test plays: `dw-dagster scenario score` plays them (benchmarks/README.md); a test that
# ever clones one seeds it lazily. The bill payments' 56 nights cost the suite about 36 s of wall time.
SCORED_ONLY = {"local/dw_local/scenarios/worlds/billpay"}


def world_files() -> dict[str, Path]:
    """Every world file the suite plays into the shared cache: the public worlds and the test worlds."""
    files = sorted((REPO / "local" / "dw_local" / "scenarios" / "worlds").glob("*/world.yaml"))
    files += sorted(HERE.rglob("world.yaml"))
    named = {f"{f.parent.relative_to(REPO)}": f for f in files}
    return {name: f for name, f in named.items() if name not in SCORED_ONLY}


def templates() -> dict[str, int]:
    """Name -> history nights, longest first (the build order: the longest builds never start last)."""
    from dw_local.scenarios.world_file import load_world_file
    from dw_local.seeding import HISTORY_NIGHTS

    found = {DISTRIBUTOR: HISTORY_NIGHTS}
    found.update({name: load_world_file(path).history_nights for name, path in world_files().items()})
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def builds_first(config) -> bool:
    """The whole suite (no path arguments, no ``-k``) builds its world templates before any test; a file or
    a folder run alone seeds lazily, as its first test needs a template. ``DW_PREBUILD_TEMPLATES=0|1``
    overrides (never in an xdist worker, which inherits the variable: the controller built them)."""
    if hasattr(config, "workerinput") or config.option.collectonly:
        return False
    forced = os.environ.get("DW_PREBUILD_TEMPLATES")
    if forced:
        return forced == "1"
    if config.args_source is not pytest.Config.ArgsSource.TESTPATHS or config.option.keyword:
        return False  # files, folders or `-k` name a part of the suite
    markexpr = config.option.markexpr
    if markexpr:
        from _pytest.mark.expression import Expression

        # `-m "not world"` runs no test that needs a template.
        if not Expression.compile(markexpr).evaluate(lambda name, **_: name == "world"):
            return False
    return True


def build(name: str, cache: Path) -> Path:
    """Builds (or finds built) one template in ``cache``; returns its folder."""
    if name == DISTRIBUTOR:
        from dw_local.seeding import seeded_template

        return seeded_template(cache)
    from dw_local.scenarios.worlds import FileScenarioWorld

    return FileScenarioWorld(world_files()[name]).template(cache)


def build_all(cache: Path, workers: int, echo, only: list[str] | None = None) -> None:
    """Builds every template (or those in ``only``), ``workers`` at a time, each in its own process;
    ``echo`` gets one line per template with its time. Raises ``RuntimeError`` naming the world and its
    error if a build fails (the others are still built)."""
    names = {k: v for k, v in templates().items() if only is None or k in only}
    env = {**os.environ, "DW_WORLD_CACHE": str(cache)}

    def one(name: str) -> tuple[str, float, subprocess.CompletedProcess]:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(Path(__file__)), name, str(cache)],
            cwd=REPO, env=env, capture_output=True, text=True,
        )  # fmt: skip
        return name, time.monotonic() - start, proc

    failed = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in as_completed([pool.submit(one, n) for n in names]):
            name, seconds, proc = future.result()
            nights = names[name]
            if proc.returncode == 0:
                echo(f"world template {name} ({nights} nights): {proc.stdout.strip()} in {seconds:.0f} s")
            else:
                echo(f"world template {name} ({nights} nights): FAILED after {seconds:.0f} s")
                failed.append((name, (proc.stderr or proc.stdout).strip()[-4000:]))
    if failed:
        raise RuntimeError(
            "\n".join(f"building the world template {name} failed:\n{error}" for name, error in failed)
        )


def main(argv: list[str]) -> int:
    name, cache = argv[1], Path(argv[2])
    started = time.time()
    template = build(name, cache)
    built = (template / "seeded.json").stat().st_mtime >= started
    print(f"{'built' if built else 'found'} {template.name}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv))
