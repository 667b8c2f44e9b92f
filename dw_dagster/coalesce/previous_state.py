"""The Coalesce state a refresh is about to replace, for what it found (jobs read by id need not be probed
for again).

Dagster hands ``write_state_to_path`` only the path to write. The state kept beside the code
(``LOCAL_FILESYSTEM``) is still at that path then (Dagster's refresh removes it as a directory, which a
file is not); the state kept in the instance (``VERSIONED_STATE_STORAGE``) is read through Dagster's
private ``DefsStateStorage``, on the Dagster version it was verified on only. Anything that cannot be read
is no previous state: the refresh then finds the jobs from scratch, which costs calls, never correctness.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import dagster as dg
from dagster._core.storage.defs_state.base import DefsStateStorage

from dw_dagster.coalesce.errors import CoalesceStateError
from dw_dagster.coalesce.state import CoalesceWorkspaceData

VERIFIED_DAGSTER_VERSION = "1.13.27"

logger = logging.getLogger(__name__)


def read_previous_state(key: str, state_path: Path) -> CoalesceWorkspaceData | None:
    """The state last written under ``key``, or None (with a warning when one exists but cannot be read)."""
    source = f"previous Coalesce state {key}"
    try:
        text = _previous_text(key, state_path)
        return CoalesceWorkspaceData.parse(text, source) if text is not None else None
    except (CoalesceStateError, OSError) as e:
        logger.warning("%s cannot be read (%s); jobs are found from scratch", source, e)
        return None


def _previous_text(key: str, state_path: Path) -> str | None:
    if state_path.is_file():
        return state_path.read_text()
    if dg.__version__ != VERIFIED_DAGSTER_VERSION:
        logger.warning(
            "Dagster %s: reading the previous Coalesce state was verified on %s only; jobs are found from "
            "scratch",
            dg.__version__,
            VERIFIED_DAGSTER_VERSION,
        )
        return None
    storage = DefsStateStorage.get()
    version = storage.get_latest_version(key) if storage is not None else None
    if storage is None or version is None:
        return None
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state"
        storage.download_state_to_path(key, version, path)
        return path.read_text() if path.is_file() else None
