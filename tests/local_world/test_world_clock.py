"""The local world runs on one clock: a process started with ``clock_env`` reads the world's time and follows
it when the world's clock is set; the servers that keep their own offset never follow it twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from dw_local.world_clock import CLOCK_FILE_ENV, clock_env, clock_file, follow, without_clock

WORLD_BEHIND = timedelta(days=-538)  # the seeded nights' June 2025 against a December 2026 machine


def _set(root, offset: timedelta) -> None:
    path = clock_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"offset_seconds": offset.total_seconds()}))


def _near(a: datetime, b: datetime, seconds: float = 30) -> bool:
    return abs((a - b).total_seconds()) < seconds


def test_a_process_follows_the_worlds_clock_as_it_is_set(tmp_path):
    _set(tmp_path, WORLD_BEHIND)
    clock = follow(clock_file(tmp_path))
    try:
        import dagster._time

        real = datetime.now(UTC) - WORLD_BEHIND
        assert _near(datetime.now(UTC), real + WORLD_BEHIND)
        # Dagster's own clock (freshness, sensor ticks) reads the same.
        assert _near(dagster._time.get_current_datetime(), real + WORLD_BEHIND)
        _set(tmp_path, WORLD_BEHIND + timedelta(days=1))  # the next night is played
        time.sleep(0.01)
        clock.refresh()
        assert _near(datetime.now(UTC), real + WORLD_BEHIND + timedelta(days=1))
    finally:
        clock.stop()
    assert _near(datetime.now(UTC), real)


def test_processes_started_with_the_worlds_environment_read_its_time(tmp_path):
    _set(tmp_path, WORLD_BEHIND)
    env = {"PATH": "/usr/bin:/bin", **clock_env(tmp_path, {})}
    code = "import sys; from datetime import UTC, datetime; print(datetime.now(UTC).isoformat(), 'pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    now, pytest_imported = out.stdout.split()
    assert _near(datetime.fromisoformat(now), datetime.now(UTC) + WORLD_BEHIND)
    # The clock's library defines a pytest fixture when pytest is importable: not in the world's processes.
    assert pytest_imported == "False"
    # The simulator and the Snowflake keep their own offset: started without the hook.
    kept = without_clock({**env, "PYTHONPATH": f"{env['PYTHONPATH']}:/opt/other"})
    assert CLOCK_FILE_ENV not in kept and kept["PYTHONPATH"] == "/opt/other"


def test_grpc_deadlines_stay_on_the_real_clock(tmp_path):
    # gRPC's C core reads the real clock: a deadline made on the world's would have passed already, and
    # every call of Dagster's code servers would fail (they shut down for want of a heartbeat).
    _set(tmp_path, WORLD_BEHIND)
    env = {"PATH": "/usr/bin:/bin", **clock_env(tmp_path, {})}
    code = "import time, grpc._channel as c; print(c._deadline(5) - time.time())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ahead = float(out.stdout)  # the deadline, real, against the process's (world's) now
    assert abs(ahead - 5 + WORLD_BEHIND.total_seconds()) < 30, ahead


def test_code_servers_count_heartbeats_in_real_seconds(tmp_path):
    # A code server's heartbeat check compares its last heartbeat with time.time() - TTL: on the world's clock,
    # a night played (the clock a day ahead) between a heartbeat and the check shut the server down, and the
    # daemon's next run launch was refused. Their clock is the real one; what they record stays the world's.
    _set(tmp_path, WORLD_BEHIND)
    env = {"PATH": "/usr/bin:/bin", **clock_env(tmp_path, {})}
    code = (
        "import time, dagster._time, dagster._grpc.server as s, dagster._grpc.proxy_server as p; "
        "print(s.time.time() - time.time(), p.time.time() - time.time(), "
        "dagster._time.get_current_timestamp() - time.time())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    server, proxy, recorded = (float(x) for x in out.stdout.split())
    real_ahead = -WORLD_BEHIND.total_seconds()
    assert abs(server - real_ahead) < 30 and abs(proxy - real_ahead) < 30, (server, proxy)
    assert abs(recorded) < 30, recorded
