"""Every wait of the Coalesce client has a ceiling: each wait before a retry is
``min(Retry-After, max_retry_wait, the time left in the call's budget)``, through the real client and httpx's
mock transport (Coalesce's 429 body and ``Retry-After`` header as its API sends them)."""

from __future__ import annotations

import time

import httpx
import pytest

from dw_dagster.coalesce import CoalesceAPIError, CoalesceClient

BASE_URL = "https://app.coalescesoftware.io"
RATE_LIMITED = {"error": {"errorString": "Too Many Requests", "errorDetail": "rate limit exceeded"}}
ENVIRONMENTS = {"data": [{"id": "2", "name": "Production"}], "next": None}


def _client(answers: list[httpx.Response], **kwargs) -> tuple[CoalesceClient, list[float]]:
    sent: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return answers.pop(0)

    return CoalesceClient("t0ken", BASE_URL, transport=httpx.MockTransport(handler), **kwargs), sent


def _throttled(seconds: int = 25) -> httpx.Response:
    return httpx.Response(429, headers={"Retry-After": str(seconds)}, json=RATE_LIMITED)


def test_three_429s_asking_25s_finish_within_the_budget_and_say_so():
    client, sent = _client(
        [_throttled(), _throttled(), _throttled(), _throttled()],
        request_max_retries=3,
        request_budget=2.0,
        max_retry_wait=0.2,
    )
    started = time.monotonic()
    with pytest.raises(CoalesceAPIError) as info:
        client.list_environments()
    elapsed = time.monotonic() - started
    assert len(sent) == 4
    assert elapsed < 2.0, f"a call with a 2 s budget took {elapsed:.1f} s"
    waits = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert all(0.15 < w < 1.0 for w in waits), waits
    assert str(info.value) == (
        "Coalesce GET /api/v1/environments returned 429: Too Many Requests (rate limit exceeded); gave up after "
        "3 retries: Coalesce asked to wait up to 25s (Retry-After), each wait was capped at 0.2s"
    )


def test_a_wait_the_budget_has_no_room_for_gives_up_at_once_and_says_why():
    client, sent = _client([_throttled(), _throttled()], request_max_retries=3, request_budget=0.5)
    started = time.monotonic()
    with pytest.raises(CoalesceAPIError) as info:
        client.list_environments()
    assert time.monotonic() - started < 0.5
    assert len(sent) == 1
    assert info.value.status == 429 and info.value.retries == 0
    assert str(info.value).endswith(
        "gave up: no time left in the call's 0.5s budget for another wait "
        "(Retry-After asked 25s, each wait capped at 10s)"
    )


def test_a_short_retry_after_is_honoured_and_the_call_succeeds():
    client, sent = _client(
        [_throttled(1), httpx.Response(200, json=ENVIRONMENTS)], request_max_retries=3, max_retry_wait=0.3
    )
    [environment] = client.list_environments()
    assert environment.id == "2"
    assert len(sent) == 2 and 0.25 < sent[1] - sent[0] < 1.0


def test_the_defaults_hold_a_call_under_a_sensor_tick():
    client = CoalesceClient("t0ken", BASE_URL)
    # Three capped waits and the requests' own timeouts fit the 30 s budget, far inside the daemon's 60 s.
    assert (client.max_retry_wait, client.request_budget) == (10.0, 30.0)
    assert client.request_max_retries * client.max_retry_wait <= client.request_budget


def test_the_workspace_and_the_component_set_the_ceilings_of_their_client(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COALESCE_API_TOKEN", "t0ken")  # the component's token comes from the environment
    from dw_dagster.coalesce import CoalesceComponent, CoalesceWorkspace

    workspace = CoalesceWorkspace(
        api_token="t0ken", environment_ids=["2"], request_budget=5, max_retry_wait=1.5
    )
    client = workspace.new_client()
    assert (client.request_budget, client.max_retry_wait) == (5.0, 1.5)
    declared = "workspace: {environment_ids: '2', request_budget: 12, max_retry_wait: 2}\n"
    client = CoalesceComponent.resolve_from_yaml(declared).workspace.new_client()
    assert (client.request_budget, client.max_retry_wait) == (12.0, 2.0)
    defaults = CoalesceComponent.resolve_from_yaml("workspace: {environment_ids: '2'}\n").workspace
    assert (defaults.request_budget, defaults.max_retry_wait) == (30.0, 10.0)


def test_a_ceiling_that_is_not_positive_is_refused_naming_the_field():
    from dw_dagster.coalesce import CoalesceComponent

    with pytest.raises(Exception) as raised:
        CoalesceComponent.resolve_from_yaml("workspace: {environment_ids: '2', max_retry_wait: 0}\n")
    text = f"{raised.value} {raised.value.__cause__}"
    assert "max_retry_wait: expected a number of seconds above 0 (got 0.0)" in text


def test_the_client_refuses_a_ceiling_that_is_not_positive():
    from dw_dagster.coalesce import CoalesceWorkspace

    workspace = CoalesceWorkspace(api_token="t0ken", environment_ids=["2"], request_budget=0)
    with pytest.raises(ValueError, match=r"request_budget: 0.*expected a number of seconds above 0"):
        workspace.new_client()


def test_the_node_pages_the_job_ids_and_the_org_are_settings_of_the_component(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("COALESCE_API_TOKEN", "t0ken")
    from dw_dagster.coalesce import CoalesceComponent

    declared = (
        "workspace: {environment_ids: '2', org_id: acme, job_ids: '3, 7', node_page_size: '50', "
        "node_page_timeout: '90', node_page_retry_wait: 0}\n"
    )
    workspace = CoalesceComponent.resolve_from_yaml(declared).workspace
    client = workspace.new_client()
    assert workspace.job_ids == ["3", "7"] and client.org_id == "acme"
    assert (client.node_paging.page_size, client.node_paging.timeout, client.node_paging.retry_wait) == (
        50,
        90,
        0,
    )
    # Coalesce's own extractor's sizes unless set.
    paging = (
        CoalesceComponent.resolve_from_yaml("workspace: {environment_ids: '2'}\n")
        .workspace.new_client()
        .node_paging
    )
    assert (paging.page_size, paging.timeout, paging.retry_wait) == (200, 240.0, 300.0)
    with pytest.raises(Exception) as raised:
        CoalesceComponent.resolve_from_yaml("workspace: {environment_ids: '2', node_page_size: 900}\n")
    assert "node_page_size: 900; expected 1-500" in f"{raised.value} {raised.value.__cause__}"


def test_a_sensor_ticks_client_reads_detailed_pages_within_a_calls_budget():
    from dw_dagster.coalesce import CoalesceWorkspace

    workspace = CoalesceWorkspace(api_token="t0ken", environment_ids=["2"], request_budget=20)
    refresh, tick = workspace.new_client().node_paging, workspace.new_client(in_sensor_tick=True).node_paging
    assert (refresh.timeout, refresh.retry_wait) == (240.0, 300.0)
    assert (tick.page_size, tick.timeout, tick.retry_wait) == (200, 20.0, 0)
