"""A run worker builds the code location's definitions once, not once per reconstruction.

Before a run's first step, Dagster's run worker reconstructs the code location from its code pointer twice:
for the job (``ReconstructableJob.get_definition``), then for its subset and execution plan, a new
``ReconstructableJob`` that Dagster's own one-entry cache does not recognise. Both reconstructions pin the same
Coalesce state versions, so each re-read the state (40 MB at 10,000 nodes), re-made every spec, check and
operation: twice the work for the same definitions (benchmarks/README.md, "Run workers").

The definitions a reconstruction built are kept for the next one that would build exactly the same: the same
pinned state versions and reconstruction metadata, the same defs-state storage, the same environment (the
components' templates read it), and the files the build read unchanged. A code server's initial load and the
commands' loads always build afresh: they read the latest state.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from dw_dagster.internals import DefinitionsLoadContext, DefinitionsLoadType, DefsStateStorage

Stamp = tuple[int, int, int] | None
"""A file's modification time, size and inode, or None when it does not exist."""


@dataclass(frozen=True)
class _Inputs:
    """What a reconstruction's definitions are built from, besides the files it reads."""

    state: str
    """A digest of the pinned state versions and the reconstruction metadata (which may hold a whole state)."""
    storage: DefsStateStorage | None
    """The defs-state storage in scope (compared by identity: another instance's storage may hold other
    contents under the same version names)."""
    environ: str
    """A digest of the environment: the secrets in it are not kept a second time."""


@dataclass(frozen=True)
class _Built:
    inputs: _Inputs
    files: Mapping[Path, Stamp]
    defs: dg.Definitions


_last: _Built | None = None


def reconstructed(build: Callable[[], tuple[dg.Definitions, Iterable[Path]]]) -> dg.Definitions:
    """``build()``'s definitions (it returns them with the files it read), or, in a reconstruction, those an
    earlier reconstruction of this process built from the same inputs."""
    global _last
    inputs = _reconstruction_inputs()
    if inputs is None:
        return build()[0]
    last = _last
    if last is not None and last.inputs == inputs and _stamps(last.files) == last.files:
        return last.defs
    defs, files = build()
    _last = _Built(inputs, _stamps(files), defs)
    return defs


def _reconstruction_inputs() -> _Inputs | None:
    # Not set: an initial load (DefinitionsLoadContext.get() would make one, asking the storage for the
    # latest versions).
    if not DefinitionsLoadContext.is_set():
        return None
    context = DefinitionsLoadContext.get()
    if context.load_type != DefinitionsLoadType.RECONSTRUCTION:
        return None
    state = dg.serialize_value(
        [context.accessed_defs_state_info, sorted(context.reconstruction_metadata.items())]
    )
    environ = "\0".join(f"{k}={v}" for k, v in sorted(os.environ.items()))
    return _Inputs(_digest(state), DefsStateStorage.get(), _digest(environ))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _stamps(files: Iterable[Path]) -> dict[Path, Stamp]:
    out: dict[Path, Stamp] = {}
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            out[path] = None
            continue
        out[path] = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    return out
