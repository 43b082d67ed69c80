"""Progress events → samples, on recorded progress JSON (shape of Spark 4.3's)."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent, StreamingQueryProgress

from streamscale.lag.listener import (
    LagListener,
    is_kafka_description,
    parse_offsets,
    parse_timestamp,
    sample_from_progress,
)
from streamscale.lag.model import LagTracker, PartitionOffsets

QUERY_ID = "5898f191-fe0c-4f2a-8a3e-09faa1b584e1"
PYTHON_STREAM = (
    "org.apache.spark.sql.execution.datasources.v2.python."
    "PythonMicroBatchStreamWithAdmissionControl@6daddede"
)

# A progress event as Spark 4.3 posts it for a streamscale-kafka source joined with a rate
# source (recorded shape; offsets are JSON text, durations in ms).
PROGRESS: dict[str, Any] = {
    "id": QUERY_ID,
    "runId": "71c361f3-13af-4f7f-b6d5-266bb7bf2594",
    "name": "enrich",
    "timestamp": "2026-11-22T11:08:06.055Z",
    "batchId": 1,
    "batchDuration": 289,
    "numInputRows": 1505,
    "inputRowsPerSecond": 401.2,
    "processedRowsPerSecond": 5207.6,
    "durationMs": {
        "addBatch": 150,
        "commitOffsets": 67,
        "getBatch": 0,
        "latestOffset": 5,
        "queryPlanning": 12,
        "triggerExecution": 289,
        "walCommit": 56,
    },
    "stateOperators": [],
    "sources": [
        {
            "description": PYTHON_STREAM,
            "startOffset": '{"achats": {"0": 0, "1": 0}}',
            "endOffset": '{"achats": {"0": 1000, "1": 500}}',
            "latestOffset": '{"achats": {"0": 4000, "1": 500}}',
            "numInputRows": 1500,
            "inputRowsPerSecond": 400.0,
            "processedRowsPerSecond": 5190.3,
            "metrics": {},
        },
        {
            "description": "RateStreamV2[rowsPerSecond=5, rampUpTimeSeconds=0, numPartitions=2",
            "startOffset": 10,
            "endOffset": 11,
            "latestOffset": None,
            "numInputRows": 5,
            "inputRowsPerSecond": 1.2,
            "processedRowsPerSecond": 17.3,
            "metrics": {},
        },
    ],
    "sink": {"description": "NoopTable$@1b2c3d", "numOutputRows": -1, "metrics": {}},
}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"t": {"0": 5, "1": 7}}', {("t", 0): 5, ("t", 1): 7}),
        ({"t": {"2": 9}}, {("t", 2): 9}),
        (None, None),
        ("None", None),
        ("null", None),
        ("", None),
        ("12", None),  # the rate source: a number
        ("{not json", None),
        ('{"t": 5}', None),
        ('{"t": {"x": 5}}', None),
        ('{"t": {"0": "5"}}', None),
        ('{"t": {"0": true}}', None),
        ("{}", None),
    ],
)
def test_parse_offsets(raw: Any, expected: dict[tuple[str, int], int] | None) -> None:
    assert parse_offsets(raw) == expected


def test_kafka_descriptions() -> None:
    assert is_kafka_description(PYTHON_STREAM)
    assert is_kafka_description("KafkaV2[Subscribe[achats]]")
    assert not is_kafka_description("RateStreamV2[rowsPerSecond=5]")
    assert not is_kafka_description("")


def test_sample_from_progress() -> None:
    sample = sample_from_progress(PROGRESS)
    assert sample is not None
    assert sample.query == "enrich"
    start = parse_timestamp("2026-11-22T11:08:06.055Z")
    assert start == pytest.approx(1795345686.055)
    assert sample.wall_time == pytest.approx(start + 0.005)
    assert sample.partitions == (
        PartitionOffsets("achats", 0, 4000, 1000),
        PartitionOffsets("achats", 1, 500, 500),
    )
    assert sample.batch is not None
    assert sample.batch.batch_id == 1
    assert sample.batch.records == 1500  # the Kafka source's rows only
    assert sample.batch.busy_s == pytest.approx(0.289)
    assert sample.batch.process_s == pytest.approx(0.150)


def test_sample_from_pyspark_progress_object() -> None:
    """The same through PySpark's own ``StreamingQueryProgress`` (a dict subclass)."""
    progress = StreamingQueryProgress.fromJson(copy.deepcopy(PROGRESS))
    sample = sample_from_progress(progress)
    assert sample == sample_from_progress(PROGRESS)


def test_unnamed_query_is_labelled_by_its_id() -> None:
    raw = copy.deepcopy(PROGRESS)
    raw["name"] = None
    sample = sample_from_progress(raw)
    assert sample is not None and sample.query == QUERY_ID


def test_a_source_without_latest_offsets_is_an_unknown_lag_not_a_zero_one() -> None:
    raw = copy.deepcopy(PROGRESS)
    raw["sources"][0]["latestOffset"] = None  # a source that does not report it
    assert sample_from_progress(raw) is None


def test_no_kafka_source() -> None:
    raw = copy.deepcopy(PROGRESS)
    del raw["sources"][0]
    assert sample_from_progress(raw) is None
    assert sample_from_progress(PROGRESS, is_kafka=lambda d: False) is None


def test_two_kafka_sources_of_one_query() -> None:
    raw = copy.deepcopy(PROGRESS)
    raw["sources"][1] = {
        **raw["sources"][0],
        "endOffset": json.dumps({"referentiel": {"0": 30}}),
        "latestOffset": json.dumps({"referentiel": {"0": 30}}),
        "numInputRows": 30,
    }
    sample = sample_from_progress(raw)
    assert sample is not None
    assert [p.topic for p in sample.partitions] == ["achats", "achats", "referentiel"]
    assert sample.batch is not None and sample.batch.records == 1530


def _event(progress: dict[str, Any]) -> Any:
    return QueryProgressEvent.fromJson({"progress": copy.deepcopy(progress)})


def test_listener_feeds_tracker() -> None:
    tracker = LagTracker()
    listener = LagListener(tracker)
    listener.onQueryStarted(SimpleNamespace(id=uuid.UUID(QUERY_ID), name="enrich"))
    listener.onQueryProgress(_event(PROGRESS))
    snap = tracker.snapshot("enrich", parse_timestamp("2026-11-22T11:08:07Z"))
    assert snap is not None
    assert snap.total_lag == 3000
    assert len(snap.batches) == 1

    idle_at = "2026-11-22T11:08:20.000Z"
    listener.onQueryIdle(SimpleNamespace(id=uuid.UUID(QUERY_ID), timestamp=idle_at))
    snap = tracker.snapshot("enrich", parse_timestamp(idle_at))
    assert snap is not None and snap.age_s == 0.0

    listener.onQueryTerminated(SimpleNamespace(id=uuid.UUID(QUERY_ID)))
    assert tracker.queries() == []


def test_listener_never_raises() -> None:
    tracker = LagTracker()
    listener = LagListener(tracker, keep_terminated=True)
    listener.onQueryProgress(SimpleNamespace(progress=None))
    listener.onQueryIdle(SimpleNamespace(id="x", timestamp="garbage"))
    listener.onQueryProgress(_event(PROGRESS))
    listener.onQueryIdle(SimpleNamespace(id=uuid.UUID(QUERY_ID), timestamp="garbage"))
    assert listener.errors == 2
    listener.onQueryTerminated(SimpleNamespace(id=uuid.UUID(QUERY_ID)))
    assert tracker.queries() == ["enrich"]  # kept


# Progress events recorded from pyspark 4.2.0 for a query on Spark's connector
# (``format("kafka")``, subscribe one topic of 3 partitions holding 50, 10 and 0 records,
# maxOffsetsPerTrigger 20, Trigger.AvailableNow, noop sink): four batches, as ``.json``.
CONNECTOR_PROGRESS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "progress_kafka_connector.json").read_text()
)


def test_connector_progress_is_kafka() -> None:
    for progress in CONNECTOR_PROGRESS:
        (source,) = progress["sources"]
        assert source["description"] == "KafkaV2[Subscribe[probe]]"
        assert is_kafka_description(source["description"])


@pytest.mark.parametrize(
    ("batch", "processed", "lag"),
    [
        (0, (16, 3, 0), (34, 7, 0)),
        (1, (32, 6, 0), (18, 4, 0)),
        (2, (48, 9, 0), (2, 1, 0)),
        (3, (50, 10, 0), (0, 0, 0)),
    ],
)
def test_connector_progress_samples(
    batch: int, processed: tuple[int, ...], lag: tuple[int, ...]
) -> None:
    """Spark's connector reports the true end offsets as ``latestOffset`` and the processed
    ones as ``endOffset``: the sample is the lag Kafka's own tools would show."""
    for as_object in (False, True):
        raw = copy.deepcopy(CONNECTOR_PROGRESS[batch])
        progress = StreamingQueryProgress.fromJson(raw) if as_object else raw
        sample = sample_from_progress(progress)
        assert sample is not None
        assert sample.query == "probeq"
        assert sample.partitions == tuple(
            PartitionOffsets("probe", p, (50, 10, 0)[p], processed[p]) for p in range(3)
        )
        assert tuple(p.end_offset - p.processed_offset for p in sample.partitions) == lag
        assert sample.batch is not None and sample.batch.batch_id == batch
        assert sample.batch.records == CONNECTOR_PROGRESS[batch]["numInputRows"]
        # Spark's own view of the same lag, in the source's metrics.
        metrics = CONNECTOR_PROGRESS[batch]["sources"][0]["metrics"]
        assert max(lag) == int(metrics["maxOffsetsBehindLatest"])


def test_connector_progress_through_the_listener() -> None:
    tracker = LagTracker()
    listener = LagListener(tracker)
    for progress in CONNECTOR_PROGRESS:
        listener.onQueryProgress(_event(progress))
        snap = tracker.snapshot("probeq", parse_timestamp(progress["timestamp"]) + 1)
        assert snap is not None
        ends = progress["sources"][0]["endOffset"]["probe"]
        assert snap.total_lag == 60 - sum(ends.values())
    assert listener.errors == 0
