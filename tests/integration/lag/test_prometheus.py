"""Lag observability end to end: a pipeline drains a known backlog while a real Prometheus
server scrapes its ``/metrics`` every second; checked through Prometheus' query API, the
consumer group's committed offsets and end offsets measured independently."""

from __future__ import annotations

import itertools
import json
import shutil
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from typer.testing import CliRunner

from streamscale import processes
from streamscale.cli.main import app
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.client import producer_config
from streamscale.kafka.offsets import TopicPartition
from streamscale.lag import LagMonitor, start_monitor
from streamscale.settings import Settings

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 2000
MAX_OFFSETS_PER_TRIGGER = 1000  # 6 batches to drain the backlog
TRIGGER_S = 1.0
SCRAPE_S = 1.0


def _get_json(url: str, timeout_s: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read().decode())


def _ready(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    return check


class Prometheus:
    """A Prometheus server on loopback, queried through its HTTP API."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        body = _get_json(f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def query_range(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "0.5"}
        body = _get_json(f"{self.base}/api/v1/query_range?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return list(body["data"]["result"])


@pytest.fixture
def monitor(spark: Any) -> Iterator[LagMonitor]:
    running = start_monitor(spark, port=0)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def prometheus(tmp_path: Path, monitor: LagMonitor) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (make setup)")
    assert monitor.server is not None
    port = processes.free_port()
    data_dir = tmp_path / "prometheus"
    data_dir.mkdir()
    config = data_dir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_S:.0f}s\n"
        f"  scrape_timeout: {SCRAPE_S:.0f}s\n"
        "scrape_configs:\n"
        "  - job_name: streamscale\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{monitor.server.port}']\n"
    )
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    base = f"http://127.0.0.1:{port}"
    processes.start("prometheus", argv, data_dir, ready=_ready(f"{base}/-/ready"))
    try:
        yield Prometheus(base)
    finally:
        processes.stop(data_dir, "prometheus")


def _produce_backlog(settings: Settings, topic: str) -> None:
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(producer_config(settings.kafka_config(), on_delivery=report))
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"v-%d" % i, key=b"k-%d" % i, partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors


def _end_offsets(settings: Settings, topic: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdmin(settings.kafka_config())
    try:
        ends = admin.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        admin.close()
    return {(tp.topic, tp.partition): off for tp, off in ends.items()}


def _committed(settings: Settings, group: str, topic: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({**settings.kafka_config(), "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([CTP(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found}


def _by_partition(result: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    return {
        (r["metric"]["topic"], int(r["metric"]["partition"])): float(r["value"][1]) for r in result
    }


def _wait(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.25)


def test_lag_through_prometheus_falls_to_exactly_zero(
    spark: Any,
    settings: Settings,
    topic_factory: Callable[..., str],
    checkpoint: Path,
    monitor: LagMonitor,
    prometheus: Prometheus,
) -> None:
    topic = topic_factory(partitions=PARTITIONS, prefix="lag")
    _produce_backlog(settings, topic)
    backlog_end = _end_offsets(settings, topic)
    assert backlog_end == {(topic, p): PER_PARTITION for p in range(PARTITIONS)}

    name = f"lag_{uuid.uuid4().hex[:8]}"
    group = f"lagapp-{name}"  # the committer's group, which the metrics' group label must name
    selector = f'{{query="{name}"}}'
    _wait("the first scrape", lambda: bool(prometheus.query('up{job="streamscale"} == 1')), 30)

    # start_monitor made Spark report idle queries every second (its default is 10 s).
    assert spark.conf.get("spark.sql.streaming.noDataProgressEventInterval") == "1000ms"
    started = time.time()
    query = (
        spark.readStream.format("streamscale-kafka")
        .options(**settings.source_options())
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
        .option("groupIdPrefix", "lagapp")
        .load()
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{TRIGGER_S:.0f} second")
        .start()
    )
    try:

        def caught_up() -> bool:
            snap = monitor.tracker.snapshot(name, time.time())
            return snap is not None and snap.total_lag == 0 and len(snap.partitions) == PARTITIONS

        _wait("the query to drain its backlog", caught_up, 120)
        assert query.exception() is None
        caught_up_at = time.time()

        # Prometheus sees exactly 0 on every partition after a scrape newer than catching up.
        def zero_in_prometheus() -> bool:
            fresh = prometheus.query(f"timestamp(streamscale_records_lag{selector})")
            lag = _by_partition(prometheus.query(f"streamscale_records_lag{selector}"))
            return (
                len(fresh) == PARTITIONS
                and all(float(r["value"][1]) > caught_up_at for r in fresh)
                and lag == {(topic, p): 0.0 for p in range(PARTITIONS)}
            )

        _wait("lag 0 in Prometheus", zero_in_prometheus, 30)
        time.sleep(2 * SCRAPE_S + TRIGGER_S)  # a few more scrapes while caught up
        end = time.time()

        # Every series exists, per partition, with the kafka-lag-exporter names too.
        for metric in (
            "streamscale_records_lag",
            "streamscale_time_lag_seconds",
            "streamscale_end_offset",
            "streamscale_processed_offset",
        ):
            assert len(prometheus.query(f"{metric}{selector}")) == PARTITIONS, metric
        kle = prometheus.query(f'kafka_consumergroup_group_lag{{group="{group}"}}')
        assert _by_partition(kle) == {(topic, p): 0.0 for p in range(PARTITIONS)}
        topic_lag = prometheus.query(f"streamscale_topic_records_lag{selector}")
        assert [(r["metric"]["topic"], r["value"][1]) for r in topic_lag] == [(topic, "0")]
        assert prometheus.query(f"streamscale_batch_duration_seconds_count{selector}")

        # The total lag fell while the backlog drained, never rose, and ended at exactly 0.
        series = prometheus.query_range(f"sum(streamscale_records_lag{selector})", started, end)
        assert len(series) == 1
        values = [float(v) for _, v in series[0]["values"]]
        assert values[-1] == 0.0
        assert max(values) > 0, values
        assert all(b <= a for a, b in itertools.pairwise(values)), values
        assert len(set(values)) >= 3, f"lag did not fall in steps: {values}"
        # The first batch took maxOffsetsPerTrigger, less what rounding each partition's share
        # down (as Spark's connector does) leaves out: under one record per partition.
        first_batch = MAX_OFFSETS_PER_TRIGGER - PARTITIONS
        assert max(values) <= PARTITIONS * PER_PARTITION - first_batch

        time_lag = prometheus.query_range(
            f"max(streamscale_time_lag_seconds{selector})", started, end
        )
        time_values = [float(v) for _, v in time_lag[0]["values"]]
        assert max(time_values) > 0 and time_values[-1] == 0.0

        # Freshness: while batches run, a sample is never older than a trigger, the longest
        # batch and a scrape; once caught up, idle events keep it within a trigger or two.
        snap = monitor.tracker.snapshot(name, time.time())
        assert snap is not None
        longest = max(b.busy_s for b in snap.batches)
        age = f"streamscale_sample_age_seconds{selector}"
        running = [float(v) for _, v in prometheus.query_range(age, started, end)[0]["values"]]
        assert max(running) <= 2 * TRIGGER_S + longest + SCRAPE_S + 1.0, (running, longest)
        idle = prometheus.query_range(age, caught_up_at + SCRAPE_S, end)[0]["values"]
        assert max(float(v) for _, v in idle) <= 2 * TRIGGER_S + SCRAPE_S + 1.0, idle

        # Accuracy: reported lag == end offsets measured independently − processed offsets.
        true_end = _end_offsets(settings, topic)
        processed = _by_partition(prometheus.query(f"streamscale_processed_offset{selector}"))
        reported_end = _by_partition(prometheus.query(f"streamscale_end_offset{selector}"))
        reported_lag = _by_partition(prometheus.query(f"streamscale_records_lag{selector}"))
        assert reported_end == {tp: float(off) for tp, off in true_end.items()}
        assert reported_lag == {tp: float(true_end[tp] - processed[tp]) for tp in true_end}
        assert processed == {tp: float(off) for tp, off in backlog_end.items()}

        # The consumer group the offsets are committed to agrees with the processed offsets.
        expected_commits = {tp: int(off) for tp, off in processed.items()}
        _wait(
            f"group {group} to commit the processed offsets",
            lambda: _committed(settings, group, topic) == expected_commits,
            30,
        )

        # `streamscale lag --metrics-url` prints the same table.
        result = CliRunner().invoke(app, ["lag", "--metrics-url", monitor.server.url])  # type: ignore[union-attr]
        assert result.exit_code == 0, result.output
        for p in range(PARTITIONS):
            assert f"{name}  {topic}  {p}          {PER_PARTITION}" in result.output
    finally:
        query.stop()

    # Stopped: the query's series are gone, and the checkpoint plus the broker give the lag.
    _wait("the stopped query to be forgotten", lambda: name not in monitor.tracker.queries(), 10)
    result = CliRunner().invoke(
        app,
        [
            "lag",
            "--checkpoint",
            str(checkpoint),
            "--bootstrap",
            settings.bootstrap_servers,
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for p in range(PARTITIONS):
        assert lines[1 + p].split() == [
            checkpoint.name,
            topic,
            str(p),
            str(PER_PARTITION),
            str(PER_PARTITION),
            "0",
            "-",
        ]
