"""Consumer groups of queries and what a batch commits (pure part of the group committer)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.kafka.groups import (
    JAVA_CLIENT_KEYS,
    CommitTarget,
    batch_commits,
    connection,
    group_id,
    match_sources,
    moved_forward,
    query_group,
    remember_group,
    targets_for,
)
from streamscale.kafka.offsets import TopicPartition

QID = "cd27d422-4108-497f-814d-5158173f7a2a"
PYTHON_STREAM = (
    "org.apache.spark.sql.execution.datasources.v2.python."
    "PythonMicroBatchStreamWithTriggerAvailableNow@615070ac"
)
HERE = "127.0.0.1:9092"
OTHER = "10.1.1.1:9092,10.1.1.2:9092"
FALLBACK = {"bootstrap.servers": HERE, "security.protocol": "SASL_SSL", "sasl.password": "s"}

# Recorded from pyspark 4.2.0: Spark's connector, 3 partitions holding 50, 10 and 0 records.
CONNECTOR: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "lag" / "progress_kafka_connector.json").read_text()
)


@pytest.mark.parametrize(
    ("options", "name", "expected"),
    [
        ({}, "enrich", "streamscale-enrich"),
        ({}, None, f"streamscale-{QID}"),
        ({"groupIdPrefix": "app"}, "enrich", "app-enrich"),
        ({"groupidprefix": "app"}, None, f"app-{QID}"),
        ({"kafka.group.id": "mine", "groupIdPrefix": "app"}, "enrich", "mine"),
        ({"KAFKA.GROUP.ID": "mine"}, None, "mine"),
        ({"kafka.group.id": ""}, "enrich", "streamscale-enrich"),
        ({"queryName": "src"}, "enrich", "streamscale-src"),  # streamscale-kafka's option
        ({"queryName": "src", "groupIdPrefix": "p"}, None, "p-src"),
    ],
)
def test_group_id(options: dict[str, str], name: str | None, expected: str) -> None:
    assert group_id(options, name, QID) == expected


def test_query_group_is_the_resolved_one_else_the_default() -> None:
    assert query_group("never-seen-query") == "streamscale-never-seen-query"
    remember_group("resolved-query", "my-group")
    assert query_group("resolved-query") == "my-group"


@pytest.mark.parametrize(
    ("options", "librdkafka", "expected"),
    [
        ({}, False, FALLBACK),
        ({"kafka.bootstrap.servers": HERE}, False, FALLBACK),
        ({"kafka.bootstrap.servers": f" {HERE} "}, True, FALLBACK),
        (
            {"kafka.bootstrap.servers": OTHER, "kafka.security.protocol": "SSL"},
            False,
            {"bootstrap.servers": OTHER, "security.protocol": "SSL"},
        ),
        (  # Java-only keys do not reach librdkafka
            {
                "kafka.bootstrap.servers": OTHER,
                "kafka.sasl.jaas.config": "x required;",
                "kafka.ssl.truststore.location": "/t.jks",
                "kafka.sasl.mechanism": "PLAIN",
            },
            False,
            {"bootstrap.servers": OTHER, "sasl.mechanism": "PLAIN"},
        ),
        (  # the project's source: its kafka.* keys are librdkafka's already
            {
                "kafka.bootstrap.servers": OTHER,
                "kafka.sasl.username": "u",
                "kafka.group.id": "g",
                "subscribe": "t",
            },
            True,
            {"bootstrap.servers": OTHER, "sasl.username": "u"},
        ),
        (
            {"kafka.bootstrap.servers": "10.1.1.2:9092,10.1.1.1:9092"},
            False,
            {"bootstrap.servers": "10.1.1.2:9092,10.1.1.1:9092"},
        ),
    ],
)
def test_connection(options: dict[str, str], librdkafka: bool, expected: dict[str, str]) -> None:
    assert connection(options, librdkafka_keys=librdkafka, fallback=FALLBACK) == expected


def test_connection_same_servers_in_another_order_is_the_same_cluster() -> None:
    fallback = {"bootstrap.servers": OTHER, "sasl.password": "s"}
    reordered = {"kafka.bootstrap.servers": "10.1.1.2:9092, 10.1.1.1:9092"}
    assert connection(reordered, librdkafka_keys=False, fallback=fallback) == fallback


def test_java_client_keys_are_connection_keys_only() -> None:
    assert "group.id" not in JAVA_CLIENT_KEYS
    assert all("deserializer" not in k for k in JAVA_CLIENT_KEYS)


@pytest.mark.parametrize(
    ("descriptions", "found", "expected"),
    [
        ([], [], []),
        (["A"], [], [None]),
        (["A", "R"], [("A", {"x": "1"}), ("R", {})], [{"x": "1"}, {}]),
        (["R", "A"], [("A", {"x": "1"}), ("R", {"r": "2"})], [{"r": "2"}, {"x": "1"}]),
        # two streams with one description: plan order
        (["K", "K"], [("K", {"n": "1"}), ("K", {"n": "2"})], [{"n": "1"}, {"n": "2"}]),
        (["K", "K"], [("K", {"n": "1"})], [{"n": "1"}, None]),
    ],
)
def test_match_sources(
    descriptions: list[str],
    found: list[tuple[str, dict[str, str]]],
    expected: list[dict[str, str] | None],
) -> None:
    assert match_sources(descriptions, found) == expected


def _progress(*sources: tuple[str, Any], name: str | None = "enrich") -> dict[str, Any]:
    return {
        "id": QID,
        "runId": "run-1",
        "name": name,
        "batchId": 4,
        "sources": [{"description": d, "endOffset": end} for d, end in sources],
    }


def test_targets_for_connector_and_python_sources() -> None:
    progress = _progress(
        ("KafkaV2[Subscribe[a]]", {"a": {"0": 1}}),
        ("RateStreamV2[rowsPerSecond=5]", 10),
        (PYTHON_STREAM, {"b": {"0": 2}}),
    )
    found = [
        ("KafkaV2[Subscribe[a]]", {"kafka.bootstrap.servers": OTHER, "kafka.group.id": "ga"}),
        ("RateStreamV2[rowsPerSecond=5]", {}),
        (PYTHON_STREAM, {"kafka.bootstrap.servers": HERE, "groupIdPrefix": "p"}),
    ]
    assert targets_for(progress, found, FALLBACK) == [
        CommitTarget.of("ga", {"bootstrap.servers": OTHER}),
        None,
        CommitTarget.of("p-enrich", FALLBACK),
    ]


def test_targets_for_unread_options_use_the_defaults() -> None:
    progress = _progress(("KafkaV2[Subscribe[a]]", {"a": {"0": 1}}), name=None)
    assert targets_for(progress, [], FALLBACK) == [CommitTarget.of(f"streamscale-{QID}", FALLBACK)]


def test_batch_commits_of_recorded_connector_progress() -> None:
    target = CommitTarget.of("streamscale-probeq", FALLBACK)
    expected = [(16, 3, 0), (32, 6, 0), (48, 9, 0), (50, 10, 0)]
    for progress, offsets in zip(CONNECTOR, expected, strict=True):
        assert targets_for(progress, [], FALLBACK) == [target]
        assert batch_commits(progress, [target]) == {
            target: {TopicPartition("probe", p): offsets[p] for p in range(3)}
        }


@pytest.mark.parametrize(
    ("sources", "targets", "expected"),
    [
        ([], [], {}),
        ([("K", '{"t": {"0": 5, "1": 7}}')], ["g"], {"g": {("t", 0): 5, ("t", 1): 7}}),
        ([("K", {"t": {"0": 5}})], [None], {}),
        ([("K", None)], ["g"], {}),  # no batch offsets yet
        ([("K", "12")], ["g"], {}),  # not the Kafka shape
        ([("K", {"t": {"0": -1}})], ["g"], {}),  # never a negative offset
        # one target, one topic read by two sources: what both processed
        (
            [("K", {"t": {"0": 5, "1": 9}}), ("K", {"t": {"0": 8, "1": 2}})],
            ["g", "g"],
            {"g": {("t", 0): 5, ("t", 1): 2}},
        ),
        (
            [("K", {"t": {"0": 5}}), ("K", {"u": {"0": 8}})],
            ["g", "h"],
            {"g": {("t", 0): 5}, "h": {("u", 0): 8}},
        ),
    ],
)
def test_batch_commits(
    sources: list[tuple[str, Any]],
    targets: list[str | None],
    expected: dict[str, dict[tuple[str, int], int]],
) -> None:
    progress = _progress(*sources)
    resolved = [None if t is None else CommitTarget.of(t, FALLBACK) for t in targets]
    got = batch_commits(progress, resolved)
    assert {t.group: {tuple(tp): o for tp, o in offs.items()} for t, offs in got.items()} == (
        expected
    )


def test_batch_commits_of_a_pyspark_progress_object() -> None:
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    raw = copy.deepcopy(CONNECTOR[1])
    target = CommitTarget.of("g", FALLBACK)
    assert batch_commits(StreamingQueryProgress.fromJson(raw), [target]) == batch_commits(
        CONNECTOR[1], [target]
    )


OFFSETS = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3)).map(lambda t: TopicPartition(*t)),
    st.integers(0, 1000),
    max_size=8,
)


@given(OFFSETS, OFFSETS)
def test_moved_forward(offsets: dict[TopicPartition, int], committed: dict[Any, int]) -> None:
    moved = moved_forward(offsets, committed)
    assert set(moved) <= set(offsets)
    for tp, offset in offsets.items():
        assert (tp in moved) == (offset > committed.get(tp, -1))
        if tp in moved:
            assert moved[tp] == offset
    assert moved_forward(offsets, {**committed, **moved}) == {}


SOURCE_OFFSETS = st.dictionaries(
    st.sampled_from(["a", "b"]),
    st.dictionaries(st.integers(0, 3).map(str), st.integers(-2, 1000), min_size=1, max_size=4),
    min_size=1,
    max_size=2,
)


@given(st.lists(st.tuples(SOURCE_OFFSETS, st.sampled_from(["g", "h", None])), max_size=4))
def test_batch_commits_is_the_least_processed_offset_per_group(
    sources: list[tuple[dict[str, dict[str, int]], str | None]],
) -> None:
    progress = _progress(*[("KafkaV2[Subscribe[a, b]]", offsets) for offsets, _ in sources])
    targets = [None if g is None else CommitTarget.of(g, FALLBACK) for _, g in sources]
    got = {t.group: offsets for t, offsets in batch_commits(progress, targets).items()}
    expected: dict[str, dict[TopicPartition, int]] = {}
    for offsets, group in sources:
        if group is None:
            continue
        for topic, parts in offsets.items():
            for partition, offset in parts.items():
                if offset >= 0:
                    tp = TopicPartition(topic, int(partition))
                    mine = expected.setdefault(group, {})
                    mine[tp] = min(offset, mine.get(tp, offset))
    assert got == {g: o for g, o in expected.items() if o}


NAMES = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=12)


@given(
    st.dictionaries(
        st.sampled_from(["kafka.group.id", "groupIdPrefix", "queryName", "subscribe"]),
        NAMES,
    ),
    st.none() | NAMES,
)
def test_group_id_precedence(options: dict[str, str], name: str | None) -> None:
    group = group_id(options, name, QID)
    if "kafka.group.id" in options:
        assert group == options["kafka.group.id"]
    else:
        prefix = options.get("groupIdPrefix", "streamscale")
        assert group == f"{prefix}-{options.get('queryName') or name or QID}"
    assert group_id({k.upper(): v for k, v in options.items()}, name, QID) == group
