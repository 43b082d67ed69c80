"""Topic specs: reliable defaults scaled to the cluster's size."""

from __future__ import annotations

import pytest

from streamscale.kafka.admin import TopicSpec


@pytest.mark.parametrize(
    ("brokers", "rf", "min_isr"),
    [(1, 1, "1"), (2, 2, "2"), (3, 3, "2"), (5, 3, "2")],
)
def test_replication_defaults_follow_cluster_size(brokers: int, rf: int, min_isr: str) -> None:
    got_rf, configs = TopicSpec("t").resolved(brokers)
    assert got_rf == rf
    assert configs["min.insync.replicas"] == min_isr


def test_streams_have_explicit_retention_and_tables_are_compacted() -> None:
    _, stream = TopicSpec("s", retention_ms=1000).resolved(3)
    assert stream["cleanup.policy"] == "delete"
    assert stream["retention.ms"] == "1000"
    assert stream["retention.bytes"] == "-1"
    _, table = TopicSpec("t", table=True).resolved(3)
    assert table["cleanup.policy"] == "compact"
    assert table["retention.ms"] == "-1"


def test_explicit_configs_win() -> None:
    rf, configs = TopicSpec(
        "t", replication_factor=2, configs={"min.insync.replicas": "1"}
    ).resolved(5)
    assert rf == 2
    assert configs["min.insync.replicas"] == "1"
