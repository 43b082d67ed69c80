"""Kafka in and out of PySpark, side by side in one run, on the embedded Apache Kafka broker.

    .venv/bin/python benchmarks/kafka_io.py [--records 1000000] [--batch 250000] [--runs 3]
        [--secure]

Prints records/s, the median of ``--runs`` runs, of:
(a) a plain confluent-kafka consume loop with librdkafka's defaults, and (a') the same loop
with the reader's fetch setting (the machine's real ceiling for one Python process);
(b) Spark's connector (``format("kafka")``) into Spark's noop sink, (b') the project's
``streamscale-kafka`` source into the noop sink;
(c) Spark's connector into Spark's Kafka sink, (c') the project's source into its sink.
Spark paths are "steady": the batches after the first (which pays for start-up), with the
CPU each process class of this run (Spark JVM, Python workers, the broker, this process;
not other work on the machine) spent per record over those batches.
``--secure``: the same on a secured broker (SASL_SSL, SCRAM-SHA-512, ACLs; as its admin).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

import cpu_use
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin, TopicSpec
from streamscale.kafka.client import producer_config
from streamscale.settings import KafkaSource, Settings
from streamscale.spark import session
from streamscale.spark import stop as stop_session

PARTITIONS = 4
CONNECTOR: KafkaSource = "kafka"
PROJECT: KafkaSource = "streamscale-kafka"


def create(settings: Settings, *topics: str) -> None:
    admin = KafkaAdmin(settings.kafka_config())
    admin.apply([TopicSpec(t, PARTITIONS) for t in topics])
    admin.close()


def fill(settings: Settings, topic: str, records: int) -> float:
    producer = Producer(producer_config(settings.kafka_config(), **{"linger.ms": 50}))
    payload = b"x" * 90
    began = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, b"k%08d" % i)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0
    return records / (time.perf_counter() - began)


def plain_consume(settings: Settings, topic: str, records: int, tuned: bool) -> float:
    """One consumer, all partitions, touching what the source touches.

    Untuned, librdkafka's defaults: a partition whose local queue is full stops fetching for
    ``fetch.queue.backoff.ms`` (1 s), which caps a fast Python loop near 200k records/s.
    Tuned, the reader's own setting (10 ms): the machine's real ceiling.
    """
    conf = {
        **settings.kafka_config(),
        "group.id": f"bench-plain-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
    }
    if tuned:
        conf["fetch.queue.backoff.ms"] = 10
    consumer = Consumer(conf)
    consumer.assign([CTP(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    began = time.perf_counter()
    while seen < records:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                msg.key(), msg.value(), msg.offset(), msg.timestamp()
                seen += 1
    elapsed = time.perf_counter() - began
    consumer.close()
    return seen / elapsed


def steady_rate(query: Any) -> tuple[float, int]:
    """Records/s over the batches after the first one, and the batch count."""
    progress = [p for p in query.recentProgress if p.numInputRows]
    steady = progress[1:] or progress
    rows = sum(p.numInputRows for p in steady)
    seconds = sum(p.durationMs["triggerExecution"] for p in steady) / 1000
    return rows / seconds, len(progress)


def spark_run(
    spark: Any, settings: Settings, source: KafkaSource, topic: str, batch: int, sink: str | None
) -> Any:
    """``source`` (``kafka`` or ``streamscale-kafka``) → noop, or → the same format's sink."""
    options = settings.reader_options(source)
    df = (
        spark.readStream.format(source)
        .options(**options)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch))
        .load()
    )
    checkpoint = tempfile.mkdtemp(prefix="bench-ckpt-")
    if sink is None:
        writer = df.writeStream.format("noop")
    else:
        writer = (
            df.selectExpr("key", "value")
            .writeStream.format(source)
            .options(**options)
            .option("topic", sink)
        )
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    return query


def median_of(
    runs: int, measure: Callable[[], tuple[float, str]]
) -> tuple[float, list[float], str]:
    """The median rate of ``runs`` measurements, all rates, and the last note."""
    rates = []
    note = ""
    for _ in range(runs):
        rate, note = measure()
        rates.append(rate)
    return statistics.median(rates), rates, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--runs", type=int, default=3, help="runs per path (median shown)")
    parser.add_argument(
        "--master", default="local[4]", help="Spark master: 2 task slots per core by default"
    )
    parser.add_argument("--secure", action="store_true", help="a SASL_SSL broker with ACLs")
    args = parser.parse_args()

    rows: list[tuple[str, float, list[float], str]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        embedded.embedded_broker(Path(tmp), secure=args.secure) as running,
    ):
        settings = running.client_settings("admin")
        create(settings, "bench-in")
        produce_rate = fill(settings, "bench-in", args.records)

        def plain(tuned: bool) -> Callable[[], tuple[float, str]]:
            return lambda: (plain_consume(settings, "bench-in", args.records, tuned), "")

        rows.append(("(a) plain confluent-kafka consume", *median_of(args.runs, plain(False))))
        rows.append(
            ("(a') same loop, fetch.queue.backoff.ms=10", *median_of(args.runs, plain(True)))
        )
        spark = session(Settings(spark_master=args.master, shuffle_partitions=2))

        def through_spark(source: KafkaSource, to_kafka: bool) -> Callable[[], tuple[float, str]]:
            def measure() -> tuple[float, str]:
                sink = None
                if to_kafka:
                    sink = f"bench-out-{uuid.uuid4().hex[:6]}"
                    create(settings, sink)
                # This run's processes only (the machine is shared): the Spark JVM, its
                # Python workers, the embedded broker and this process.
                cpu = cpu_use.BatchCpu(spark, root=os.getpid())
                query = spark_run(spark, settings, source, "bench-in", args.batch, sink)
                rate, batches = steady_rate(query)
                return rate, f"{batches} batches; {cpu.steady()}"

            return measure

        paths = [
            ("(b) Spark's connector -> noop", CONNECTOR, False),
            ("(b') streamscale-kafka -> noop", PROJECT, False),
            ("(c) Spark's connector -> Spark's Kafka sink", CONNECTOR, True),
            ("(c') streamscale-kafka -> its sink", PROJECT, True),
        ]
        for name, source, to_kafka in paths:
            rows.append((name, *median_of(args.runs, through_spark(source, to_kafka))))
        stop_session(spark)

    kind = "SASL_SSL (SCRAM-SHA-512, ACLs)" if args.secure else "PLAINTEXT"
    print(f"records: {args.records:,} of ~100 bytes on {PARTITIONS} partitions, Kafka {kind}")
    print(f"(fill: produced at {produce_rate:,.0f} records/s; Spark master {args.master})")
    plain_rate, tuned_rate = rows[0][1], rows[1][1]
    header = ("path", "median/s", "vs (a)", "vs (a')", "runs")
    print(f"{header[0]:<46}{header[1]:>11}{header[2]:>8}{header[3]:>8}  {header[4]}")
    for name, rate, rates, _ in rows:
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"{name:<46}{rate:>11,.0f}{rate / plain_rate:>8.2f}{rate / tuned_rate:>8.2f}  {runs}")
    for name, _, _, note in rows[2:]:
        print(f"{name.split(')')[0]}) {note}")


if __name__ == "__main__":
    main()
