"""``streamscale.attach`` on a plain user-style PySpark query (``format("kafka")``, not the
project's runner) on a real local standalone cluster: a backlog → scale-out → drained →
scale-in, and the query's offsets in its consumer group.

The scenario runs in a child Python process (a process holds one SparkContext; the session
fixture ``spark`` is local mode). Run directly, it prints its measurements as JSON:

    .venv/bin/python tests/integration/autoscale/test_attach.py BOOTSTRAP TOPIC [DATA_DIR]
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from child_run import run_child

from streamscale import cluster

pytestmark = pytest.mark.integration

TIMEOUT_S = 420  # about 2 min on an idle 2-core machine
BACKLOG = 90_000
PARTITIONS = 4
BATCH = 4_000
WORK_S_PER_RECORD = 0.0005
"""Simulated work (a sleep, not CPU: the machine has 2 cores): 2,000 records/s an executor."""


def _work(values: pd.Series) -> pd.Series:
    """The user's per-record work, as a pandas UDF's body."""
    time.sleep(len(values) * WORK_S_PER_RECORD)
    return values.str.len()


def _fill(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(records):
        for _ in range(100):  # a full local queue drains as the broker acknowledges
            try:
                producer.produce(
                    topic, key=str(i).encode(), value=b"x" * 100, partition=i % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.1)
        else:
            raise RuntimeError("the producer's queue stayed full for 10 s")
        producer.poll(0)
    assert producer.flush(30) == 0


def scenario(bootstrap: str, topic: str, data_dir: Path) -> dict[str, Any]:
    """A data engineer's query, then ``streamscale.attach``; returns what happened."""
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, pandas_udf

    import streamscale
    from streamscale import jars
    from streamscale.settings import Settings

    os.environ["PYSPARK_PYTHON"] = sys.executable
    out: dict[str, Any] = {}
    with cluster.local_cluster(data_dir / "cluster", workers=1, cores=2, memory="2g") as local:
        builder = SparkSession.builder.appName("user-job")
        conf = {
            **local.app_conf(2, executor_memory="512m"),
            "spark.jars": ",".join(str(p) for p in jars.jars(jars.CONNECTOR)),
            # The executors' Python is this venv's (it has pandas), as in a user's spark-env.
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.sql.shuffle.partitions": "2",
            # As the README advises for an autoscaled session (attach warns otherwise).
            "spark.locality.wait": "0s",
            "spark.sql.warehouse.dir": str(data_dir / "warehouse"),
        }
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        scaler = None
        try:
            work = pandas_udf(_work, "long")  # type: ignore[call-overload]
            _fill(bootstrap, topic, BACKLOG)
            scaler = streamscale.attach(
                spark,
                min_executors=1,
                max_executors=2,
                metrics_port=0,
                interval_s=2.0,
                stabilization_window_s=10.0,
                decision_log=data_dir / "decisions.jsonl",
                # The trigger (1 s) and batch limit (BATCH) are read from the query itself.
                settings=Settings(bootstrap_servers=bootstrap),
            )
            out["metrics_url"] = scaler.metrics_url
            query = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", BATCH)
                .load()
                .select(work(col("value").cast("string")).alias("n"))
                .writeStream.format("noop")
                .queryName("user_query")
                .option("checkpointLocation", str(data_dir / "checkpoint"))
                .trigger(processingTime="1 second")
                .start()
            )
            began = time.time()
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if not query.isActive:
                    raise RuntimeError(f"the query stopped: {query.exception()}")
                applied = [d for d in scaler.decisions if d.outcome == "applied"]
                if [d.direction for d in applied][-2:] == ["up", "down"]:
                    break
                time.sleep(1)
            out["metrics"] = _scrape(scaler.metrics_url)
            limits = scaler.controller.limits
            read = limits("user_query") if limits is not None else None
            out["limits"] = None if read is None else dataclasses.asdict(read)
            query.stop()
            out["decisions"] = [
                {
                    "t": round(d.time - began, 1),
                    "query": d.query,
                    "direction": d.direction,
                    "outcome": d.outcome,
                    "reason": d.reason,
                    "lag": d.total_lag,
                    "running": d.running,
                    "desired": d.desired,
                }
                for d in scaler.decisions
            ]
            out["running_at_end"] = scaler.controller.actuator.running()
        finally:
            if scaler is not None:
                scaler.stop()
            spark.stop()
    return out


def _scrape(url: str | None) -> dict[str, float]:
    import urllib.request

    assert url is not None
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith(("streamscale_executors{", "streamscale_records_lag{")):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def test_attach_scales_a_user_query_out_on_a_backlog_and_in_after_it(
    tmp_path: Path,
    topic_factory: Callable[..., str],
    settings: Any,
) -> None:
    topic = topic_factory(partitions=PARTITIONS, prefix="attach")
    data_dir = tmp_path / "run"
    result = run_child(
        __file__,
        [settings.bootstrap_servers, topic, str(data_dir)],
        data_dir / "cluster",
        TIMEOUT_S,
    )

    applied = [d for d in result["decisions"] if d["outcome"] == "applied"]
    assert [d["direction"] for d in applied] == ["up", "down"], applied
    up, down = applied
    assert up["query"] == "user_query"
    assert up["lag"] > 0 and up["desired"] == 2, "scaled out on the backlog"
    assert down["lag"] == 0 and down["desired"] == 1, "scaled in once it was drained"
    assert result["running_at_end"] == 1
    assert result["limits"] == {
        "min_partitions": None,
        "max_offsets_per_trigger": BATCH,
        "trigger_interval_s": 1.0,
    }, "the query's own batch limit and trigger, read from the running query"
    labels = " ".join(result["metrics"])
    assert 'query="user_query"' in labels, "the query's lag and executors are on /metrics"

    from streamscale.kafka.admin import KafkaAdmin
    from streamscale.kafka.offsets import TopicPartition

    admin = KafkaAdmin(settings.kafka_config())
    try:
        committed = admin.committed(
            "streamscale-user_query", [TopicPartition(topic, p) for p in range(PARTITIONS)]
        )
    finally:
        admin.close()
    assert sum(committed.values()) > 0, "the processed offsets are committed to the group"


def _main(argv: list[str]) -> Iterator[str]:
    data_dir = Path(argv[3]) if len(argv) > 3 else Path(tempfile.mkdtemp())
    yield json.dumps(scenario(argv[1], argv[2], data_dir))


if __name__ == "__main__":
    for line in _main(sys.argv):
        print(line)
