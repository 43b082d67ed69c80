"""The lag as Prometheus metrics: a custom collector and a stoppable ``/metrics`` server.

Values are computed at scrape time from a :class:`~streamscale.lag.model.LagTracker`, so a
scrape always sees the newest sample and its age. Names follow two families:

- ``streamscale_*`` with a ``query`` label (records and time lag, offsets, rates, batch
  durations, executors, scaling decisions, sample age);
- kafka-lag-exporter's ``kafka_consumergroup_group_*`` with ``cluster_name, group, topic,
  partition`` so that existing dashboards and alerts work unchanged; ``group`` is the consumer
  group the query's offsets are committed to (:mod:`streamscale.kafka.commits`), given by
  ``group_name(query)``.

The per-topic sum is ``streamscale_topic_records_lag``: a gauge named ``..._sum`` is refused
by ``promtool check metrics`` (reserved for histograms and summaries).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from streamscale.kafka.groups import query_group
from streamscale.lag.model import EXECUTOR_STATES, LagTracker, QuerySnapshot


def consumer_group(query: str) -> str:
    """The consumer group a query's processed offsets are committed to (the group label):
    :func:`streamscale.kafka.groups.query_group`, the same resolution as the committer's."""
    return query_group(query)


QP = ["query", "topic", "partition"]
KLE = ["cluster_name", "group", "topic", "partition"]
QO = ["query", "operator"]


def _families() -> dict[str, Metric]:
    """Every family exported, empty, in output order (also what ``describe`` answers)."""
    gauges: list[tuple[str, str, list[str]]] = [
        ("streamscale_records_lag", "Records between processed and end offset.", QP),
        ("streamscale_topic_records_lag", "Records lag summed over a topic.", ["query", "topic"]),
        (
            "streamscale_time_lag_seconds",
            "Seconds since the end offset was at the processed offset (0 when caught up).",
            QP,
        ),
        ("streamscale_end_offset", "End offset (high watermark) as last reported.", QP),
        ("streamscale_processed_offset", "Next offset to process (last committed batch).", QP),
        (
            "streamscale_input_records_per_second",
            "End-offset growth per second over the rate window.",
            ["query"],
        ),
        (
            "streamscale_processed_records_per_second",
            "Processed-offset growth per second over the rate window.",
            ["query"],
        ),
        (
            "streamscale_sample_age_seconds",
            "Age of the newest lag sample of a query (large means no signal, not no lag).",
            ["query"],
        ),
        ("streamscale_executors", "Executors of a query: target or running.", ["query", "state"]),
        (
            "streamscale_batch_fixed_cost_seconds",
            "Fixed cost of one micro-batch of a query, as the autoscaler fits it.",
            ["query"],
        ),
        (
            "streamscale_executor_records_per_second",
            "Records/s one executor processes net of the fixed cost, as the autoscaler fits it.",
            ["query"],
        ),
        (
            "streamscale_state_rows",
            "Rows in a stateful operator's state store (absent for RocksDB when the session "
            "sets spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false).",
            QO,
        ),
        (
            "streamscale_state_memory_bytes",
            "Memory a stateful operator's state stores use (RocksDB: memtables, caches).",
            QO,
        ),
        (
            "streamscale_state_disk_bytes",
            "Size of a stateful operator's RocksDB SST files on the executors' disks.",
            QO,
        ),
        (
            "streamscale_state_partitions",
            "State partitions of a stateful operator (numShufflePartitions): its stage's tasks.",
            QO,
        ),
        (
            "streamscale_state_store_instances",
            "State store instances a stateful operator's last batch opened.",
            QO,
        ),
        (
            "streamscale_state_loaded_partitions",
            "State stores a stateful operator's last batch loaded from the checkpoint (moved or "
            "lost: reloaded).",
            QO,
        ),
        (
            "streamscale_state_load_seconds",
            "Time a stateful operator's last batch spent loading state stores.",
            QO,
        ),
        (
            "streamscale_state_commit_seconds",
            "Time a stateful operator's last batch spent committing its state stores.",
            QO,
        ),
        (
            "streamscale_state_bytes_copied",
            "Checkpoint bytes a stateful operator's last batch copied (uploads and reloads).",
            QO,
        ),
        (
            "streamscale_scale_pause_seconds",
            "Pause the last measured scale event of a query caused (batch time above the fit).",
            ["query"],
        ),
        (
            "streamscale_scale_reloaded_partitions",
            "State stores the batches after the last measured scale event reloaded.",
            ["query"],
        ),
        (
            "streamscale_state_reload_seconds",
            "Seconds to reload a query's whole state elsewhere, as the autoscaler prices it.",
            ["query"],
        ),
        (
            "streamscale_executors_lost_pause_seconds",
            "Pause the last executors lost caused a query (batch time above the fit, the "
            "batch in flight included).",
            ["query"],
        ),
        (
            "streamscale_scale_base_pause_seconds",
            "Pause of a change that does not grow with the state (executors and workers "
            "starting), as the autoscaler prices it.",
            ["query"],
        ),
        ("kafka_consumergroup_group_lag", "Group offset lag of a partition.", KLE),
        (
            "kafka_consumergroup_group_lag_seconds",
            "Group time lag of a partition (seconds).",
            KLE,
        ),
        ("kafka_consumergroup_group_offset", "Last group consumed offset of a partition.", KLE),
        (
            "kafka_consumergroup_group_topic_sum_lag",
            "Sum of group offset lag across topic partitions.",
            ["cluster_name", "group", "topic"],
        ),
        (
            "kafka_consumergroup_group_max_lag_seconds",
            "Max group time lag across all partitions (seconds).",
            ["cluster_name", "group"],
        ),
    ]
    out: dict[str, Metric] = {
        name: GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in gauges
    }
    out["streamscale_batch_duration_seconds"] = HistogramMetricFamily(
        "streamscale_batch_duration_seconds",
        "Duration of micro-batch triggers (seconds).",
        labels=["query"],
    )
    out["streamscale_scaling_decisions"] = CounterMetricFamily(
        "streamscale_scaling_decisions",
        "Scaling decisions taken by the autoscaler.",
        labels=["direction", "reason"],
    )
    out["streamscale_executors_lost"] = CounterMetricFamily(
        "streamscale_executors_lost",
        "Executors gone without the autoscaler removing them (crashed, host lost, evicted).",
        labels=[],
    )
    return out


class LagCollector(Collector):
    """Collects the tracker's snapshots as metric families at each scrape.

    ``clock`` gives the current wall time (seconds since the epoch, the clock of Spark's
    progress timestamps); ``group_name`` maps a query to its consumer group.
    """

    def __init__(
        self,
        tracker: LagTracker,
        *,
        cluster_name: str = "streamscale",
        group_name: Callable[[str], str] = consumer_group,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tracker = tracker
        self.cluster_name = cluster_name
        self.group_name = group_name
        self.clock = clock

    def describe(self) -> Iterable[Metric]:
        return list(_families().values())

    def collect(self) -> Iterable[Metric]:
        families = _families()
        seen: set[tuple[str, tuple[str, ...]]] = set()

        def add(name: str, labels: list[str], value: float) -> None:
            key = (name, tuple(labels))
            if key in seen:  # two queries mapped to one group: first wins, no duplicates
                return
            seen.add(key)
            family = families[name]
            assert isinstance(family, GaugeMetricFamily)
            family.add_metric(labels, value)

        for snap in self.tracker.snapshots(self.clock()):
            self._add_snapshot(snap, add, families)
        for query, counts in sorted(self.tracker.executors().items()):
            for state in EXECUTOR_STATES:
                if state in counts:
                    add("streamscale_executors", [query, state], counts[state])
        for query, (fixed_cost, rate) in sorted(self.tracker.capacities().items()):
            if fixed_cost is not None:
                add("streamscale_batch_fixed_cost_seconds", [query], fixed_cost)
            if rate is not None:
                add("streamscale_executor_records_per_second", [query], rate)
        for query, (pause_s, reloaded, priced_s, base_s) in sorted(
            self.tracker.scale_costs().items()
        ):
            add("streamscale_scale_pause_seconds", [query], pause_s)
            add("streamscale_scale_reloaded_partitions", [query], reloaded)
            add("streamscale_state_reload_seconds", [query], priced_s)
            add("streamscale_scale_base_pause_seconds", [query], base_s)
        for query, (pause_s, _) in sorted(self.tracker.loss_costs().items()):
            add("streamscale_executors_lost_pause_seconds", [query], pause_s)
        decisions = families["streamscale_scaling_decisions"]
        assert isinstance(decisions, CounterMetricFamily)
        for (direction, reason), count in sorted(self.tracker.decisions().items()):
            decisions.add_metric([direction, reason], count)
        lost = families["streamscale_executors_lost"]
        assert isinstance(lost, CounterMetricFamily)
        count = self.tracker.lost()
        if count or self.tracker.executors():  # from the autoscaler's first step
            lost.add_metric([], count)
        return list(families.values())

    def _add_snapshot(
        self,
        snap: QuerySnapshot,
        add: Callable[[str, list[str], float], None],
        families: dict[str, Metric],
    ) -> None:
        q = snap.query
        group = self.group_name(q)
        cluster = self.cluster_name
        for p in snap.partitions:
            part = str(p.partition)
            add("streamscale_records_lag", [q, p.topic, part], p.records_lag)
            add("streamscale_time_lag_seconds", [q, p.topic, part], p.time_lag_s)
            add("streamscale_end_offset", [q, p.topic, part], p.end_offset)
            add("streamscale_processed_offset", [q, p.topic, part], p.processed_offset)
            kle = [cluster, group, p.topic, part]
            add("kafka_consumergroup_group_lag", kle, p.records_lag)
            add("kafka_consumergroup_group_lag_seconds", kle, p.time_lag_s)
            add("kafka_consumergroup_group_offset", kle, p.processed_offset)
        for topic, lag in sorted(snap.lag_by_topic().items()):
            add("streamscale_topic_records_lag", [q, topic], lag)
            add("kafka_consumergroup_group_topic_sum_lag", [cluster, group, topic], lag)
        add("kafka_consumergroup_group_max_lag_seconds", [cluster, group], snap.max_time_lag_s)
        add("streamscale_input_records_per_second", [q], snap.input_rate)
        add("streamscale_processed_records_per_second", [q], snap.processed_rate)
        add("streamscale_sample_age_seconds", [q], snap.age_s)
        for op in snap.state_operators:
            labels = [q, op.operator]
            add("streamscale_state_memory_bytes", labels, op.memory_bytes)
            add("streamscale_state_partitions", labels, op.partitions)
            add("streamscale_state_store_instances", labels, op.store_instances)
            add("streamscale_state_commit_seconds", labels, op.commit_s)
            for name, value in (
                ("streamscale_state_rows", op.rows),
                ("streamscale_state_disk_bytes", op.disk_bytes),
                ("streamscale_state_loaded_partitions", op.loaded),
                ("streamscale_state_load_seconds", op.load_s),
                ("streamscale_state_bytes_copied", op.bytes_copied),
            ):
                if value is not None:
                    add(name, labels, value)
        hist = snap.batch_durations
        if hist.count:
            family = families["streamscale_batch_duration_seconds"]
            assert isinstance(family, HistogramMetricFamily)
            buckets = [(_le(bound), float(n)) for bound, n in hist.buckets]
            family.add_metric([q], buckets, hist.total)


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def render(registry: CollectorRegistry) -> str:
    """The registry in Prometheus text format (what a scrape returns)."""
    return generate_latest(registry).decode()


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`stop` shuts it down and frees the port."""

    host: str
    port: int
    registry: CollectorRegistry
    _httpd: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self, timeout_s: float = 5.0) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout_s)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(registry: CollectorRegistry, *, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serve ``registry`` on ``http://host:port/metrics`` in a daemon thread (0: a free port)."""
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    chosen = int(httpd.server_address[1])
    return MetricsServer(host, chosen, registry, httpd, thread)


def start_metrics(
    tracker: LagTracker,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    registry: CollectorRegistry | None = None,
    cluster_name: str = "streamscale",
    group_name: Callable[[str], str] = consumer_group,
) -> MetricsServer:
    """Register a :class:`LagCollector` of ``tracker`` and serve it.

    ``registry`` defaults to a fresh one (pass ``prometheus_client.REGISTRY`` to also export
    the process metrics of the default registry).
    """
    registry = registry if registry is not None else CollectorRegistry()
    registry.register(LagCollector(tracker, cluster_name=cluster_name, group_name=group_name))
    return serve(registry, host=host, port=port)


def metric_names() -> Iterator[str]:
    """Names of the exported families as exposed (counters with their ``_total`` suffix)."""
    for family in _families().values():
        yield f"{family.name}_total" if family.type == "counter" else family.name
