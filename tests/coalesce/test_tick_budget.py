"""A run sensor tick keeps to its overall budget when Coalesce stops answering: before, each pending run's
detail call waited its own 30 s budget, so two hanging calls made a 60 s tick (past the daemon's gRPC
limit), growing with each pending run. A stand-in Coalesce on a loopback socket lists runs at once and never
answers a run's detail."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from dw_dagster.coalesce import CoalesceWorkspace
from dw_dagster.coalesce.cursor import CoalesceRunSensorCursor, EnvironmentCursor
from dw_dagster.coalesce.sensor_builder import MIN_CALL_SECONDS, build_coalesce_polling_sensor

BUDGET = 3.0
PENDING = (5, 6, 7, 8)


@pytest.fixture
def hanging_coalesce() -> Iterator[tuple[str, list[str]]]:
    """A Coalesce whose run listing answers and whose run details hang (until the test ends); yields its
    URL and the paths requested."""
    requested: list[str] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            requested.append(path)
            if path != "/api/v1/runs":
                release.wait(60)  # a detail call that never answers while the tick runs
            body = json.dumps({"data": [], "next": None}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up on the call long ago

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_pending_runs_whose_detail_calls_hang_end_the_tick_within_its_budget(hanging_coalesce) -> None:
    url, requested = hanging_coalesce
    # Each call's own budget is the default 30 s: the tick's budget is what bounds it.
    workspace = CoalesceWorkspace(base_url=url, api_token="t", environment_ids=["2"])
    sensor = build_coalesce_polling_sensor(
        workspace=workspace, asset_specs=[], tick_time_budget_seconds=BUDGET
    )
    cursor = CoalesceRunSensorCursor(
        environments={"2": EnvironmentCursor(high_water=10, pending=PENDING)}
    ).serialize()
    with dg.instance_for_test() as instance:
        started = time.monotonic()
        result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
        elapsed = time.monotonic() - started
    # A ceiling, not a speed figure: the budget plus the least one call gets, with room for a busy machine.
    assert elapsed < BUDGET + MIN_CALL_SECONDS + 5, f"the tick took {elapsed:.1f} s"
    assert requested == ["/api/v1/runs/5"], "no call starts once the budget is spent"
    # Nothing is lost: every pending run and the listing wait for the next tick, and the skip says so.
    assert result.cursor == cursor
    assert result.skip_reason is not None
    reason = result.skip_reason.skip_message or ""
    assert f"the tick's time budget ({BUDGET:g} s) is spent" in reason
    assert "Left for the next tick: environment 2: run 5, run 6, run 7, run 8, the runs after 10" in reason
