"""The workspace state: what loading reads instead of calling the Coalesce API.

:class:`CoalesceWorkspaceData` is the snapshot of the configured environments (nodes in full detail, jobs)
that :class:`~dw_dagster.coalesce.component.CoalesceComponent` keeps in Dagster's definitions state
(``dg utils refresh-defs-state`` or ``dw-dagster coalesce refresh`` writes it). It is a pydantic record
rather than a serdes one so that a state that no longer validates is refused naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

import pydantic

from dw_dagster.coalesce.errors import CoalesceStateError, describe_validation_errors
from dw_dagster.coalesce.models import CoalesceModel, UtcDatetime
from dw_dagster.coalesce.workspace_models import CoalesceEnvironment, CoalesceJob, CoalesceNode

REFRESH_HINT = "run `dw-dagster coalesce refresh` or `dg utils refresh-defs-state`"


class CoalesceEnvironmentData(CoalesceModel):
    environment: CoalesceEnvironment
    nodes: list[CoalesceNode]
    jobs: list[CoalesceJob]
    # How the jobs were found (dw_dagster.coalesce.job_discovery): a state from before this field was
    # written by the jobs collection.
    jobs_found_by: Literal["collection", "job_ids", "probe"] = "collection"


class CoalesceWorkspaceData(CoalesceModel):
    """What :meth:`CoalesceWorkspace.fetch_workspace_data` read: each environment with its nodes (full
    detail) and its jobs. Round-trips through :meth:`serialize` / :meth:`parse`.
    """

    base_url: str
    fetched_at: UtcDatetime
    environments: list[CoalesceEnvironmentData]

    def serialize(self) -> str:
        return self.model_dump_json()

    @classmethod
    def parse(cls, text: str | bytes, source: str) -> CoalesceWorkspaceData:
        """Reads a serialized snapshot, as text or as the file's bytes (which the JSON parser reads as they
        are: no 40 MB decoded to a string first); ``source`` (where it came from) leads every problem
        reported."""
        try:
            return cls.model_validate_json(text)
        except pydantic.ValidationError as e:
            if isinstance(text, bytes):  # quoted as text, whichever way the state was read
                try:
                    decoded = text.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise CoalesceStateError(
                        f"{source}: not UTF-8 at byte {bad.start} ({bad.reason}); {REFRESH_HINT}"
                    ) from None
                return cls.parse(decoded, source)
            problems = "\n".join(f"{source}: {p}" for p in describe_validation_errors(e))
            raise CoalesceStateError(f"{problems}\n{REFRESH_HINT}") from None

    def check_matches(self, source: str, base_url: str, environment_ids: Sequence[str]) -> None:
        """Refuses a snapshot taken from another Coalesce host, or lacking an environment asked for."""
        if self.base_url.rstrip("/") != base_url.rstrip("/"):
            raise CoalesceStateError(
                f"{source}: base_url: fetched from {self.base_url}, but the workspace is {base_url}; "
                f"{REFRESH_HINT}"
            )
        have = {e.environment.id for e in self.environments}
        missing = sorted(set(environment_ids) - have)
        if missing:
            raise CoalesceStateError(
                f"{source}: environments: holds {sorted(have)}, but the workspace asks for "
                f"{sorted(environment_ids)}; {REFRESH_HINT}"
            )

    @property
    def age_hours(self) -> float:
        return (datetime.now(UTC) - self.fetched_at).total_seconds() / 3600
