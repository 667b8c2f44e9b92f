"""The run sensor ticks every 4 s by default (every turn of the daemon's 5 s sensor loop) because an idle tick costs one Coalesce API call per environment
and nothing else (a stand-in Coalesce on a loopback socket counts the requests); the deployed instance
launches a queued run within a second and keeps the approval gate's tag limit."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import pytest

from dw_dagster.coalesce import CoalesceWorkspace
from dw_dagster.coalesce.sensor_builder import build_coalesce_polling_sensor

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def coalesce() -> Iterator[tuple[str, list[str]]]:
    """A Coalesce host with no runs at all; yields its URL and the paths requested."""
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            requested.append(self.path.split("?")[0])
            body = json.dumps({"data": [], "next": None}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def test_the_run_sensor_ticks_every_5_s_and_an_idle_tick_is_one_call_per_environment(coalesce) -> None:
    url, requested = coalesce
    workspace = CoalesceWorkspace(base_url=url, api_token="t0ken", environment_ids=["2", "3"])
    sensor = build_coalesce_polling_sensor(workspace=workspace, asset_specs=[])
    assert sensor.minimum_interval_seconds == 4

    with dg.DagsterInstance.ephemeral() as instance:
        cursor = None
        for _ in range(4):
            result = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor))
            assert not result.run_requests and not result.asset_events
            cursor = result.cursor
        first = requested[:4]
        idle = requested[4:]
    # The first tick starts each environment at the present (2 calls each); the 3 idle ticks after it read
    # only the runs since the high-water mark: one call per environment per tick.
    assert first == ["/api/v1/runs"] * 4
    assert idle == ["/api/v1/runs"] * 6


def test_a_sensor_interval_under_a_second_is_refused(coalesce) -> None:
    workspace = CoalesceWorkspace(base_url=coalesce[0], api_token="t0ken", environment_ids=["2"])
    with pytest.raises(ValueError, match="minimum_interval_seconds must be at least 1, got 0"):
        build_coalesce_polling_sensor(workspace=workspace, asset_specs=[], minimum_interval_seconds=0)


def test_the_instance_dequeues_every_second_and_keeps_the_approval_gate(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.max_concurrent_runs == 4
        assert {"key": "dw/approval", "value": "pending", "limit": 0} in queue.tag_concurrency_limits
    finally:
        instance.dispose()
