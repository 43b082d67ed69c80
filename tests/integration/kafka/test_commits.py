"""Every query's processed offsets in its Kafka consumer group, as Kafka's own
``kafka-consumer-groups --describe`` (ConsumerGroupCommand) shows them: plain user queries on
Spark's connector and on ``streamscale-kafka``, against the embedded broker and Spark local.

The session fixture's committer is configured for ``127.0.0.1:9092`` (``Settings()``), not the
test broker: each query is committed to the cluster its own source names.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streamscale.kafka import broker as embedded
from streamscale.kafka.client import producer_config
from streamscale.kafka.commits import GroupCommitter, group_committer, jvm_source_options
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

UNEVEN = (50, 17, 0)  # records per partition: one partition empty


@dataclass(frozen=True)
class GroupRow:
    """One partition of ``kafka-consumer-groups --describe``."""

    topic: str
    partition: int
    current: int | None
    log_end: int
    lag: int | None


def describe_group(bootstrap: str, group: str) -> dict[int, GroupRow]:
    """Kafka's ``kafka-consumer-groups.sh --describe --group`` → rows by partition."""
    out = embedded.run_tool(
        embedded.CONSUMER_GROUPS_TOOL,
        ["--bootstrap-server", bootstrap, "--describe", "--group", group],
    )
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header = next((i for i, cols in enumerate(lines) if cols[:1] == ["GROUP"]), None)
    assert header is not None, f"no table in the tool's output:\n{out}"
    names = lines[header]
    rows = {}
    for cols in lines[header + 1 :]:
        row = dict(zip(names, cols, strict=False))
        assert row["GROUP"] == group
        rows[int(row["PARTITION"])] = GroupRow(
            row["TOPIC"],
            int(row["PARTITION"]),
            number(row["CURRENT-OFFSET"]),
            int(row["LOG-END-OFFSET"]),
            number(row["LAG"]),
        )
    return rows


def number(text: str) -> int | None:
    """A number column of the tool; ``-`` where it has none (no committed offset)."""
    return None if text == "-" else int(text)


def list_groups(bootstrap: str) -> set[str]:
    out = embedded.run_tool(
        embedded.CONSUMER_GROUPS_TOOL, ["--bootstrap-server", bootstrap, "--list"]
    )
    return {line.strip() for line in out.splitlines() if line.strip()}


def produce_uneven(settings: Settings, topic: str) -> None:
    producer = Producer(producer_config(settings.kafka_config()))
    for partition, count in enumerate(UNEVEN):
        for i in range(count):
            producer.produce(topic, value=b"v-%d" % i, key=b"k-%d" % i, partition=partition)
    assert producer.flush(30) == 0


def committer(spark: Any) -> GroupCommitter:
    found = group_committer(spark)
    assert found is not None, "streamscale.spark.session() registers the group committer"
    return found


def connector(spark: Any, settings: Settings, topic: str, **options: str) -> Any:
    """A source as in Spark's Kafka guide."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .options(**options)
        .load()
    )


def start(df: Any, name: str, checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def run_available_now(df: Any, name: str, checkpoint: Path) -> Any:
    query = start(df, name, checkpoint, availableNow=True)
    assert query.awaitTermination(300)
    assert query.exception() is None
    return query


def assert_caught_up(settings: Settings, group: str, topic: str) -> None:
    rows = describe_group(settings.bootstrap_servers, group)
    assert sorted(rows) == [0, 1, 2]
    for p, row in rows.items():
        assert row.topic == topic
        assert row.log_end == UNEVEN[p]
        assert row.current == row.log_end
        assert row.lag == 0


def test_connector_query_shows_its_true_lag_then_zero(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="gc-conn")
    produce_uneven(settings, topic)
    name = f"orders_{uuid.uuid4().hex[:8]}"
    df = connector(spark, settings, topic)

    # Behind: one batch of at most 10 records, then the next trigger would be an hour away.
    query = start(df, name, checkpoint, processingTime="1 hour")
    deadline = time.monotonic() + 120
    while query.lastProgress is None and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    assert query.lastProgress is not None and query.lastProgress.batchId == 0
    assert committer(spark).wait_for(query, timeout_s=60)
    processed = query.lastProgress.sources[0].endOffset
    ends = {int(p): off for p, off in json.loads(processed)[topic].items()}
    assert 0 < sum(ends.values()) <= 10 < sum(UNEVEN)  # maxOffsetsPerTrigger, rounded down
    rows = describe_group(settings.bootstrap_servers, f"streamscale-{name}")
    assert {p: (r.current, r.log_end, r.lag) for p, r in rows.items()} == {
        p: (ends[p], UNEVEN[p], UNEVEN[p] - ends[p]) for p in range(3)
    }

    # Caught up: the same query resumes from its checkpoint until the end offsets of now.
    query = run_available_now(df, name, checkpoint)
    assert query.lastProgress.batchId >= 6  # 67 records, at most 10 a batch
    assert committer(spark).wait_for(query, timeout_s=60)
    assert_caught_up(settings, f"streamscale-{name}", topic)


def test_connector_kafka_group_id_is_the_group(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="gc-gid")
    produce_uneven(settings, topic)
    name = f"billing_{uuid.uuid4().hex[:8]}"
    group = f"billing-team-{uuid.uuid4().hex[:8]}"
    df = connector(spark, settings, topic, **{"kafka.group.id": group})
    query = run_available_now(df, name, checkpoint)
    assert committer(spark).wait_for(query, timeout_s=60)
    assert_caught_up(settings, group, topic)
    assert f"streamscale-{name}" not in list_groups(settings.bootstrap_servers)


def test_streamscale_source_query_is_committed_too(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=3, prefix="gc-py")
    produce_uneven(settings, topic)
    name = f"ledger_{uuid.uuid4().hex[:8]}"
    df = (
        spark.readStream.format("streamscale-kafka")
        .options(**settings.source_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .option("groupIdPrefix", "app")
        .load()
    )
    query = run_available_now(df, name, checkpoint)
    assert committer(spark).wait_for(query, timeout_s=60)
    assert_caught_up(settings, f"app-{name}", topic)


def test_a_failing_kafka_tool_raises_with_its_output(broker: embedded.Broker) -> None:
    with pytest.raises(embedded.BrokerError, match="bootstrap-server"):
        embedded.run_tool(embedded.CONSUMER_GROUPS_TOOL, ["--describe", "--group", "g"])


def test_each_source_of_a_query_commits_to_its_own_group(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """A query reading one topic with Spark's connector and another with ``streamscale-kafka``:
    the options of both are read from the JVM, and each source's group is committed."""
    first = topic_factory(partitions=3, prefix="gc-two-a")
    second = topic_factory(partitions=3, prefix="gc-two-b")
    produce_uneven(settings, first)
    produce_uneven(settings, second)
    name = f"both_{uuid.uuid4().hex[:8]}"
    group = f"team-{uuid.uuid4().hex[:8]}"
    ours = (
        spark.readStream.format("streamscale-kafka")
        .options(**settings.source_options())
        .option("subscribe", second)
        .option("startingOffsets", "earliest")
        .option("groupIdPrefix", "ours")
        .load()
    )
    df = connector(spark, settings, first, **{"kafka.group.id": group}).unionByName(ours)
    query = run_available_now(df, name, checkpoint)
    assert committer(spark).wait_for(query, timeout_s=60)

    found = jvm_source_options(query._jsq.streamingQuery())
    assert [d for d, _ in found] == [s.description for s in query.lastProgress.sources]
    assert [
        (o.get("subscribe"), o.get("kafka.group.id"), o.get("groupIdPrefix")) for _, o in found
    ] == [
        (first, group, None),
        (second, None, "ours"),
    ]
    assert_caught_up(settings, group, first)
    assert_caught_up(settings, f"ours-{name}", second)
