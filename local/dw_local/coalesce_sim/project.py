"""The Coalesce project file (``docs/project-file.md``) loaded: read, validated into its models
(:mod:`~dw_local.coalesce_sim.project_specs`), checked whole (its nodes by
:mod:`~dw_local.coalesce_sim.node_checks`; ids, selectors and schedules here) and kept as a :class:`Project`
with its node graph. Its expansion into the shapes of Coalesce's API is
:mod:`~dw_local.coalesce_sim.api_shapes`'s.

Every problem names the file, the node (or environment, job, schedule) and the field, so that whoever
edits the file can go straight to the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from croniter import croniter
from pydantic import ValidationError

from dw_dagster.coalesce.selectors import SelectorError, parse_selector
from dw_local.coalesce_sim.node_checks import check_nodes
from dw_local.coalesce_sim.node_graph import NodeGraph
from dw_local.coalesce_sim.problems import Problem, format_loc
from dw_local.coalesce_sim.project_specs import EnvironmentSpec, JobSpec, ProjectFile


class ProjectFileError(ValueError):
    def __init__(self, path: Path, problems: Sequence[Problem | str]):
        self.path = path
        self.problems = [str(p) for p in problems]
        super().__init__(f"{path}: " + "\n  ".join(self.problems))


def _subject(raw: Any, loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
    """Names what a pydantic error location points into, as a person reading the file would."""
    if len(loc) >= 2 and isinstance(loc[1], int) and isinstance(raw, dict):
        section, index = loc[0], loc[1]
        items = raw.get(section)
        item = items[index] if isinstance(items, list) and index < len(items) else None
        if isinstance(item, dict):
            if section == "nodes" and item.get("name"):
                return f"node {item.get('locationName', '?')}.{item['name']}", loc[2:]
            if section in ("environments", "jobs") and item.get("id") is not None:
                return f"{section[:-1]} {item['id']}", loc[2:]
        return f"{section}[{index}]", loc[2:]
    return "project", loc


def _pydantic_problems(raw: Any, error: ValidationError) -> list[Problem]:
    problems = []
    for e in error.errors(include_url=False):
        subject, rest = _subject(raw, tuple(e["loc"]))
        message = "field required" if e["type"] == "missing" else e["msg"]
        if e["type"] == "string_pattern_mismatch" and rest and rest[0] == "columns" and "sources" in rest:
            message = f"expected LOCATION.NODE.COLUMN, got {e['input']!r}"
        problems.append(Problem(subject, format_loc(rest) or "<item>", message))
    return problems


@dataclass(frozen=True)
class Project:
    path: Path
    file: ProjectFile

    @cached_property
    def graph(self) -> NodeGraph:
        return NodeGraph(self.file.nodes)

    def environment(self, environment_id: str) -> EnvironmentSpec | None:
        return next((e for e in self.file.environments if e.id == environment_id), None)

    def job(self, job_id: str) -> JobSpec | None:
        return next((j for j in self.file.jobs if j.id == job_id), None)


def _check_file(file: ProjectFile) -> list[Problem]:
    problems = check_nodes(file.nodes, file.environments)
    for kind, items in (("environment", file.environments), ("job", file.jobs)):
        ids = [item.id for item in items]
        repeated = sorted(i for i in set(ids) if ids.count(i) > 1)
        problems += [Problem(f"{kind} {i}", "id", f"two {kind}s share this id") for i in repeated]
    for job in file.jobs:
        for field in ("includeSelector", "excludeSelector"):
            try:
                parse_selector(getattr(job, field))
            except SelectorError as e:
                problems.append(Problem(f"job {job.id}", field, str(e)))
    env_ids, job_ids = {e.id for e in file.environments}, {j.id for j in file.jobs}
    for i, schedule in enumerate(file.schedules):
        subject = f"schedules[{i}]"
        if schedule.jobID not in job_ids:
            problems.append(Problem(subject, "jobID", f"no job has id {schedule.jobID}"))
        if schedule.environmentID not in env_ids:
            message = f"no environment has id {schedule.environmentID}"
            problems.append(Problem(subject, "environmentID", message))
        try:
            ZoneInfo(schedule.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(Problem(subject, "timezone", f"unknown time zone {schedule.timezone!r}"))
        if not croniter.is_valid(schedule.cron):
            problems.append(Problem(subject, "cron", f"not a cron expression: {schedule.cron!r}"))
    return problems


def load_project(path: Path) -> Project:
    """Reads and checks a project file; raises :class:`ProjectFileError` listing every problem."""
    try:
        # libyaml's parser: a tenth of the pure-Python one's CPU (worlds are made again and again).
        raw = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
    except OSError as e:
        raise ProjectFileError(path, [f"cannot read: {e.strerror}"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ProjectFileError(path, [f"{where}not valid YAML ({getattr(e, 'problem', e)})"]) from None
    try:
        file = ProjectFile.model_validate(raw)
    except ValidationError as e:
        raise ProjectFileError(path, _pydantic_problems(raw, e)) from None
    problems = _check_file(file)
    if problems:
        raise ProjectFileError(path, problems)
    return Project(path, file)
