"""The collector's output: parsed back, checked by promtool, served on loopback."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from streamscale.lag import start_monitor
from streamscale.lag.metrics import LagCollector, metric_names, render, start_metrics
from streamscale.lag.model import BatchStats, LagTracker, PartitionOffsets, ProgressSample

NOW = 1_000_000.0


def _tracker() -> LagTracker:
    tracker = LagTracker(rate_window_s=10.0)
    for i, (t, ends, done) in enumerate(
        [(NOW - 20, (1000, 50), (0, 50)), (NOW - 10, (2000, 60), (1000, 60))]
    ):
        parts = (
            PartitionOffsets("achats", 0, ends[0], done[0]),
            PartitionOffsets("achats", 1, ends[1], done[1]),
        )
        tracker.ingest(ProgressSample("enrich", t, parts, BatchStats(i, t, 1000, 0.8, 0.6)))
    tracker.set_executors("enrich", target=3, running=2)
    tracker.set_scale_cost("enrich", pause_s=7.9, reloaded=4, priced_s=1.4, base_s=7.8)
    tracker.count_decision("up", "lag")
    tracker.count_lost()
    tracker.set_loss_cost("enrich", pause_s=12.5, reloaded=3)
    return tracker


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(LagCollector(_tracker(), cluster_name="local", clock=lambda: NOW))
    return registry


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (name, frozenset(labels.items()))


def test_collector_values(registry: CollectorRegistry) -> None:
    text = render(registry)
    got = _samples(text)
    p0 = {"query": "enrich", "topic": "achats", "partition": "0"}
    p1 = {**p0, "partition": "1"}
    assert got[_key("streamscale_records_lag", **p0)] == 1000
    assert got[_key("streamscale_records_lag", **p1)] == 0
    assert got[_key("streamscale_topic_records_lag", query="enrich", topic="achats")] == 1000
    assert got[_key("streamscale_end_offset", **p0)] == 2000
    assert got[_key("streamscale_processed_offset", **p0)] == 1000
    # offset 1000 was the end at NOW-20
    assert got[_key("streamscale_time_lag_seconds", **p0)] == pytest.approx(20.0)
    assert got[_key("streamscale_time_lag_seconds", **p1)] == 0
    assert got[_key("streamscale_input_records_per_second", query="enrich")] == 101.0
    assert got[_key("streamscale_processed_records_per_second", query="enrich")] == 101.0
    assert got[_key("streamscale_sample_age_seconds", query="enrich")] == 10.0
    assert got[_key("streamscale_executors", query="enrich", state="target")] == 3
    assert got[_key("streamscale_executors", query="enrich", state="running")] == 2
    assert got[_key("streamscale_scaling_decisions_total", direction="up", reason="lag")] == 1
    assert got[_key("streamscale_executors_lost_total")] == 1
    assert got[_key("streamscale_scale_pause_seconds", query="enrich")] == 7.9
    assert got[_key("streamscale_scale_reloaded_partitions", query="enrich")] == 4
    assert got[_key("streamscale_state_reload_seconds", query="enrich")] == 1.4
    assert got[_key("streamscale_scale_base_pause_seconds", query="enrich")] == 7.8
    assert got[_key("streamscale_executors_lost_pause_seconds", query="enrich")] == 12.5
    assert got[_key("streamscale_batch_duration_seconds_count", query="enrich")] == 2
    assert got[_key("streamscale_batch_duration_seconds_sum", query="enrich")] == pytest.approx(1.6)
    assert got[_key("streamscale_batch_duration_seconds_bucket", query="enrich", le="0.5")] == 0
    assert got[_key("streamscale_batch_duration_seconds_bucket", query="enrich", le="1.0")] == 2
    assert got[_key("streamscale_batch_duration_seconds_bucket", query="enrich", le="+Inf")] == 2
    kle = {"cluster_name": "local", "group": "streamscale-enrich", "topic": "achats"}
    assert got[_key("kafka_consumergroup_group_lag", **kle, partition="0")] == 1000
    assert got[_key("kafka_consumergroup_group_lag_seconds", **kle, partition="0")] == 20.0
    assert got[_key("kafka_consumergroup_group_offset", **kle, partition="0")] == 1000
    assert got[_key("kafka_consumergroup_group_topic_sum_lag", **kle)] == 1000
    kle_g = {"cluster_name": "local", "group": "streamscale-enrich"}
    assert got[_key("kafka_consumergroup_group_max_lag_seconds", **kle_g)] == 20.0


def test_every_family_has_help_and_type(registry: CollectorRegistry) -> None:
    text = render(registry)
    for name in metric_names():
        assert f"# HELP {name} " in text
        assert f"# TYPE {name} " in text


def test_group_name_is_injected() -> None:
    registry = CollectorRegistry()
    registry.register(LagCollector(_tracker(), group_name=lambda q: f"g-{q}", clock=lambda: NOW))
    assert 'group="g-enrich"' in render(registry)


def test_empty_tracker_renders_families_only() -> None:
    registry = CollectorRegistry()
    registry.register(LagCollector(LagTracker()))
    text = render(registry)
    assert "# TYPE streamscale_records_lag gauge" in text
    assert not [s for f in text_string_to_metric_families(text) for s in f.samples]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize("empty", [False, True])
def test_promtool_check_metrics(registry: CollectorRegistry, empty: bool) -> None:
    if empty:
        registry = CollectorRegistry()
        registry.register(LagCollector(LagTracker()))
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=render(registry),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def server() -> Iterator[str]:
    running = start_metrics(_tracker(), port=0)
    try:
        yield running.url
    finally:
        running.stop()


def test_server_on_loopback(server: str) -> None:
    assert server.startswith("http://127.0.0.1:")
    assert not server.endswith(":0/metrics")
    with urllib.request.urlopen(server, timeout=5) as response:
        text = response.read().decode()
    assert "streamscale_records_lag{" in text


def test_server_stops() -> None:
    running = start_metrics(LagTracker(), port=0)
    url = running.url
    running.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


class _FakeSpark:
    """Just what ``start_monitor`` touches: runtime conf and the listener bus."""

    def __init__(self) -> None:
        self.conf_values = {"spark.sql.streaming.noDataProgressEventInterval": "10000ms"}
        self.listeners: list[object] = []
        self.conf = self
        self.streams = self

    def get(self, key: str, default: str | None = None) -> str:
        value = self.conf_values.get(key, default)
        if value is None:
            raise KeyError(key)
        return value

    def set(self, key: str, value: str) -> None:
        self.conf_values[key] = value

    def addListener(self, listener: object) -> None:
        self.listeners.append(listener)

    def removeListener(self, listener: object) -> None:
        self.listeners.remove(listener)


def test_start_monitor_wires_and_unwires() -> None:
    spark = _FakeSpark()
    key = "spark.sql.streaming.noDataProgressEventInterval"
    with start_monitor(spark, port=0) as monitor:
        assert spark.listeners == [monitor.listener]
        assert spark.conf_values[key] == "1000ms"
        assert monitor.server is not None
        with urllib.request.urlopen(monitor.server.url, timeout=5) as response:
            assert response.status == 200
    assert spark.listeners == []
    assert spark.conf_values[key] == "10000ms"
    quiet = start_monitor(spark, port=None, idle_event_interval_s=None)
    assert quiet.server is None and spark.conf_values[key] == "10000ms"
    assert quiet.listener.rocksdb_rows_counted  # Spark's default: RocksDB counts its rows
    quiet.stop()
    spark.set("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "false")
    uncounted = start_monitor(spark, port=None, idle_event_interval_s=None)
    assert not uncounted.listener.rocksdb_rows_counted
    uncounted.stop()
