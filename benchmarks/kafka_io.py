"""Kafka in and out of PySpark, side by side in one run, on the embedded broker.

    .venv/bin/python benchmarks/kafka_io.py [--records 1000000] [--batch 250000]

Prints records/s of (a) a plain confluent-kafka consume loop with librdkafka's defaults and
(a') the same loop with the reader's fetch setting (the machine's real ceiling),
(b) the streamscale source into Spark's noop sink, (c) the source into the streamscale Kafka
sink. (b) and (c) are "steady": batches after the first (which pays for Python worker start).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

import cpu_use
from streamscale.kafka import broker as embedded
from streamscale.kafka.client import producer_config
from streamscale.settings import Settings
from streamscale.spark import session

PARTITIONS = 4


def create(settings: Settings, *topics: str) -> None:
    admin = AdminClient(settings.kafka_config())
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(timeout=15)


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
    conf = {**settings.kafka_config(), "group.id": "bench-plain", "enable.auto.commit": False}
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


def spark_run(spark: Any, settings: Settings, topic: str, batch: int, sink: str | None) -> Any:
    df = (
        spark.readStream.format("streamscale-kafka")
        .options(**settings.source_options())
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
            .writeStream.format("streamscale-kafka")
            .options(**settings.source_options())
            .option("topic", sink)
        )
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    return query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument(
        "--master", default="local[4]", help="Spark master: 2 task slots per core by default"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, embedded.embedded_broker(Path(tmp)) as running:
        settings = Settings(bootstrap_servers=running.bootstrap)
        create(settings, "bench-in", "bench-out")
        produce_rate = fill(settings, "bench-in", args.records)
        plain = plain_consume(settings, "bench-in", args.records, tuned=False)
        tuned = plain_consume(settings, "bench-in", args.records, tuned=True)
        spark = session(Settings(spark_master=args.master, shuffle_partitions=2))
        cpu = cpu_use.BatchCpu(spark)
        noop, noop_batches = steady_rate(spark_run(spark, settings, "bench-in", args.batch, None))
        noop_cpu = cpu.steady()
        cpu = cpu_use.BatchCpu(spark)
        kafka, kafka_batches = steady_rate(
            spark_run(spark, settings, "bench-in", args.batch, "bench-out")
        )
        kafka_cpu = cpu.steady()
        spark.stop()

    print(f"records: {args.records:,} of ~100 bytes on {PARTITIONS} partitions")
    print(f"(fill: produced at {produce_rate:,.0f} records/s; Spark master {args.master})")
    rows = [
        ("(a) plain confluent-kafka consume", plain, "librdkafka defaults"),
        ("(a') same loop, fetch.queue.backoff.ms=10", tuned, "the machine's ceiling"),
        ("(b) source -> noop sink (steady)", noop, f"{noop_batches} batches"),
        ("(c) source -> Kafka sink (steady)", kafka, f"{kafka_batches} batches"),
    ]
    header = ("path", "records/s", "vs (a)", "vs (a')")
    print(f"{header[0]:<44}{header[1]:>12}{header[2]:>9}{header[3]:>9}")
    for name, rate, note in rows:
        print(f"{name:<44}{rate:>12,.0f}{rate / plain:>9.2f}{rate / tuned:>9.2f}  {note}")
    print(f"(b) {noop_cpu}")
    print(f"(c) {kafka_cpu}")


if __name__ == "__main__":
    main()
