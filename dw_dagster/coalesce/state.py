"""The Coalesce state file: the node graph cached on disk, so loading definitions never calls the API.

``dw-dagster coalesce refresh`` (and ``dw-dagster world up``) writes it; the definitions loader reads it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pydantic

from dw_dagster.coalesce.models import CoalesceWorkspaceData
from dw_dagster.config import DwConfigError, describe_validation_error
from dw_dagster.settings import Settings

REFRESH_HINT = "run `dw-dagster coalesce refresh` (locally, `dw-dagster world up` does it)"


class CoalesceStateError(DwConfigError):
    """The state file is missing, unreadable, or was fetched from another Coalesce."""


def write_state_file(path: Path, data: CoalesceWorkspaceData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(data.model_dump_json())
    # A reader (a code server starting) sees the old file or the new one, never half of one.
    os.replace(tmp, path)


def read_state_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError as e:
        raise CoalesceStateError(f"{path}: no Coalesce state file; {REFRESH_HINT}") from e


def parse_state(path: Path, text: str, settings: Settings) -> CoalesceWorkspaceData:
    try:
        data = CoalesceWorkspaceData.model_validate_json(text)
    except pydantic.ValidationError as e:
        raise CoalesceStateError(f"{describe_validation_error(path, e)}\n{REFRESH_HINT}") from e
    if data.base_url.rstrip("/") != settings.coalesce_base_url:
        raise CoalesceStateError(
            f"{path}: base_url: fetched from {data.base_url}, but COALESCE_BASE_URL is "
            f"{settings.coalesce_base_url}; {REFRESH_HINT}"
        )
    wanted = set(settings.coalesce_environment_ids)
    have = {e.environment.id for e in data.environments}
    if wanted and not wanted <= have:
        raise CoalesceStateError(
            f"{path}: environments: holds {sorted(have)}, but COALESCE_ENVIRONMENT_IDS asks for "
            f"{sorted(wanted)}; {REFRESH_HINT}"
        )
    return data


def state_age_hours(data: CoalesceWorkspaceData) -> float:
    return (datetime.now(UTC) - data.fetched_at).total_seconds() / 3600


def refresh_state_file(settings: Settings) -> CoalesceWorkspaceData:
    from dw_dagster.coalesce.resources import CoalesceWorkspace

    token = os.environ.get("COALESCE_API_TOKEN")
    if not token:
        raise DwConfigError("COALESCE_API_TOKEN: not set; expected the Coalesce access token (Deploy tab)")
    if not settings.coalesce_environment_ids:
        raise DwConfigError("COALESCE_ENVIRONMENT_IDS: not set; expected ids like '2' or '2,5'")
    workspace = CoalesceWorkspace(
        base_url=settings.coalesce_base_url,
        api_token=token,
        environment_ids=list(settings.coalesce_environment_ids),
    )
    data = workspace.fetch_workspace_data()
    write_state_file(settings.coalesce_state_file, data)
    return data
