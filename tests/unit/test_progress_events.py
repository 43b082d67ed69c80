"""Progress events read as their JSON: the same PySpark event a listener gets otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.listener import (
    QueryProgressEvent,
    StreamingQueryListener,
    StreamingQueryProgress,
)

from streamscale.progress_events import JsonProgressListener, _JsonEvents, progress_event

RECORDED: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "lag" / "progress_kafka_connector.json").read_text()
)
OBSERVED = {
    **RECORDED[0],
    "observedMetrics": {"counts": {"tasks": ['{"read": 3}', '{"read": 4}'], "late": 2}},
}


def jvm_event(progress: dict[str, Any]) -> Any:
    """What py4j hands the callback: ``jevent.progress().json()`` is the JSON text."""
    text = json.dumps(progress)
    return SimpleNamespace(progress=lambda: SimpleNamespace(json=lambda: text))


@pytest.mark.parametrize("progress", [*RECORDED, OBSERVED])
def test_the_event_is_pysparks_with_every_field(progress: dict[str, Any]) -> None:
    event = progress_event(jvm_event(progress))
    assert isinstance(event, QueryProgressEvent)
    got = event.progress
    assert isinstance(got, StreamingQueryProgress)
    assert json.loads(got.json) == progress
    assert str(got.runId) == progress["runId"] == got["runId"]
    assert got.batchId == progress["batchId"]
    assert got.numInputRows == progress["numInputRows"]
    assert got.durationMs == progress["durationMs"]
    assert [s.endOffset for s in got.sources] == [
        json.dumps(s["endOffset"]) for s in progress["sources"]
    ]


def test_observed_metrics_are_rows() -> None:
    got = progress_event(jvm_event(OBSERVED)).progress
    assert got.observedMetrics["counts"] == Row(tasks=['{"read": 3}', '{"read": 4}'], late=2)


def test_the_callback_hands_the_event_to_the_listener() -> None:
    seen: list[Any] = []

    class Seen(JsonProgressListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            seen.append(event)

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Seen()
    assert isinstance(listener, StreamingQueryListener)
    _JsonEvents(listener).onQueryProgress(jvm_event(RECORDED[1]))
    (event,) = seen
    assert event.progress.batchId == RECORDED[1]["batchId"]
