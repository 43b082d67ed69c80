"""Helpers of the differential tests: run one read with Spark's Kafka connector and with the
project's ``streamscale-kafka`` source under the same options, recording every micro-batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from streamscale.kafka.client import producer_config
from streamscale.settings import KafkaSource, Settings

SPARK: KafkaSource = "kafka"
OURS: KafkaSource = "streamscale-kafka"

Header = tuple[str, bytes | None]
# topic, partition, offset, key, value, timestamp, timestampType, headers (None without them)
Row = tuple[str, int, int, bytes | None, bytes | None, datetime, int, tuple[Header, ...] | None]
# what one Spark task read: topic, partition, first offset, last offset, record count
Task = tuple[str, int, int, int, int]
# one record to produce: partition, key, value, headers
Out = tuple[int, bytes | None, bytes | None, Sequence[Header] | None]

QUERY_TIMEOUT_S = 120


@dataclass
class Run:
    """What one query delivered: rows and tasks per batch id, and how it ended."""

    source: KafkaSource
    batches: dict[int, list[Row]] = field(default_factory=dict)
    tasks: dict[int, list[Task]] = field(default_factory=dict)
    error: str | None = None

    def ranges(self) -> dict[int, dict[tuple[str, int], tuple[int, int, int]]]:
        """Per batch id, per topic-partition: (first offset, last offset, count) read."""
        out: dict[int, dict[tuple[str, int], tuple[int, int, int]]] = {}
        for batch_id, rows in sorted(self.batches.items()):
            parts: dict[tuple[str, int], list[int]] = {}
            for row in rows:
                parts.setdefault((row[0], row[1]), []).append(row[2])
            out[batch_id] = {tp: (min(o), max(o), len(o)) for tp, o in sorted(parts.items())}
        return out

    def rows(self) -> list[Row]:
        return [row for _, rows in sorted(self.batches.items()) for row in rows]


def records(counts: Mapping[int, int], tag: str = "r") -> list[Out]:
    """``counts[p]`` records for each partition ``p``; every seventh key is null."""
    return [
        (p, None if i % 7 == 3 else b"k-%d" % i, f"{tag}-{p}-{i}".encode(), None)
        for p, n in sorted(counts.items())
        for i in range(n)
    ]


def produce(
    settings: Settings, topic: str, outs: Iterable[Out], timestamp_ms: int | None = None
) -> dict[int, int]:
    """Produce ``outs`` (acks=all, idempotent, order kept per partition; with
    ``timestamp_ms``, that CreateTime on each) and return the number acknowledged per
    partition."""
    acked: dict[int, int] = {}
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()] = acked.get(msg.partition(), 0) + 1

    producer = Producer(producer_config(settings.kafka_config(), on_delivery=report))
    for partition, key, value, headers in outs:
        kwargs: dict[str, Any] = {"partition": partition}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        if headers is not None:
            kwargs["headers"] = list(headers)
        producer.produce(topic, value=value, key=key, **kwargs)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return acked


def delete_records(settings: Settings, topic: str, before: Mapping[int, int]) -> None:
    """Delete the records of ``topic`` below ``before[p]`` in each partition ``p`` (the log
    start offset moves there, as retention would move it)."""
    admin = AdminClient(settings.kafka_config())
    futures = admin.delete_records([CTP(topic, p, off) for p, off in before.items()])
    for future in futures.values():
        future.result(timeout=30)


def _row(r: Any, headers: bool) -> Row:
    hs = None
    if headers:
        hs = (
            None
            if r.headers is None
            else tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
        )
    key = None if r.key is None else bytes(r.key)
    value = None if r.value is None else bytes(r.value)
    return (r.topic, r.partition, r.offset, key, value, r.timestamp, r.timestampType, hs)


@dataclass
class Started:
    """A running query and the run it fills."""

    query: Any
    result: Run


def start(
    spark: Any,
    settings: Settings,
    source: KafkaSource,
    options: Mapping[str, str],
    checkpoint: Path,
    *,
    on_batch: Callable[[int], None] | None = None,
    into: Run | None = None,
) -> Started:
    """Start one ``Trigger.AvailableNow`` query of ``source`` with ``options`` into
    ``foreachBatch``, recording each batch (``into``: a restart appends to that run)."""
    from pyspark.sql.functions import spark_partition_id

    result = into if into is not None else Run(source)
    headers = str(options.get("includeHeaders", "false")).lower() == "true"
    df = (
        spark.readStream.format(source)
        .options(**settings.reader_options(source))
        .options(**options)
        .load()
        .withColumn("task", spark_partition_id())
    )

    def collect(batch: Any, batch_id: int) -> None:
        rows = batch.collect()
        result.batches[batch_id] = sorted(_row(r, headers) for r in rows)
        tasks: dict[tuple[int, str, int], list[int]] = {}
        for r in rows:
            tasks.setdefault((r.task, r.topic, r.partition), []).append(r.offset)
        result.tasks[batch_id] = sorted(
            (t, p, min(o), max(o), len(o)) for (_, t, p), o in tasks.items()
        )
        if on_batch is not None:
            on_batch(batch_id)

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    return Started(query, result)


def finish(started: Started) -> Run:
    """Wait for the query to end; a failure is not raised but kept as ``Run.error``."""
    from pyspark.errors import StreamingQueryException

    query, result = started.query, started.result
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), f"{result.source} query still running"
    except StreamingQueryException as exc:
        result.error = str(exc)
    finally:
        if query.isActive:
            query.stop()
    return result


def run_both(
    spark: Any,
    settings: Settings,
    options: Mapping[str, str],
    checkpoints: Path,
    runs: dict[KafkaSource, Run] | None = None,
) -> dict[KafkaSource, Run]:
    """Run the read with Spark's connector and with ours at the same time (checkpoints
    ``checkpoints/<source>``); with ``runs``, as a restart appending to them."""
    started = [
        start(
            spark,
            settings,
            source,
            options,
            checkpoints / source,
            into=None if runs is None else runs[source],
        )
        for source in (SPARK, OURS)
    ]
    done = [finish(s) for s in started]
    return {r.source: r for r in done}


def both(
    spark: Any, settings: Settings, options: Mapping[str, str], checkpoints: Path
) -> tuple[Run, Run]:
    """:func:`run_both` once: (Spark's run, ours)."""
    runs = run_both(spark, settings, options, checkpoints)
    return runs[SPARK], runs[OURS]


def assert_same(theirs: Run, ours: Run) -> None:
    """Same batch ids, same offset ranges per batch and partition, same rows, and the same
    ranges read by each Spark task."""
    assert theirs.error is None, theirs.error
    assert ours.error is None, ours.error
    assert ours.ranges() == theirs.ranges()
    assert ours.batches == theirs.batches
    assert ours.tasks == theirs.tasks


def assert_both_fail(theirs: Run, ours: Run, *fragments: str) -> None:
    """Both queries failed, each message naming every one of ``fragments``, after delivering
    the same batches."""
    for r in (theirs, ours):
        assert r.error is not None, f"{r.source} did not fail"
        for fragment in fragments:
            assert fragment in r.error, f"{r.source}: {fragment!r} not in {r.error[:2000]}"
    assert ours.batches == theirs.batches


def renamed(r: Run, topic: str) -> Run:
    """``r`` with every row's topic replaced by ``topic`` (to compare reads of twin topics)."""
    out = Run(r.source, error=r.error)
    out.batches = {b: [(topic, *row[1:]) for row in rows] for b, rows in r.batches.items()}
    out.tasks = {b: [(topic, *t[1:]) for t in ts] for b, ts in r.tasks.items()}
    return out
