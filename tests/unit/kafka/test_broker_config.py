"""The embedded broker's pure parts: cluster ids, node properties, the layout file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.kafka.broker import (
    BrokerError,
    Layout,
    NodeSpec,
    layout_from_json,
    layout_to_json,
    new_cluster_id,
    node_hosts,
    server_properties,
)


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@settings(max_examples=300)
@given(st.integers())
def test_cluster_ids_are_16_bytes_and_never_look_like_an_option(_: int) -> None:
    cid = new_cluster_id()
    assert not cid.startswith("-")
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16


ONE = Layout("abc", (NodeSpec(1, 9092, 9093),))
THREE = Layout("abc", (NodeSpec(1, 9092, 9093), NodeSpec(2, 9094, 9095), NodeSpec(3, 9096, 9097)))


@pytest.mark.parametrize(
    ("layout", "node", "expected"),
    [
        (
            ONE,
            1,
            {
                "node.id": "1",
                "controller.quorum.voters": "1@127.0.0.1:9093",
                "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "default.replication.factor": "1",
            },
        ),
        (
            THREE,
            2,
            {
                "node.id": "2",
                "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097",
                "listeners": "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095",
                "offsets.topic.replication.factor": "3",
                "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2",
                "default.replication.factor": "3",
            },
        ),
    ],
)
def test_server_properties_are_kraft_combined_on_loopback(
    layout: Layout, node: int, expected: dict[str, str]
) -> None:
    got = props(server_properties(layout, node, Path("/d/node/data")))
    assert got["process.roles"] == "broker,controller"
    assert got["auto.create.topics.enable"] == "false"
    assert got["log.dirs"] == "/d/node/data"
    for key, value in expected.items():
        assert got[key] == value, key


def test_layout_round_trips_through_json() -> None:
    assert layout_from_json(layout_to_json(THREE)) == THREE
    assert THREE.bootstrap == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"
    assert THREE.node(3).controller_port == 9097


HOSTS = Layout(
    "abc",
    (
        NodeSpec(1, 9092, 9093, "198.18.0.11"),
        NodeSpec(2, 9092, 9093, "198.18.0.12"),
        NodeSpec(3, 9092, 9093, "198.18.0.13"),
    ),
)


def test_each_node_listens_and_advertises_its_own_host() -> None:
    got = props(server_properties(HOSTS, 2, Path("/d")))
    assert got["listeners"] == "PLAINTEXT://198.18.0.12:9092,CONTROLLER://198.18.0.12:9093"
    assert got["advertised.listeners"] == "PLAINTEXT://198.18.0.12:9092"
    assert got["controller.quorum.voters"] == (
        "1@198.18.0.11:9093,2@198.18.0.12:9093,3@198.18.0.13:9093"
    )
    assert HOSTS.bootstrap == "198.18.0.11:9092,198.18.0.12:9092,198.18.0.13:9092"
    assert layout_from_json(layout_to_json(HOSTS)) == HOSTS


def test_a_layout_written_before_hosts_reads_as_loopback() -> None:
    old = '{"cluster_id": "abc", "nodes": [{"node_id": 1, "port": 9092, "controller_port": 9093}]}'
    assert layout_from_json(old) == ONE


def test_one_host_per_node_or_one_for_all() -> None:
    assert node_hosts("10.0.0.5", 3) == ["10.0.0.5"] * 3
    assert node_hosts(["a", "b", "c"], 3) == ["a", "b", "c"]
    with pytest.raises(BrokerError, match="one per node"):
        node_hosts(["a", "b"], 3)
