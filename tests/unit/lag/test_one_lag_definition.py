"""One lag definition: the console line, ``/metrics`` (the tracker's snapshot), ``streamscale
lag`` and the policy's observation agree, including on a partition absent from ``endOffset``
(a partition added to a subscribed topic: its whole log is lag) and on a source that reports
no end (an unknown lag, never a zero one)."""

from __future__ import annotations

from typing import Any

import pytest

from streamscale.autoscale.controller import observation
from streamscale.cli.lag import rows_from_offsets
from streamscale.lag.listener import sample_from_progress
from streamscale.lag.model import LagTracker, parse_offsets
from streamscale.pipelines.runner import records_lag


def progress(end: dict[str, int], latest: dict[str, int] | None) -> dict[str, Any]:
    return {
        "id": "q-id",
        "name": "q",
        "batchId": 3,
        "timestamp": "2026-11-23T10:00:00.000Z",
        "durationMs": {"triggerExecution": 1000, "latestOffset": 10},
        "sources": [
            {
                "description": "KafkaV2[Subscribe[t]]",
                "endOffset": {"t": end},
                "latestOffset": None if latest is None else {"t": latest},
                "numInputRows": 10,
            }
        ],
    }


CASES = [
    ({"0": 100, "1": 50}, {"0": 150, "1": 50}, 50),
    ({"0": 100}, {"0": 100, "1": 70}, 70),  # partition 1 not reached yet: all of it
    ({"0": 100, "1": 9}, {"0": 90, "1": 9}, 0),  # never negative
    ({"0": 100, "1": 9}, {"0": 100}, 0),  # no end known beyond the processed offset
]


@pytest.mark.parametrize(("end", "latest", "expected"), CASES)
def test_console_metrics_cli_and_policy_agree(
    end: dict[str, int], latest: dict[str, int], expected: int
) -> None:
    raw = progress(end, latest)
    console = records_lag(raw)

    tracker = LagTracker()
    sample = sample_from_progress(raw)
    assert sample is not None
    tracker.ingest(sample)
    snap = tracker.snapshot("q", sample.wall_time + 1)
    assert snap is not None
    metrics = snap.total_lag

    processed = parse_offsets({"t": end}) or {}
    ends = parse_offsets({"t": latest}) or {}
    cli = sum(r.lag or 0 for r in rows_from_offsets("q", processed, ends))

    policy = observation(snap, now=sample.wall_time + 1, running=1, pending=0).total_lag
    assert console == metrics == cli == policy == expected


def test_no_end_offsets_is_unknown_everywhere() -> None:
    raw = progress({"0": 100}, None)
    assert records_lag(raw) is None
    assert sample_from_progress(raw) is None
    empty = observation(None, now=1.0, running=1, pending=0)
    assert empty.metrics_age_s is None, "the policy holds on missing metrics"
