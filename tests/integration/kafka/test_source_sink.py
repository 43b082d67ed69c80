"""The ``streamscale-kafka`` source and sink against the embedded broker and Spark local."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.client import producer_config
from streamscale.kafka.commits import group_committer
from streamscale.kafka.offsets import TopicPartition
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

Record = tuple[bytes | None, bytes, int, int]  # key, value, partition, offset


def produce(settings: Settings, topic: str, count: int, start: int = 0) -> list[Record]:
    """Produce ``count`` keyed records; return them as acknowledged (with partition, offset)."""
    acked: list[Record] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.key(), msg.value(), msg.partition(), msg.offset()))

    producer = Producer(producer_config(settings.kafka_config(), on_delivery=report))
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=b"value-%d" % i, key=b"key-%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    assert len(acked) == count
    return acked


def consume_all(settings: Settings, topic: str, partitions: int) -> list[Record]:
    """Every record of ``topic``, read to the true end offsets."""
    admin = KafkaAdmin(settings.kafka_config())
    try:
        messages = admin.read_all(topic, partitions)
    finally:
        admin.close()
    return [(m.key(), m.value(), m.partition(), m.offset()) for m in messages]


def reader(spark: Any, settings: Settings, **options: str) -> Any:
    return (
        spark.readStream.format("streamscale-kafka")
        .options(**settings.source_options())
        .options(**options)
        .load()
    )


def run_to_memory(df: Any, name: str, checkpoint: Path, **trigger: Any) -> tuple[list[Any], Any]:
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    query.awaitTermination(300)
    rows = df.sparkSession.sql(f"select * from {name}").collect()
    return rows, query


def test_round_trip_200k_records_keeps_key_value_partition_offset(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    source = topic_factory(partitions=4, prefix="rt-in")
    sink = topic_factory(partitions=4, prefix="rt-out")
    produced = produce(settings, source, 200_000)

    query = (
        reader(spark, settings, subscribe=source, startingOffsets="earliest")
        .selectExpr("key", "value", "partition")
        .writeStream.format("streamscale-kafka")
        .options(**settings.source_options())
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None

    # One task per Kafka partition writes in offset order: the copy is offset for offset.
    assert sorted(consume_all(settings, sink, 4), key=lambda r: (r[2], r[3])) == sorted(
        produced, key=lambda r: (r[2], r[3])
    )


def test_source_rows_have_spark_kafka_schema_and_values(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=2)
    produced = produce(settings, topic, 1000)
    df = reader(spark, settings, subscribe=topic, startingOffsets="earliest")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]  # fmt: skip
    rows, _ = run_to_memory(df, "schema_check", checkpoint)
    assert sorted((bytes(r.key), bytes(r.value), r.partition, r.offset) for r in rows) == sorted(
        produced
    )
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    assert all(r.timestamp.year >= 2024 for r in rows)


def test_headers_are_read_with_include_headers(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=1)
    producer = Producer(producer_config(settings.kafka_config()))
    producer.produce(topic, value=b"v", key=b"k", headers=[("h1", b"a"), ("h2", b"b")])
    producer.produce(topic, value=b"w", key=None)
    assert producer.flush(10) == 0
    df = reader(spark, settings, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    rows, _ = run_to_memory(df, "headers_check", checkpoint)
    by_value = {bytes(r.value): r for r in rows}
    assert [(h.key, bytes(h.value)) for h in by_value[b"v"].headers] == [("h1", b"a"), ("h2", b"b")]
    assert by_value[b"w"].key is None
    assert not by_value[b"w"].headers


def test_starting_offsets_earliest_latest_and_json(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    first = produce(settings, topic, 100)
    ends = {p: max(r[3] for r in first if r[2] == p) + 1 for p in (0, 1)}

    rows, _ = run_to_memory(
        reader(spark, settings, subscribe=topic, startingOffsets="earliest"), "so_e", tmp_path / "e"
    )
    assert len(rows) == 100

    specific = json.dumps({topic: {"0": 10, "1": -2}})
    rows, _ = run_to_memory(
        reader(spark, settings, subscribe=topic, startingOffsets=specific), "so_j", tmp_path / "j"
    )
    assert len(rows) == 100 - 10
    assert min(r.offset for r in rows if r.partition == 0) == 10

    latest_json = json.dumps({topic: {"0": -1, "1": ends[1] - 5}})
    rows, _ = run_to_memory(
        reader(spark, settings, subscribe=topic, startingOffsets=latest_json),
        "so_jl",
        tmp_path / "jl",
    )
    assert sorted((r.partition, r.offset) for r in rows) == [(1, ends[1] - 5 + i) for i in range(5)]

    # latest: the query starts at the end; only what comes after is read.
    df = reader(spark, settings, subscribe=topic, startingOffsets="latest")
    query = (
        df.writeStream.format("memory")
        .queryName("so_l")
        .option("checkpointLocation", str(tmp_path / "l"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        later = produce(settings, topic, 30, start=1000)
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql("select * from so_l").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(r[1] for r in later)


def test_max_offsets_per_trigger_is_respected_in_every_batch(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory(partitions=4)
    produce(settings, topic, 10_000)
    df = reader(
        spark, settings, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="3000"
    )
    rows, query = run_to_memory(df, "mopt", checkpoint)
    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    # Spark's connector rounds each partition's share down: a batch may take a few less
    assert len(sizes) >= 4 and all(n <= 3000 for n in sizes) and sum(sizes) == 10_000
    assert len({(r.partition, r.offset) for r in rows}) == 10_000


def test_min_partitions_splits_ranges_and_reads_every_record_once(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    from pyspark.sql import functions as F

    topic = topic_factory(partitions=2)
    produce(settings, topic, 5_000)
    df = reader(spark, settings, subscribe=topic, startingOffsets="earliest", minPartitions="6")
    rows, _ = run_to_memory(df.withColumn("task", F.spark_partition_id()), "minp", checkpoint)
    assert len({r.task for r in rows}) >= 6
    keys = Counter((r.partition, r.offset) for r in rows)
    assert len(keys) == 5_000
    assert set(keys.values()) == {1}


def test_co_partitioned_read_puts_one_partition_number_of_every_topic_in_one_task(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    """Records with the same key in two co-partitioned topics meet in one task (as in a Kafka
    Streams join task); with minPartitions each partition's ranges are cut into aligned
    pieces; every record is read once."""
    from pyspark.sql import functions as F

    left, right = topic_factory(partitions=3), topic_factory(partitions=3)
    produce(settings, left, 3_000)
    produce(settings, right, 3_000)
    for min_partitions, label in ((None, "copart"), ("6", "copart6")):
        options = {"subscribe": f"{left},{right}", "startingOffsets": "earliest"}
        if min_partitions:
            options["minPartitions"] = min_partitions
        df = reader(spark, settings, coPartitioned="true", **options)
        rows, _ = run_to_memory(
            df.withColumn("task", F.spark_partition_id()), label, checkpoint / label
        )
        assert Counter((r.topic, r.partition, r.offset) for r in rows).most_common(1)[0][1] == 1
        assert len(rows) == 6_000
        partitions_per_task: dict[int, set[int]] = {}
        tasks_per_key: dict[bytes, set[int]] = {}
        for r in rows:
            partitions_per_task.setdefault(r.task, set()).add(r.partition)
            tasks_per_key.setdefault(bytes(r.key), set()).add(r.task)
        assert all(len(p) == 1 for p in partitions_per_task.values())
        assert len(partitions_per_task) == (3 if min_partitions is None else 6)
        if min_partitions is None:
            assert all(len(t) == 1 for t in tasks_per_key.values())


def test_co_partitioned_topics_need_equal_partition_counts(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    left, right = topic_factory(partitions=2), topic_factory(partitions=3)
    df = reader(spark, settings, subscribe=f"{left},{right}", coPartitioned="true")
    message = start_and_fail(df, checkpoint)
    assert "coPartitioned needs topics with the same number of partitions" in message


def test_new_partitions_of_a_pattern_are_picked_up(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    prefix = f"pat{time.monotonic_ns() % 10**8}"
    first = topic_factory(partitions=1, prefix=prefix)
    produce(settings, first, 10)
    df = reader(spark, settings, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    query = (
        df.writeStream.format("memory")
        .queryName("pattern")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        second = topic_factory(partitions=2, prefix=prefix)
        produce(settings, second, 20)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            query.processAllAvailable()
            if spark.sql("select count(*) c from pattern").collect()[0].c >= 30:
                break
            time.sleep(0.5)
    finally:
        query.stop()
    rows = spark.sql("select topic, count(*) c from pattern group by topic").collect()
    assert {r.topic: r.c for r in rows} == {first: 10, second: 20}


def test_restart_from_checkpoint_loses_nothing_and_group_matches_checkpoint(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    source = topic_factory(partitions=4, prefix="rs-in")
    sink = topic_factory(partitions=4, prefix="rs-out")
    produced = produce(settings, source, 20_000)

    def start(trigger: dict[str, Any]) -> Any:
        return (
            reader(
                spark,
                settings,
                subscribe=source,
                startingOffsets="earliest",
                maxOffsetsPerTrigger="2000",
                queryName="restart-test",
            )
            .selectExpr("key", "value")
            .writeStream.format("streamscale-kafka")
            .options(**settings.source_options())
            .option("topic", sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "200 milliseconds"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
        query.lastProgress is None or query.lastProgress.batchId < 2
    ):
        time.sleep(0.2)
    query.stop()  # mid-stream
    assert (query.lastProgress.batchId if query.lastProgress else 0) < 9

    query = start({"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None

    out = Counter(r[1] for r in consume_all(settings, sink, 4))
    assert set(out) == {r[1] for r in produced}
    duplicates = sum(c - 1 for c in out.values())
    assert duplicates <= 2000  # at most one micro-batch replayed

    # The consumer group mirrors the checkpoint's last committed offsets.
    committer = group_committer(spark)
    assert committer is not None and committer.wait_for(query, timeout_s=60)
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    offsets_file = (checkpoint / "offsets" / str(commits[-1])).read_text().splitlines()
    checkpointed = json.loads(offsets_file[2])[source]
    admin = KafkaAdmin(settings.kafka_config())
    committed = admin.committed(
        "streamscale-restart-test", [TopicPartition(source, p) for p in range(4)]
    )
    admin.close()
    assert {str(tp.partition): off for tp, off in committed.items()} == checkpointed
    assert sum(checkpointed.values()) == 20_000


# errors a user gets ---------------------------------------------------------------------------


def start_and_fail(df: Any, checkpoint: Path) -> str:
    """Start a query that should fail; return the error text."""
    try:
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        error = query.exception()
        assert error is not None, "the query should have failed"
        return str(error)
    except Exception as exc:
        return str(exc)


def test_unreachable_broker_fails_in_one_line_naming_servers(spark: Any, checkpoint: Path) -> None:
    dead = Settings(bootstrap_servers="127.0.0.1:1")
    message = start_and_fail(reader(spark, dead, subscribe="anything"), checkpoint)
    assert "cannot reach Kafka at 127.0.0.1:1" in message


def test_missing_topic_is_a_clear_error(spark: Any, settings: Settings, checkpoint: Path) -> None:
    message = start_and_fail(reader(spark, settings, subscribe="no-such-topic"), checkpoint)
    assert "subscribed topic(s) no-such-topic do not exist" in message


def test_subscribe_with_assign_is_rejected_at_start(
    spark: Any, settings: Settings, topic_factory: Any, checkpoint: Path
) -> None:
    topic = topic_factory()
    df = reader(spark, settings, subscribe=topic, assign=json.dumps({topic: [0]}))
    message = start_and_fail(df, checkpoint)
    assert "exactly one of subscribe, subscribePattern or assign" in message


def test_out_of_range_offsets_fail_or_skip_by_fail_on_data_loss(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    produce(settings, topic, 50)
    beyond = json.dumps({topic: {"0": 500}})
    message = start_and_fail(
        reader(spark, settings, subscribe=topic, startingOffsets=beyond), tmp_path / "fail"
    )
    assert f"offset out of range on topic {topic} partition 0" in message
    assert "offset 500 is beyond the end offset 50" in message

    df = reader(spark, settings, subscribe=topic, startingOffsets=beyond, failOnDataLoss="false")
    query = (
        df.writeStream.format("memory")
        .queryName("oor_skip")
        .option("checkpointLocation", str(tmp_path / "skip"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        produce(settings, topic, 7, start=100)
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql("select offset from oor_skip").collect()
    assert sorted(r.offset for r in rows) == list(range(50, 57))
