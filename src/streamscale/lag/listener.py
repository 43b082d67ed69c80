"""Spark progress events → lag samples, with no extra Kafka round trip.

Every committed micro-batch posts a ``StreamingQueryProgress`` whose sources carry the
batch's ``endOffset`` (the processed offsets once the batch is committed) and the
``latestOffset`` the source reported (the true end offsets, read by the source's
``latestOffset`` at the start of the trigger). :class:`LagListener` turns each into a
:class:`~streamscale.lag.model.ProgressSample`; an idle event (a trigger that found no new
data) refreshes the last sample's time, so the signal stays fresh while caught up.

A Python data source's progress description names only Spark's wrapper class
(``PythonMicroBatchStreamWithAdmissionControl@…``), not the source, so a source counts as
Kafka when its description is a Python stream or Spark's own Kafka source *and* its offsets
have the Kafka shape ``{"topic": {"0": 123}}``; other sources are ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from streamscale.lag.model import (
    KAFKA_DESCRIPTION,
    BatchStats,
    LagTracker,
    ProgressSample,
    is_kafka_description,
    parse_offsets,
    progress_offsets,
    query_label,
    state_operators,
)
from streamscale.progress_events import JsonProgressListener

__all__ = [
    "KAFKA_DESCRIPTION",
    "LagListener",
    "is_kafka_description",
    "parse_offsets",
    "parse_timestamp",
    "query_label",
    "sample_from_progress",
]

log = logging.getLogger(__name__)


def parse_timestamp(text: str) -> float:
    """Spark's ISO-8601 UTC timestamp (``2026-11-22T11:08:02.324Z``) → epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def sample_from_progress(
    progress: Mapping[str, Any],
    *,
    is_kafka: Callable[[str], bool] = is_kafka_description,
    query: str | None = None,
    rocksdb_rows_counted: bool = True,
) -> ProgressSample | None:
    """One progress (a ``StreamingQueryProgress`` or its parsed JSON) → a sample.

    None when no Kafka source of the query reported its offsets
    (:func:`~streamscale.lag.model.progress_offsets`). Records of the batch are those of its
    Kafka sources; its busy time is the trigger's duration. ``rocksdb_rows_counted``: see
    :func:`~streamscale.lag.model.state_operators`.
    """
    found = progress_offsets(progress, is_kafka)
    if found is None:
        return None
    parts, records = found
    durations: Mapping[str, Any] = progress.get("durationMs") or {}
    started = parse_timestamp(str(progress["timestamp"]))
    observed = started + float(durations.get("latestOffset", 0)) / 1000.0
    trigger_s = float(durations.get("triggerExecution", 0)) / 1000.0
    state = state_operators(progress, rocksdb_rows_counted=rocksdb_rows_counted)
    batch = BatchStats(
        batch_id=int(progress.get("batchId", -1)),
        wall_time=started + trigger_s,
        records=records,
        busy_s=trigger_s,
        process_s=float(durations.get("addBatch", 0)) / 1000.0,
        state_loaded=sum(op.loaded or 0 for op in state),
        state_load_s=sum(op.load_s or 0.0 for op in state),
        state_bytes_copied=sum(op.bytes_copied or 0 for op in state),
    )
    return ProgressSample(query or query_label(progress), observed, parts, batch, state)


class LagListener(JsonProgressListener):
    """Feeds a :class:`LagTracker` from the progress events of every query of a session.

    Add it with ``spark.streams.addListener(LagListener(tracker))``. Callbacks run on Spark's
    listener thread: they only parse and record, and never raise (a failure is logged).
    Terminated queries are forgotten unless ``keep_terminated``. ``rocksdb_rows_counted``
    is the session's ``trackTotalNumberOfRows`` (:func:`~streamscale.lag.model.state_operators`).
    """

    def __init__(
        self,
        tracker: LagTracker,
        *,
        is_kafka: Callable[[str], bool] = is_kafka_description,
        keep_terminated: bool = False,
        rocksdb_rows_counted: bool = True,
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.is_kafka = is_kafka
        self.rocksdb_rows_counted = rocksdb_rows_counted
        self.keep_terminated = keep_terminated
        self._labels: dict[str, str] = {}
        self._lock = threading.Lock()
        self.errors = 0

    def _label(self, query_id: Any, name: str | None) -> str:
        label = name or str(query_id)
        with self._lock:
            self._labels[str(query_id)] = label
        return label

    def onQueryStarted(self, event: Any) -> None:
        self._label(event.id, event.name)

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            label = self._label(progress.id, progress.name)
            sample = sample_from_progress(
                progress,
                is_kafka=self.is_kafka,
                query=label,
                rocksdb_rows_counted=self.rocksdb_rows_counted,
            )
            if sample is not None:
                self.tracker.ingest(sample)
        except Exception:
            self.errors += 1
            log.exception("lag listener: cannot record a progress event")

    def onQueryIdle(self, event: Any) -> None:
        try:
            with self._lock:
                label = self._labels.get(str(event.id))
            if label is not None:
                self.tracker.refresh(label, parse_timestamp(event.timestamp))
        except Exception:
            self.errors += 1
            log.exception("lag listener: cannot record an idle event")

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            label = self._labels.pop(str(event.id), None)
        if label is not None and not self.keep_terminated:
            self.tracker.forget(label)
