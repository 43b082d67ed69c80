"""Lag observability: records lag, time lag and rates of every streaming query.

- :mod:`streamscale.lag.model` (pure): samples, lag and rate functions, :class:`LagTracker`.
- :mod:`streamscale.lag.listener`: Spark progress events → samples.
- :mod:`streamscale.lag.metrics`: Prometheus collector and ``/metrics`` server.

:func:`start_monitor` wires the three onto a SparkSession.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamscale.lag.model import LagTracker, ProgressSample, QuerySnapshot
from streamscale.settings import ROCKSDB_ROWS_KEY

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from streamscale.lag.listener import LagListener
    from streamscale.lag.metrics import MetricsServer

__all__ = ["LagMonitor", "LagTracker", "ProgressSample", "QuerySnapshot", "start_monitor"]

IDLE_EVENT_INTERVAL_KEY = "spark.sql.streaming.noDataProgressEventInterval"
"""How often Spark reports an idle query (default 10 s): the freshness of a caught-up signal."""


@dataclass
class LagMonitor:
    """A tracker fed by a listener on a session, and its ``/metrics`` server (if any)."""

    tracker: LagTracker
    listener: LagListener
    server: MetricsServer | None
    _spark: Any
    _previous_idle_interval: str | None = None

    def stop(self) -> None:
        """Remove the listener, stop the server, restore the idle-event interval."""
        try:
            self._spark.streams.removeListener(self.listener)
            if self._previous_idle_interval is not None:
                self._spark.conf.set(IDLE_EVENT_INTERVAL_KEY, self._previous_idle_interval)
        finally:
            if self.server is not None:
                self.server.stop()

    def __enter__(self) -> LagMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_monitor(
    spark: Any,
    *,
    tracker: LagTracker | None = None,
    host: str = "127.0.0.1",
    port: int | None = 0,
    registry: CollectorRegistry | None = None,
    cluster_name: str = "streamscale",
    group_name: Callable[[str], str] | None = None,
    idle_event_interval_s: float | None = 1.0,
) -> LagMonitor:
    """Listen to ``spark``'s queries and serve their lag on ``host:port`` (None: no server).

    Port 0 picks a free port: read it from ``monitor.server.port``. ``idle_event_interval_s``
    sets how often Spark reports a caught-up query idle, which refreshes the samples of
    queries started afterwards (None leaves Spark's 10 s); :meth:`LagMonitor.stop` restores it.
    """
    from streamscale.lag.listener import LagListener
    from streamscale.lag.metrics import consumer_group, start_metrics

    tracker = tracker or LagTracker()
    counted = str(spark.conf.get(ROCKSDB_ROWS_KEY, "true")).strip().lower() != "false"
    listener = LagListener(tracker, rocksdb_rows_counted=counted)
    previous = None
    if idle_event_interval_s is not None:
        previous = str(spark.conf.get(IDLE_EVENT_INTERVAL_KEY))
        spark.conf.set(IDLE_EVENT_INTERVAL_KEY, f"{round(idle_event_interval_s * 1000)}ms")
    spark.streams.addListener(listener)
    server = None
    if port is not None:
        try:
            server = start_metrics(
                tracker,
                host=host,
                port=port,
                registry=registry,
                cluster_name=cluster_name,
                group_name=group_name or consumer_group,
            )
        except BaseException:
            spark.streams.removeListener(listener)
            if previous is not None:
                spark.conf.set(IDLE_EVENT_INTERVAL_KEY, previous)
            raise
    return LagMonitor(tracker, listener, server, spark, previous)
