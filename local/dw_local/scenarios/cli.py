"""``dw-dagster scenario run|score``: play scenarios through the real machinery and score detection.

Named in the ``dw_dagster.app.cli`` entry-point group; ``dw-dagster`` imports this module only when one of its
commands is called.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dw_dagster.config import DwConfigError
from dw_local.world import WorldError

if TYPE_CHECKING:
    from dw_local.scenarios.runner import ScenarioReport

# As dw_local.scenarios.runner's: every dw-dagster command loads this plugin, and importing the runner
# (the checks, the warehouse resource, Snowflake's libraries) costs seconds, so it is imported in the
# commands that play scenarios only.
DEFAULT_CACHE = Path(os.environ.get("DW_WORLD_CACHE", ".dw/cache"))

_CACHE = click.option(
    "--cache", type=click.Path(path_type=Path), default=DEFAULT_CACHE, show_default=True,
    help="Where seeded worlds are cached (keyed by a hash of what shapes them).",
)  # fmt: skip


@click.group()
def scenario() -> None:
    """Scenario replay: worlds, nights of faults and benign events, and what dw-dagster detects."""


@scenario.command("run")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the night-by-night report as JSON.")
@_CACHE
def scenario_run(path: Path, as_json: bool, cache: Path) -> None:
    """Play the scenario at PATH on a fresh local world and print, per night, what was detected."""
    with _world_errors(path):
        from dw_local.scenarios.runner import run_scenario

        report = run_scenario(path, cache)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, default=str))
        return
    click.echo(format_report(report))


@scenario.command("score")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@_CACHE
def scenario_score(directory: Path, as_json: bool, cache: Path) -> None:
    """Play every scenario under DIRECTORY (*.yaml, recursively) and print recall, false alarms, root-cause
    accuracy and time to detect, beside the Elementary 0.25.1 defaults on the same nights."""
    from dw_local.scenarios.model import load_scenario
    from dw_local.scenarios.runner import run_scenario
    from dw_local.scenarios.score import format_score, score_reports
    from dw_local.scenarios.suite import scenario_files

    files = scenario_files(directory)
    if not files:
        raise click.ClickException(f"{directory}: no scenario files (*.yaml)")
    # Every file is checked before anything is played: all their problems at once, not one per long run.
    scenarios, problems = [], []
    for path in files:
        try:
            scenarios.append(load_scenario(path))
        except DwConfigError as e:
            problems.append(str(e))
    if problems:
        summary = f"{len(problems)} of {len(files)} scenario files are invalid; nothing was played"
        raise DwConfigError("\n".join([summary, *problems]))
    reports, errored = [], []
    for loaded in scenarios:
        click.echo(f"playing {loaded.path} ...", err=True)
        with _world_errors(loaded.path):
            played = _played_once_again_on_failure(
                lambda loaded=loaded: run_scenario(loaded, cache), loaded.path
            )
        if isinstance(played, str):
            errored.append({"name": loaded.name, "path": str(loaded.path), "error": played})
        else:
            reports.append(played)
    score = {**score_reports(reports), "errored": errored}
    click.echo(json.dumps(score, indent=2, default=str) if as_json else format_score(score))
    if errored:
        # Figures without them are no pass: the exit says so, as the table's first lines do.
        raise SystemExit(1)


PLAYS = 2
"""How many times a scenario is played before it is reported as errored: once more on a fresh copy of its
world, for a failure of the local world's servers rather than of the files (a local Snowflake that did not take
a night's time on a machine busy enough to hold it for 30 s)."""


def _played_once_again_on_failure(play: Callable[[], ScenarioReport], path: Path) -> ScenarioReport | str:
    """The scenario's report; or, when each of :data:`PLAYS` plays failed, what the last failure said. A
    scenario that cannot be played does not end the score: the scenarios after it are played, and the score
    names it as errored (never as scored). A problem in the files (``WorldError``) is not retried."""
    failure = ""
    for attempt in range(1, PLAYS + 1):
        try:
            return play()
        except WorldError:
            raise
        except Exception as e:  # noqa: BLE001 - reported below and in the score, never dropped
            failure = f"{type(e).__name__}: {e}"
            click.echo(f"{path}: play {attempt} of {PLAYS} failed: {failure}", err=True)
            click.echo(traceback.format_exc(), err=True)
    return failure


@contextmanager
def _world_errors(path: Path) -> Iterator[None]:
    """A world that cannot play what its files say (rows no night has, a history night that fails) is a
    problem in those files: reported like any other (the message, exit 2), not as a traceback."""
    try:
        yield
    except WorldError as e:
        raise DwConfigError(f"{path}: {e}") from e


def format_report(report: ScenarioReport) -> str:
    lines = [f"scenario {report.name} on world {report.world} (after {report.history_nights} seeded nights)"]
    for n in [*report.before, *report.nights]:
        run = f"run {n.run_id} {n.run_status}" if n.run_id is not None else "no run (skipped)"
        label = f"night {n.night}" if n.night >= 0 else f"earlier night {n.night} (not scored)"
        lines.append(f"{label} ({n.business_date:%a %Y-%m-%d}): {', '.join(n.events) or 'no events'}; {run}")
        for i in n.incidents:
            gap = ", ".join(f"{k} {v:,.2f}".rstrip("0").rstrip(".") for k, v in i.gap.items())
            what = "continued by tonight's findings" if i.continued else "opened"
            lines += [
                f"  incident {i.incident_id} {what}: {i.classification or 'not diagnosed'}; "
                f"cause keys {', '.join(i.cause_keys) or '-'}; detected {i.time_to_detect_s:.1f} s after the run",
                f"    {i.title}",
                f"    cause: {i.cause or '-'}",
                f"    gap: {gap or '-'}",
                f"    blast radius: {', '.join(i.blast_radius) or '-'}"
                + (f"; {i.newly_flagged} items newly flagged" if i.newly_flagged else ""),
            ]
            if i.related_to:
                lines.append(f"    linked to open incident(s) of another cause: {', '.join(i.related_to)}")
        explained = sorted({f"{a.check} on {a.asset} ({a.explained_by})" for a in n.alarms if a.explained_by})
        if explained:
            lines.append(f"  explained, not an incident (WARN): {'; '.join(explained)}")
        if n.resolved:
            lines.append(f"  resolved tonight: {', '.join(n.resolved)}")
        if not n.alarms:
            lines.append("  nothing detected")
        for b in n.baseline_alarms:
            score = f" z={b['z']:+.2f}" if b.get("z") is not None else ""
            again = " (last night's point, scored again)" if b.get("rescored") else ""
            detail = f": {b['detail']}" if b.get("detail") else ""
            lines.append(f"  baseline ({b['monitor']}): {b['series']}{score}{again}{detail}")
    return "\n".join(lines)
