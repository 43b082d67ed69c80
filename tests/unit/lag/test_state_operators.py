"""Stateful operators from query progress: parsed, kept per query, exported on /metrics."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from streamscale.lag.listener import sample_from_progress
from streamscale.lag.metrics import LagCollector, metric_names, render
from streamscale.lag.model import (
    BatchStats,
    LagTracker,
    PartitionOffsets,
    ProgressSample,
    StateOperatorStats,
    state_operators,
    state_partitions,
    state_size,
)

ROCKSDB = {
    "operatorName": "sessionWindowStateStoreSaveExec",
    "numRowsTotal": 1000,
    "numRowsUpdated": 120,
    "allUpdatesTimeMs": 40,
    "numRowsRemoved": 7,
    "allRemovalsTimeMs": 2,
    "commitTimeMs": 250,
    "memoryUsedBytes": 4096,
    "numRowsDroppedByWatermark": 0,
    "numShufflePartitions": 4,
    "numStateStoreInstances": 4,
    "customMetrics": {
        "rocksdbSstFileSize": 65536,
        "rocksdbNumLoadedFromDfs": 1,
        "rocksdbLoadLatencyMs": 300,
        "rocksdbBytesCopied": 2048,
        "rocksdbGetCount": 5,
    },
}
HDFS = {
    "operatorName": "stateStoreSave",
    "numRowsTotal": 10,
    "numRowsUpdated": 1,
    "numRowsRemoved": 0,
    "commitTimeMs": 3,
    "memoryUsedBytes": 100,
    "numShufflePartitions": 200,
    "numStateStoreInstances": 200,
    "customMetrics": {"loadedMapCacheHitCount": 0},
}


@pytest.mark.parametrize(
    ("operators", "expected"),
    [
        ([], ()),
        (
            [ROCKSDB],
            (
                StateOperatorStats(
                    "sessionWindowStateStoreSaveExec",
                    4,
                    1000,
                    120,
                    7,
                    4096,
                    0.25,
                    4,
                    disk_bytes=65536,
                    loaded=1,
                    load_s=0.3,
                    bytes_copied=2048,
                ),
            ),
        ),
        (
            [HDFS],
            (StateOperatorStats("stateStoreSave", 200, 10, 1, 0, 100, 0.003, 200),),
        ),
        (
            [HDFS, HDFS],
            (
                StateOperatorStats("stateStoreSave", 200, 10, 1, 0, 100, 0.003, 200),
                StateOperatorStats("stateStoreSave#2", 200, 10, 1, 0, 100, 0.003, 200),
            ),
        ),
    ],
)
def test_state_operators_of_a_progress(operators: list[Any], expected: Any) -> None:
    assert state_operators({"stateOperators": operators}) == expected


def test_no_state_operators_key_is_stateless() -> None:
    assert state_operators({}) == ()
    assert state_partitions(()) is None


def test_state_partitions_is_the_narrowest_operator() -> None:
    ops = state_operators({"stateOperators": [HDFS, ROCKSDB]})
    assert state_partitions(ops) == (4, "sessionWindowStateStoreSaveExec")


def test_state_size_is_the_sst_files_with_rocksdb_else_the_memory_used() -> None:
    ops = state_operators({"stateOperators": [HDFS, ROCKSDB]})
    rocks = next(op for op in ops if op.disk_bytes is not None)
    hdfs = next(op for op in ops if op.disk_bytes is None)
    assert rocks.disk_bytes is not None
    assert state_size(ops) == rocks.disk_bytes + hdfs.memory_bytes
    assert state_size(()) == 0


def test_the_listener_keeps_the_operators_of_a_progress() -> None:
    progress = {
        "name": "q",
        "timestamp": "2026-11-25T10:00:00.000Z",
        "batchId": 3,
        "numInputRows": 10,
        "durationMs": {"triggerExecution": 1000, "addBatch": 800, "latestOffset": 5},
        "stateOperators": [ROCKSDB],
        "sources": [
            {
                "description": "KafkaV2[Subscribe[in]]",
                "startOffset": {"in": {"0": 0}},
                "endOffset": {"in": {"0": 10}},
                "latestOffset": {"in": {"0": 20}},
                "numInputRows": 10,
            }
        ],
    }
    sample = sample_from_progress(progress)
    assert sample is not None
    assert [op.operator for op in sample.state] == ["sessionWindowStateStoreSaveExec"]


def _tracker(state: tuple[StateOperatorStats, ...]) -> LagTracker:
    tracker = LagTracker()
    parts = (PartitionOffsets("in", 0, 100, 50),)
    tracker.ingest(ProgressSample("q", 100.0, parts, BatchStats(0, 100.0, 50, 1.0, 0.9), state))
    return tracker


def test_the_snapshot_carries_the_last_batch_operators_and_an_idle_sample_keeps_them() -> None:
    ops = state_operators({"stateOperators": [ROCKSDB]})
    tracker = _tracker(ops)
    tracker.ingest(ProgressSample("q", 101.0, (PartitionOffsets("in", 0, 100, 100),)))
    snap = tracker.snapshot("q", 102.0)
    assert snap is not None and snap.state_operators == ops


def test_state_metrics_are_exported_by_query_and_operator() -> None:
    ops = state_operators({"stateOperators": [ROCKSDB, HDFS]})
    registry = CollectorRegistry()
    registry.register(LagCollector(_tracker(ops), clock=lambda: 101.0))
    got = {
        (s.name, s.labels.get("operator")): s.value
        for family in text_string_to_metric_families(render(registry))
        for s in family.samples
        if s.name.startswith("streamscale_state_") and s.labels.get("query") == "q"
    }
    rocks = "sessionWindowStateStoreSaveExec"
    assert got[("streamscale_state_rows", rocks)] == 1000
    assert got[("streamscale_state_memory_bytes", rocks)] == 4096
    assert got[("streamscale_state_disk_bytes", rocks)] == 65536
    assert got[("streamscale_state_partitions", rocks)] == 4
    assert got[("streamscale_state_loaded_partitions", rocks)] == 1
    assert got[("streamscale_state_load_seconds", rocks)] == pytest.approx(0.3)
    assert got[("streamscale_state_commit_seconds", rocks)] == pytest.approx(0.25)
    assert got[("streamscale_state_bytes_copied", rocks)] == 2048
    # HDFS-backed state has no RocksDB figures: absent, never a made-up zero
    assert got[("streamscale_state_partitions", "stateStoreSave")] == 200
    assert ("streamscale_state_disk_bytes", "stateStoreSave") not in got
    assert {
        "streamscale_state_rows",
        "streamscale_state_loaded_partitions",
    } <= set(metric_names())


def test_rocksdb_rows_not_counted_are_absent_not_zero() -> None:
    ops = state_operators(
        {"stateOperators": [{**ROCKSDB, "numRowsTotal": 0}, HDFS]}, rocksdb_rows_counted=False
    )
    assert [op.rows for op in ops] == [None, 10]  # HDFS always counts its rows
    registry = CollectorRegistry()
    registry.register(LagCollector(_tracker(ops), clock=lambda: 101.0))
    rows = {
        s.labels["operator"]: s.value
        for family in text_string_to_metric_families(render(registry))
        for s in family.samples
        if s.name == "streamscale_state_rows"
    }
    assert rows == {"stateStoreSave": 10}


def test_the_listener_passes_the_sessions_row_counting_on() -> None:
    progress = {
        "id": "q1",
        "batchId": 3,
        "timestamp": "2026-11-26T07:00:00.000Z",
        "durationMs": {"triggerExecution": 1000},
        "sources": [
            {
                "description": "KafkaV2[Subscribe[in]]",
                "endOffset": {"in": {"0": 10}},
                "latestOffset": {"in": {"0": 10}},
                "numInputRows": 10,
            }
        ],
        "stateOperators": [ROCKSDB],
    }
    counted = sample_from_progress(progress, query="q")
    uncounted = sample_from_progress(progress, query="q", rocksdb_rows_counted=False)
    assert counted is not None and uncounted is not None
    assert [op.rows for op in counted.state] == [1000]
    assert [op.rows for op in uncounted.state] == [None]
