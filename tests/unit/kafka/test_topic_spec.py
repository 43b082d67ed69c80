"""Topic specs: reliable defaults scaled to the cluster's size."""

from __future__ import annotations

from typing import Literal

import pytest

from streamscale.errors import ConfigError
from streamscale.kafka.admin import TopicSpec, _one_per_name
from streamscale.kafka.options import MARKER_TOPIC
from streamscale.kafka.transactions import MARKER_PARTITIONS, marker_topic_spec
from streamscale.pipelines.topics import pipeline_topics


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


@pytest.mark.parametrize(
    ("delivery", "has_markers"), [("at-least-once", False), ("exactly-once", True)]
)
def test_the_catalog_lists_the_marker_topic_with_exactly_once(
    delivery: Literal["at-least-once", "exactly-once"], has_markers: bool
) -> None:
    catalog = pipeline_topics(replication_factor=3, delivery=delivery)
    for specs in catalog.values():
        markers = [s for s in specs if s.name == MARKER_TOPIC]
        assert bool(markers) == has_markers
        if markers:
            assert markers == [marker_topic_spec(replication_factor=3)]
            rf, configs = markers[0].resolved(3)
            assert (rf, configs["cleanup.policy"]) == (3, "compact")
            assert markers[0].partitions == MARKER_PARTITIONS


def test_a_topic_two_pipelines_share_is_kept_once() -> None:
    specs = [s for group in pipeline_topics(delivery="exactly-once").values() for s in group]
    kept = _one_per_name(specs)
    assert [s.name for s in kept].count(MARKER_TOPIC) == 1
    assert len(kept) == len({s.name for s in specs})


def test_two_different_specs_of_one_topic_are_refused() -> None:
    with pytest.raises(ConfigError, match="topic t is specified twice"):
        _one_per_name([TopicSpec("t", 1), TopicSpec("t", 2)])


def test_suffixed_names_every_topic_of_a_pipelines_set() -> None:
    from streamscale.pipelines.enrichment import EnrichmentTopics
    from streamscale.pipelines.game_sessions import GameTopics
    from streamscale.pipelines.topics import suffixed

    assert suffixed(EnrichmentTopics(), "ks") == EnrichmentTopics(
        "achats-ks", "referentiel-ks", "achats-enrichis-ks", "enrichment-dlq-ks"
    )
    assert suffixed(GameTopics(), "a") == GameTopics(
        "GAME-FRAME-RQ-a", "GAME-FRAME-RS-a", "SESSIONS-a", "game-sessions-dlq-a"
    )
