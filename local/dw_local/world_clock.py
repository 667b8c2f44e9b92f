"""The local world's one clock.

The world keeps its own calendar (its seeded nights are June 2025), and every process of it reads the same
"now": the Coalesce simulator owns the clock (``/_sim/clock``, moved to each night's schedule as the world
plays it) and the local Snowflake follows it, keeping its offset from real time in
``<root>/snowflake/account_usage_clock.json``. The processes of the product that ``world up`` starts (the
UI's webserver, the daemon, their code servers and run workers, the approvals endpoint), the Slack
stand-in, the commands a person runs from ``world.env`` and the headless replay follow that file too:
Python's clock in each of them (``time.time``, ``datetime.now``, and so Dagster's ``dagster._time``) is put
on the world's time with ``time_machine`` and moved whenever the world's clock is set. So Dagster's freshness
policies, the skipped-run check, an incident's times and the cost report's default dates all read the
world's night, not today's wall clock, and the product knows nothing of it: it reads the clock it always
reads. (The UI's "x ago" is counted by the browser from the reader's own clock.)

Only what counts real seconds keeps real time (:class:`_RealTimeFor`). gRPC: its Python layer turns a call's
timeout into an absolute deadline with ``time.time()`` for its C core, which reads the real clock, so every
call of Dagster's code servers would be past its deadline at once. Dagster's code servers: they judge
liveness by ``time.time()`` between heartbeats, so the world's clock set a night ahead made a code server
whose check fell between the jump and the next heartbeat (one in nine of the proxy's, which checks every 45 s
against a heartbeat every 5 s) shut itself down and refuse the night's runs ("Tried to start a run on a
server after telling it to shut down"); the daemon's controller mixes both clocks in its own checks, so it
stays on the world's and ``world up`` gives it a heartbeat tolerance above a night. And the Snowflake
connector's key-pair token: the local Snowflake verifies a JWT's expiry on the real clock, as Snowflake does
on its own (``snowflake_auth.py``), and a process that is not on the world's clock (the seeding) signs in
too; a token signed on the world's clock would be expired, or not yet valid, when it arrives.

A process is put on the world's clock by :func:`follow`, or at start-up by the ``sitecustomize`` in
``world_clock_hook/`` when :data:`CLOCK_FILE_ENV` names the file (:func:`clock_env` gives both variables).
The simulator and the Snowflake keep their own offsets and are never started with it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

CLOCK_FILE_ENV = "DW_WORLD_CLOCK_FILE"
HOOK_DIR = Path(__file__).resolve().parent / "world_clock_hook"
POLL_SECONDS = 0.5
"""How often a following process looks whether the world's clock was set."""


def clock_file(root: Path) -> Path:
    """Where a world under ``root`` keeps its clock's offset from real time (the local Snowflake writes it
    whenever the simulator's clock is set: ``account_usage.py``)."""
    return Path(root) / "snowflake" / "account_usage_clock.json"


def read_offset(path: Path) -> float:
    """Seconds the world's clock is ahead of real time (negative: behind); 0 before it was ever set."""
    try:
        return float(json.loads(Path(path).read_text())["offset_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def clock_env(root: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that put a Python process started with them on the world's clock."""
    env = os.environ if environ is None else environ
    path = os.pathsep.join(p for p in [str(HOOK_DIR), env.get("PYTHONPATH", "")] if p)
    return {CLOCK_FILE_ENV: str(clock_file(Path(root).resolve())), "PYTHONPATH": path}


def without_clock(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that keeps its own offset (the simulator, the Snowflake): following the world's
    clock as well would count the offset twice."""
    hook = str(HOOK_DIR)
    out = {k: v for k, v in env.items() if k != CLOCK_FILE_ENV}
    if "PYTHONPATH" in out:
        out["PYTHONPATH"] = os.pathsep.join(p for p in out["PYTHONPATH"].split(os.pathsep) if p and p != hook)
    return out


@functools.cache  # read on every gRPC clock call: the module, once
def _time_machine():
    """``time_machine``, without the pytest fixture it defines when pytest is importable: the world's
    processes are not pytest's, and importing pytest cost each of them (every command, code server, daemon
    and run worker) 0.1 s of CPU, 0.3 s on a busy machine. A process that imported pytest keeps it."""
    if "time_machine" not in sys.modules and "pytest" not in sys.modules:
        sys.modules["pytest"] = None  # type: ignore[assignment]  # ``import pytest`` fails: no fixture
        try:
            import time_machine  # noqa: F401
        finally:
            del sys.modules["pytest"]
    import time_machine

    return time_machine


def _real_time() -> float:
    hatch = _time_machine().escape_hatch
    return hatch.time.time() if hatch.is_travelling() else time.time()


class _RealTime:
    """The ``time`` module as gRPC's Python layer sees it: ``time()`` is the real clock's."""

    time = staticmethod(_real_time)

    def __getattr__(self, name: str):
        return getattr(time, name)


class _RealDatetime(datetime):
    """``datetime`` as the Snowflake connector's key-pair module sees it: ``now()`` is the real clock's."""

    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        hatch = _time_machine().escape_hatch
        return hatch.datetime.datetime.now(tz) if hatch.is_travelling() else datetime.now(tz)


# Each module that keeps real time, and what it is given in place of the clock it imported.
_REAL_CLOCKS = {
    **dict.fromkeys(
        ("grpc._channel", "grpc._common", "grpc._server", "grpc._utilities"), ("time", _RealTime())
    ),
    # Dagster's code servers, for their heartbeats: the times Dagster records and judges (ticks, runs,
    # freshness) come from ``dagster._time`` and stay the world's.
    **dict.fromkeys(("dagster._grpc.server", "dagster._grpc.proxy_server"), ("time", _RealTime())),
    "snowflake.connector.auth.keypair": ("datetime", _RealDatetime),
}


class _RealTimeFor(importlib.abc.MetaPathFinder):
    """Gives the modules of :data:`_REAL_CLOCKS` the real clock as they are imported."""

    MODULES = frozenset(_REAL_CLOCKS)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module) -> None:
            run(module)
            setattr(module, *_REAL_CLOCKS[fullname])

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _real_time_for() -> None:
    if any(isinstance(f, _RealTimeFor) for f in sys.meta_path):
        return
    for name, (attribute, clock) in _REAL_CLOCKS.items():  # already imported: given the real clock now
        if name in sys.modules:
            setattr(sys.modules[name], attribute, clock)
    sys.meta_path.insert(0, _RealTimeFor())


class WorldClock:
    """This process on the world's clock, moved whenever the clock file changes."""

    def __init__(self, path: Path, poll: float = POLL_SECONDS):
        time_machine = _time_machine()
        _real_time_for()
        self.path = Path(path)
        self.offset = read_offset(self.path)
        self._travel = time_machine.travel(self._world_now(), tick=True)
        self._traveller = self._travel.start()
        self._stamp = self._file_stamp()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(poll,), name="world-clock", daemon=True)
        self._thread.start()

    def _world_now(self) -> datetime:
        return datetime.fromtimestamp(_real_time() + self.offset, UTC)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _watch(self, poll: float) -> None:
        while not self._stop.wait(poll):
            self.refresh()

    def refresh(self) -> None:
        """Moves this process's clock if the world's was set since the last look."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        offset = read_offset(self.path)
        if offset != self.offset:
            self.offset = offset
            self._traveller.move_to(self._world_now())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._travel.stop()


def follow(path: Path) -> WorldClock:
    """Puts this process on the world's clock kept in ``path`` until :meth:`WorldClock.stop`."""
    return WorldClock(path)


def follow_from_env() -> WorldClock | None:
    """What the start-up hook does: follow the clock file :data:`CLOCK_FILE_ENV` names, if it names one."""
    path = os.environ.get(CLOCK_FILE_ENV)
    return follow(Path(path)) if path else None


@contextmanager
def on_world_clock(root: Path) -> Iterator[WorldClock]:
    """This process on the clock of the world under ``root`` for the block (the headless replay)."""
    clock = follow(clock_file(root))
    try:
        yield clock
    finally:
        clock.stop()
