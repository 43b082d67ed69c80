"""Running a pipeline query: build it from the settings, print each batch, stop cleanly.

``streamscale run`` and the benchmark use :func:`run`; tests use the pipelines directly.
Each committed batch prints one line: batch id, input rows, input and processing rates,
records lag (end offsets minus processed offsets, summed over partitions) and the
pipeline's own counts (output, dead letters, filtered). SIGINT or SIGTERM asks for a stop:
the query is stopped once the current batch is committed (bounded wait), so nothing is
replayed on the next start but that batch's sink output at most.

The runner knows nothing of scaling: ``streamscale run --autoscale`` passes the Spark
settings a cluster manager needs and a hook that attaches the autoscaler to the session
(:data:`Attach`), composed on the command-line side.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from streamscale.errors import ConfigError, PipelineError
from streamscale.kafka.refusals import refusal
from streamscale.pipelines.query import STOP_WAIT_S, progress_data, stop_between_batches
from streamscale.settings import KafkaSource, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from streamscale.lag.model import LagTracker

Attach = Callable[["SparkSession", "LagTracker", str], Callable[[], None]]
"""Attaches something to a running pipeline (the autoscaler): called with the session, the
lag model and the query's name before the query starts; returns the function that stops it."""

PIPELINE_NAMES = ("enrichment", "game-sessions")
POLL_S = 0.5


class Pipeline(Protocol):
    """What the runner needs of a pipeline."""

    name: str
    source: KafkaSource

    def start(self, spark: SparkSession, trigger: Mapping[str, Any]) -> StreamingQuery: ...

    def batch_counts(self, progress: Any) -> dict[str, int]: ...


def make_pipeline(name: str, settings: Settings, checkpoint: str) -> Pipeline:
    """The pipeline called ``name`` (one of :data:`PIPELINE_NAMES`)."""
    if name == "enrichment":
        from streamscale.pipelines.enrichment import Enrichment

        return Enrichment(settings, checkpoint)
    if name == "game-sessions":
        from streamscale.pipelines.game_sessions import GameSessions

        return GameSessions(settings, checkpoint)
    raise ConfigError(f"unknown pipeline {name!r}: choose one of {', '.join(PIPELINE_NAMES)}")


def checkpoint_for(settings: Settings, name: str) -> str:
    """The pipeline's checkpoint: ``<checkpoint_dir>/<name>``."""
    return str(Path(settings.checkpoint_dir) / name)


def trigger_for(settings: Settings, available_now: bool) -> dict[str, Any]:
    """``DataStreamWriter.trigger`` arguments: availableNow, or the processing-time interval
    (0: the next batch starts as soon as the previous one ends)."""
    if available_now:
        return {"availableNow": True}
    millis = round(settings.trigger_interval_s * 1000)
    return {"processingTime": f"{millis} milliseconds"} if millis > 0 else {}


# --- progress: pure functions of the progress JSON -------------------------------------------


def records_lag(progress: Mapping[str, Any]) -> int | None:
    """Records not yet processed after the batch, summed over the partitions of its Kafka
    sources, by the lag model's one definition (None if no Kafka source reported offsets)."""
    from streamscale.lag.model import progress_offsets
    from streamscale.lag.model import records_lag as lag_of

    found = progress_offsets(progress)
    if found is None:
        return None
    return sum(lag_of(p.end_offset, p.processed_offset) for p in found[0])


def format_progress(progress: Mapping[str, Any], counts: Mapping[str, int]) -> str:
    """One line for one batch."""
    lag = records_lag(progress)
    parts = [
        f"batch {progress.get('batchId')}",
        f"rows {progress.get('numInputRows', 0):,}",
        f"in {float(progress.get('inputRowsPerSecond') or 0):,.0f}/s",
        f"processed {float(progress.get('processedRowsPerSecond') or 0):,.0f}/s",
        f"lag {'?' if lag is None else f'{lag:,}'}",
    ]
    shown = {k: v for k, v in counts.items() if v}
    if shown:
        parts.append(" ".join(f"{k}={v:,}" for k, v in shown.items()))
    return " | ".join(parts)


def _has_observed(data: Mapping[str, Any]) -> bool:
    """True when a batch with no input rows still produced counts (a no-data batch that
    moved the watermark: closed sessions, unapproved frames)."""
    for row in (data.get("observedMetrics") or {}).values():
        if isinstance(row, Mapping) and any(row.values()):
            return True
    return False


# --- running --------------------------------------------------------------------------------


class StopRequest:
    """Set by SIGINT/SIGTERM while installed; the previous handlers come back on exit."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def drive(
    query: StreamingQuery,
    pipeline: Pipeline,
    stop: threading.Event,
    echo: Callable[[str], None] = print,
    stop_wait_s: float = STOP_WAIT_S,
) -> dict[str, int]:
    """Print each new batch until the query ends or ``stop`` is set; return summed counts.

    On ``stop``, waits (at most ``stop_wait_s``) until no trigger is active, then stops the
    query, so the batch in flight is committed first.
    """
    totals: dict[str, int] = {}
    # Progress events are told apart by their timestamp: an idle trigger reports the id of
    # the batch that will run next, so the id alone would hide that batch.
    last_seen = ""

    def report() -> None:
        nonlocal last_seen
        for progress in query.recentProgress:
            data = progress_data(progress)
            stamp = str(data.get("timestamp", ""))
            if stamp <= last_seen:
                continue
            last_seen = stamp
            if not data.get("numInputRows") and not _has_observed(data):
                continue  # an idle trigger
            counts = pipeline.batch_counts(progress)
            for key, value in counts.items():
                # ``now.*`` counts are levels at the end of the batch, the others amounts.
                totals[key] = value if key.startswith("now.") else totals.get(key, 0) + value
            echo(format_progress(data, counts))

    while query.isActive:
        query.awaitTermination(POLL_S)
        report()
        if stop.is_set() and query.isActive:
            echo("stop requested: stopping after the current batch")
            stop_between_batches(query, stop_wait_s)
            report()
            break
    return totals


def run(
    name: str,
    settings: Settings,
    *,
    available_now: bool = False,
    checkpoint: str | None = None,
    echo: Callable[[str], None] = print,
    extra_conf: Mapping[str, str] | None = None,
    attach: Attach | None = None,
) -> dict[str, int]:
    """Run pipeline ``name`` until it ends (``available_now``) or a stop signal; raise the
    query's error if it failed. Returns the counts summed over the batches.

    The lag monitor serves ``/metrics`` on ``settings.metrics_port`` (0: a free port, -1:
    none). ``extra_conf``: Spark settings for the session; ``attach``: called once the
    session and the lag model are up, before the query starts (the autoscaler), and stopped
    after it.
    """
    from streamscale.kafka.commits import group_committer
    from streamscale.lag import start_monitor
    from streamscale.spark import session
    from streamscale.spark import stop as stop_session

    spark = session(settings, app_name=f"streamscale-{name}", extra_conf=dict(extra_conf or {}))
    monitor = None
    detach: Callable[[], None] | None = None
    try:
        port = None if settings.metrics_port < 0 else settings.metrics_port
        monitor = start_monitor(spark, host=settings.metrics_host, port=port)
        if monitor.server is not None:
            echo(f"{name}: metrics at {monitor.server.url}")
        pipeline = make_pipeline(name, settings, checkpoint or checkpoint_for(settings, name))
        if attach is not None:
            detach = attach(spark, monitor.tracker, pipeline.name)
        with StopRequest() as stop:
            query = pipeline.start(spark, trigger_for(settings, available_now))
            echo(
                f"{name}: query {query.id} started ({settings.bootstrap_servers}, "
                f"reading with {pipeline.source})"
            )
            try:
                totals = drive(query, pipeline, stop.event, echo)
            except Exception as exc:  # the failed query's error: a refusal says what to fix
                why = refusal(str(exc), user=settings.sasl_username)
                if why is None:
                    raise
                raise type(why)(f"{name} failed: {why}") from exc
        committer = group_committer(spark)
        if committer is not None and not committer.wait_for(query, timeout_s=30.0):
            echo(f"{name}: warning: the last batch's offsets were not committed to its group")
        error = query.exception()
        if error is not None:
            why = refusal(str(error), user=settings.sasl_username)
            if why is not None:  # a secured cluster's refusal: the one line saying what to fix
                raise type(why)(f"{name} failed: {why}")
            raise PipelineError(f"{name} failed: {error}")
        return totals
    finally:
        if detach is not None:
            detach()
        if monitor is not None:
            monitor.stop()
        stop_session(spark)
