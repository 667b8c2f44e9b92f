"""A world's servers get three different ports: picked one after another, each socket closed at once, the
kernel could hand the same free port out twice, and the world's second server then found its port taken by
its first (seen once in a suite run: the simulator's port held by the same world's Snowflake)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from dw_local.world import LocalWorld, PortInUse, WorldPorts, free_ports


def test_free_ports_are_distinct_and_free():
    ports = free_ports(200)
    assert len(set(ports)) == 200
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free once picked


def test_a_world_picks_only_the_ports_it_was_not_given_all_different():
    for _ in range(50):
        ports = WorldPorts()
        assert len({ports.snowflake, ports.coalesce, ports.slack}) == 3
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        given = held.getsockname()[1]
        ports = WorldPorts(slack=given)
        assert ports.slack == given and len({ports.snowflake, ports.coalesce, given}) == 3


def _listening(port: int = 0) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_picked_port_another_process_takes_first_is_picked_again(tmp_path):
    # Two suite workers starting worlds side by side: a port picked free is taken by the other's server
    # before this world's binds it (a whole module errored on it once).
    world = LocalWorld(tmp_path / "w", services=("slack",))
    picked = world.ports.slack
    with _listening(picked), world:
        assert world.ports.slack != picked
        assert httpx.get(f"{world.slack_url}/api/api.test", timeout=10).status_code == 200
        assert json.loads((world.root / "world.json").read_text())["ports"]["slack"] == world.ports.slack


def test_a_given_port_that_is_taken_is_not_swapped_for_another(tmp_path):
    with _listening() as thief:
        given = thief.getsockname()[1]
        world = LocalWorld(tmp_path / "g", ports=WorldPorts(slack=given), services=("slack",))
        with pytest.raises(PortInUse) as e:
            world.start()
    assert e.value.port == given and world.ports.slack == given
