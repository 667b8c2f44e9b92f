"""A world's servers get three different ports: picked one after another, each socket closed at once, the
kernel could hand the same free port out twice, and the world's second server then found its port taken by
its first (seen once in a suite run: the simulator's port held by the same world's Snowflake)."""

from __future__ import annotations

import socket

from dw_local.world import WorldPorts, free_ports


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
