"""The demo's report and live view over synthetic timelines: no process is started."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from streamscale.autoscale.controller import DecisionRecord
from streamscale.experiment.report import (
    HTML_FILE,
    PNG_FILES,
    SUMMARY_FILE,
    DecisionMark,
    LiveView,
    PartitionPoint,
    TimelinePoint,
    point_from_snapshot,
    state_moves,
    summarize,
    to_marks,
    write_report,
)
from streamscale.lag.model import LagTracker, PartitionOffsets, ProgressSample

START = 1_700_000_000.0
TOPIC = "GAME-FRAME-RQ"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def point(t: float, lags: list[int] | None, target: int = 1, running: int = 1) -> TimelinePoint:
    """A point with per-partition ``lags`` (None: a gap without lag data)."""
    if lags is None:
        return TimelinePoint(t=t, executors_target=target, executors_running=running)
    parts = tuple(PartitionPoint(TOPIC, p, lag, lag / 1000) for p, lag in enumerate(lags))
    return TimelinePoint(
        t=t,
        partitions=parts,
        total_lag=sum(lags),
        max_time_lag_s=max(lags) / 1000,
        input_rate=2000.0 + 10 * t,
        processed_rate=1500.0 + 10 * t,
        executors_target=target,
        executors_running=running,
    )


def totals(*values: int | None) -> list[TimelinePoint]:
    """One point per second with the given total lag on one partition (None: gap)."""
    return [point(t, None if v is None else [v]) for t, v in enumerate(values)]


def record(t: float, direction: str, desired: int, reason: str, outcome: str) -> DecisionRecord:
    return DecisionRecord(
        time=START + t,
        query="sessions",
        running=1,
        pending=0,
        desired=desired,
        reason=reason,
        direction=direction,
        outcome=outcome,
    )


def run_timeline() -> tuple[list[TimelinePoint], list[DecisionRecord]]:
    """Steady, a burst (lag rises then drains), a gap in the metrics, one scale-out and in."""
    lags: list[list[int] | None] = [
        [0, 0],
        [0, 0],
        [500, 300],
        [1500, 900],
        None,  # metrics missing: drawn as a gap, never as 0
        [3000, 2000],  # peak 5000 at t=5
        [2000, 1000],
        [0, 0],  # drained at t=7
        [0, 0],
        [0, 0],
    ]
    target = [1, 1, 1, 2, 2, 2, 2, 2, 1, 1]
    running = [1, 1, 1, 1, 2, 2, 2, 2, 2, 1]
    points = [point(t, lags[t], target[t], running[t]) for t in range(10)]
    decisions = [
        record(3, "up", 2, "scale_up_backlog", "applied"),
        record(4, "none", 2, "hold_scaling_in_progress", "held"),
        replace(record(6, "up", 3, "scale_up_rate", "failed"), running=2),
        replace(
            record(8, "down", 1, "scale_down_idle", "applied"),
            running=2,
            removed=(("1", 0, 3, 6211),),
        ),
        replace(record(9, "none", 1, "hold_stabilizing", "held"), scale_costs=(SCALE_OUT_COST,)),
    ]
    return points, decisions


SCALE_OUT_COST = {
    "time": START + 3.05,
    "before": 1,
    "after": 2,
    "batches": 3,
    "pause_s": 1.25,
    "reloaded": 2,
    "load_s": 0.4,
    "bytes_copied": 4096,
}
"""What the controller measured over the three batches after the scale-out at t=3."""


# -------------------------------------------------------------------------------- summary
def test_summary_of_the_run() -> None:
    points, decisions = run_timeline()
    summary = summarize(
        points,
        decisions,
        records_in=1000,
        records_out=990,
        verified=True,
        start_epoch=START,
        extra={"pipeline": "game-sessions", "max_lag": -1},
    )
    assert summary == {
        "verified": True,
        "records_in": 1000,
        "records_out": 990,
        "max_lag": 5000,
        "final_lag": 0,
        "drain_time_s": 2.0,
        "scale_outs": 1,
        "scale_ins": 1,
        "scale_failures": 1,
        "decisions": 5,
        "drain_threshold": 0,
        "peak_lag_t_s": 5.0,
        "drained_at_s": 7.0,
        "duration_s": 9.0,
        "max_time_lag_s": 3.0,
        "max_input_rate": 2090.0,
        "max_processed_rate": 1590.0,
        "max_executors_target": 2,
        "max_executors_running": 2,
        "final_executors_running": 1,
        "points": 10,
        "points_without_lag": 1,
        "scale_events_measured": 1,
        "max_scale_pause_s": 1.25,
        "state_reloaded_after_scaling": 2,
        "state_bytes_copied_after_scaling": 4096,
        "state_moves": [
            {
                "t_s": 3.0,
                "before": 1,
                "after": 2,
                "reason": "scale_up_backlog",
                "removed_partitions": 0,
                "removed_bytes": 0,
                "batches": 3,
                "pause_s": 1.25,
                "reloaded": 2,
                "load_s": 0.4,
                "bytes_copied": 4096,
            },
            {  # the run ended before the scale-in's cost was measured
                "t_s": 8.0,
                "before": 2,
                "after": 1,
                "reason": "scale_down_idle",
                "removed_partitions": 3,
                "removed_bytes": 6211,
                "batches": None,
                "pause_s": None,
                "reloaded": None,
                "load_s": None,
                "bytes_copied": None,
            },
        ],
        "pipeline": "game-sessions",  # extra is added, but cannot override max_lag
    }
    json.dumps(summary, allow_nan=False)


def cost(t: float, before: int, after: int, pause: float) -> dict[str, float | int]:
    return {
        "time": START + t,
        "before": before,
        "after": after,
        "batches": 3,
        "pause_s": pause,
        "reloaded": after,
        "load_s": 0.1,
        "bytes_copied": 100,
    }


def applied(t: float, before: int, after: int, **fields: Any) -> dict[str, Any]:
    direction = "up" if after > before else "down"
    return {
        "time": START + t,
        "running": before,
        "desired": after,
        "direction": direction,
        "outcome": "applied",
        "reason": "r",
        **fields,
    }


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        pytest.param([], [], id="no decision"),
        pytest.param(
            [
                applied(10, 1, 2),
                {
                    **applied(20, 2, 2),
                    "direction": "none",
                    "outcome": "held",
                    "scale_costs": [cost(10.2, 1, 2, 3.5)],
                },
            ],
            [(10.0, 1, 2, 3.5, 0)],
            id="a cost measured later belongs to its change",
        ),
        pytest.param(
            [
                applied(10, 1, 2),
                applied(50, 2, 1, removed=[["3", 0, 4, 800], ["4", 1, 2, 200]]),
                {
                    **applied(60, 1, 1),
                    "outcome": "held",
                    "direction": "none",
                    "scale_costs": [cost(50.1, 2, 1, 2.0), cost(10.1, 1, 2, 4.0)],
                },
            ],
            [(10.0, 1, 2, 4.0, 0), (50.0, 2, 1, 2.0, 6)],
            id="costs matched by counts, removed partitions summed",
        ),
        pytest.param(
            [
                applied(10, 1, 2),
                {
                    **applied(20, 2, 2),
                    "outcome": "held",
                    "direction": "none",
                    "scale_costs": [cost(10.0, 2, 3, 9.0)],
                },
            ],
            [(10.0, 1, 2, None, 0)],
            id="a cost of another change is not attached",
        ),
        pytest.param(
            [
                applied(10, 1, 2),
                applied(30, 2, 1),
                applied(70, 1, 2),
                {
                    **applied(80, 2, 2),
                    "outcome": "held",
                    "direction": "none",
                    "scale_costs": [cost(70.1, 1, 2, 5.0)],
                },
            ],
            [(10.0, 1, 2, None, 0), (30.0, 2, 1, None, 0), (70.0, 1, 2, 5.0, 0)],
            id="the same counts twice: the nearest in time",
        ),
        pytest.param(
            [
                applied(10, 2, 1),
                {
                    **applied(20, 1, 1),
                    "outcome": "held",
                    "direction": "none",
                    "scale_costs": [{**cost(12.0, 2, 1, 30.0), "lost": True}],
                },
            ],
            [(10.0, 2, 1, None, 0)],
            id="executors lost are no change of the log",
        ),
        pytest.param(
            [{**applied(10, 1, 2), "outcome": "failed"}],
            [],
            id="a failed change moved nothing",
        ),
    ],
)
def test_state_moves(decisions: list[dict[str, Any]], expected: list[tuple[Any, ...]]) -> None:
    moves = state_moves(decisions, START)
    got = [(m.t, m.before, m.after, m.pause_s, m.removed_partitions) for m in moves]
    assert got == [pytest.approx(e) if None not in e else e for e in expected]


@pytest.mark.parametrize(
    ("lags", "threshold", "expected"),
    [
        pytest.param(
            [0, 100, 50, 0],
            0,
            {"max_lag": 100, "final_lag": 0, "drain_time_s": 2.0, "peak_lag_t_s": 1.0},
            id="rise-and-drain",
        ),
        pytest.param(
            [0, 100, 100, 50, 0],
            0,
            {"max_lag": 100, "drain_time_s": 2.0, "peak_lag_t_s": 2.0, "drained_at_s": 4.0},
            id="plateau: the drain starts at the last peak point",
        ),
        pytest.param(
            [0, 100, 50, None, 0],
            0,
            {"drain_time_s": 3.0, "drained_at_s": 4.0, "points_without_lag": 1},
            id="a gap is not drained",
        ),
        pytest.param(
            [0, 100, 50, 20, None],
            0,
            {"final_lag": 20, "drain_time_s": None, "drained_at_s": None},
            id="never drained, last point a gap: final lag is the last known",
        ),
        pytest.param(
            [0, 100, 40, 8, 0],
            10,
            {"drain_time_s": 2.0, "drained_at_s": 3.0, "drain_threshold": 10},
            id="threshold",
        ),
        pytest.param(
            [0, 0, 0],
            0,
            {"max_lag": 0, "final_lag": 0, "drain_time_s": 0.0, "peak_lag_t_s": None},
            id="never lagged",
        ),
        pytest.param(
            [None, None],
            0,
            {"max_lag": None, "final_lag": None, "drain_time_s": None, "max_time_lag_s": None},
            id="no lag data at all",
        ),
        pytest.param(
            [],
            0,
            {"max_lag": None, "duration_s": 0.0, "points": 0, "max_executors_running": None},
            id="empty",
        ),
    ],
)
def test_summary_lag_figures(
    lags: list[int | None], threshold: int, expected: dict[str, Any]
) -> None:
    summary = summarize(
        totals(*lags),
        [],
        records_in=0,
        records_out=0,
        verified=True,
        drain_threshold=threshold,
    )
    assert {k: summary[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("given", "expected"), [(True, True), (False, False), ("yes", False), (1, False)]
)
def test_verified_only_when_given_true(given: Any, expected: bool) -> None:
    summary = summarize([], [], records_in=1, records_out=1, verified=given)
    assert summary["verified"] is expected


# ------------------------------------------------------------------------------ decisions
def test_decisions_of_every_shape_on_the_run_axis() -> None:
    rec = record(12.5, "up", 2, "scale_up_backlog", "applied")
    logged = json.loads(record(30, "down", 1, "scale_down_idle", "applied").to_json())
    mark = DecisionMark(t=20, direction="none", desired=2, reason="hold_steady", outcome="held")
    marks = to_marks([logged, rec, mark], START)
    assert [(m.t, m.direction, m.desired, m.outcome) for m in marks] == [
        (12.5, "up", 2, "applied"),
        (20, "none", 2, "held"),
        (30.0, "down", 1, "applied"),
    ]
    assert marks[0].running == 1
    assert marks[0].label == "↑2 scale_up_backlog"
    assert [m.is_scaling for m in marks] == [True, False, True]


def test_epoch_decisions_need_the_start_epoch() -> None:
    with pytest.raises(ValueError, match="start_epoch"):
        to_marks([record(1, "up", 2, "scale_up_backlog", "applied")])


# ------------------------------------------------------------------------------ snapshots
def tracker_with(t: float, ends: list[int], done: list[int]) -> LagTracker:
    tracker = LagTracker()
    parts = tuple(
        PartitionOffsets(TOPIC, p, e, d) for p, (e, d) in enumerate(zip(ends, done, strict=True))
    )
    tracker.ingest(
        ProgressSample(
            "q", t - 10, tuple(PartitionOffsets(TOPIC, p, 0, 0) for p in range(len(ends)))
        )
    )
    tracker.ingest(ProgressSample("q", t, parts))
    return tracker


def test_point_from_snapshot() -> None:
    now = START + 60
    snapshot = tracker_with(now, [1000, 3000], [400, 3000]).snapshot("q", now)
    p = point_from_snapshot(snapshot, 60.0, 2, 1)
    assert p.has_lag
    assert p.lag == {f"{TOPIC}-0": 600, f"{TOPIC}-1": 0}
    assert p.total_lag == 600
    assert p.partitions[0].time_lag_s == pytest.approx(6.0)
    assert p.max_time_lag_s == pytest.approx(6.0)
    assert p.input_rate == pytest.approx(400.0)
    assert p.processed_rate == pytest.approx(340.0)
    assert (p.t, p.executors_target, p.executors_running) == (60.0, 2, 1)


def test_missing_or_stale_snapshot_is_a_gap() -> None:
    now = START + 60
    stale = tracker_with(now, [1000], [400]).snapshot("q", now + 45)
    for p in (
        point_from_snapshot(None, 3.0, 1, 1),
        point_from_snapshot(stale, 3.0, 1, 1, max_age_s=30),
    ):
        assert not p.has_lag
        assert (p.total_lag, p.input_rate, p.lag) == (None, None, {})
        assert (p.executors_target, p.executors_running) == (1, 1)
    assert point_from_snapshot(stale, 3.0, 1, 1).total_lag == 600  # no age limit given


# ---------------------------------------------------------------------------------- files
def plot_data(html: str) -> list[dict[str, Any]]:
    """The traces passed to Plotly.newPlot."""
    start = html.index("Plotly.newPlot(")
    begin = html.index("[", html.index('"timeline"', start))
    data, _ = json.JSONDecoder().raw_decode(html, begin)
    assert isinstance(data, list)
    return data


def test_write_report(tmp_path: Path) -> None:
    points, decisions = run_timeline()
    summary = summarize(
        points, decisions, records_in=1000, records_out=990, verified=True, start_epoch=START
    )
    out = tmp_path / "report"
    written = write_report(out, points, decisions, summary, start_epoch=START)

    names = [p.name for p in written]
    assert names == [SUMMARY_FILE, *PNG_FILES, HTML_FILE]
    assert all(p.parent == out for p in written)
    assert json.loads((out / SUMMARY_FILE).read_text()) == summary
    for name in PNG_FILES:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name

    html = (out / HTML_FILE).read_text()
    assert not re.search(r"<script[^>]+src=", html)  # plotly.js inline: opens offline
    assert "plotly.js v" in html
    traces = {t["name"]: t for t in plot_data(html)}
    assert {"total lag", f"{TOPIC}-0", f"{TOPIC}-1", "target", "running", "input"} <= set(traces)
    assert traces["total lag"]["x"] == list(range(10))
    assert traces["total lag"]["y"] == [0, 0, 800, 2400, None, 5000, 3000, 0, 0, 0]
    assert traces["input"]["y"][4] is None
    assert traces["running"]["y"] == [1, 1, 1, 1, 2, 2, 2, 2, 2, 1]
    assert traces["scale-out"]["x"] == [3.0] and traces["scale-in"]["x"] == [8.0]
    assert traces["failed scaling"]["x"] == [6.0]
    assert "scale_up_backlog" in traces["scale-out"]["text"][0]
    # the summary table and its JSON
    assert "<th>drain_time_s</th><td class='num'>2.000</td>" in html
    assert "<th>max_lag</th><td class='num'>5,000</td>" in html
    assert "<th>verified</th><td class='ok'>passed</td>" in html
    embedded = re.search(r'<script type="application/json" id="summary-json">(.*?)</script>', html)
    assert embedded is not None and json.loads(embedded.group(1)) == summary
    # the state each scale event moved, and its measured pause
    moves = re.search(r"<table id=\"state-moves\">(.*?)</table>", html, re.S)
    assert moves is not None
    rows = re.findall(r"<tr><td.*?</tr>", moves.group(1))
    assert len(rows) == 2
    assert "1 → 2" in rows[0] and ">1.25<" in rows[0] and ">4,096<" in rows[0]
    assert "2 → 1" in rows[1] and "3 (6,211 B)" in rows[1] and ">n/a<" in rows[1]


def test_write_report_without_data(tmp_path: Path) -> None:
    summary = summarize([], [], records_in=0, records_out=0, verified=False)
    written = write_report(tmp_path, [], [], summary)
    assert all(p.stat().st_size > 0 for p in written)
    assert "<th>verified</th><td class='ko'>failed</td>" in (tmp_path / HTML_FILE).read_text()
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["drain_time_s"] is None


def test_report_of_five_minutes_has_every_point_and_both_changes(tmp_path: Path) -> None:
    """A five-minute run (300 points, a gap in the lag, two changes) is reported whole; its
    speed is a benchmark's matter, not a timed assertion."""
    points = [
        point(t, None if 100 <= t < 105 else [max(0, 100 * min(t - 60, 200 - t))] * 4)
        for t in range(300)
    ]
    decisions = [
        record(70, "up", 2, "scale_up_backlog", "applied"),
        record(260, "down", 1, "scale_down_idle", "applied"),
    ]
    summary = summarize(
        points, decisions, records_in=1, records_out=1, verified=True, start_epoch=START
    )
    written = write_report(tmp_path / "run", points, decisions, summary, start_epoch=START)
    assert written[0].name == "summary.json"
    assert all(p.stat().st_size > 0 for p in written)
    assert [m.direction for m in to_marks(decisions, START) if m.is_scaling] == ["up", "down"]


# ------------------------------------------------------------------------------ live view
def test_live_view_prints_plain_lines_without_a_terminal() -> None:
    points, decisions = run_timeline()
    stream = io.StringIO()
    with LiveView(stream=stream, start_epoch=START) as view:
        assert not view.interactive
        view.update(points[0], [])
        view.update(points[3], decisions[:1])
        view.update(points[4], decisions[:2])
    assert stream.getvalue().splitlines() == [
        "t=0s lag=0 time_lag=0.0s in=2000/s out=1500/s executors=1/1 last=-",
        "t=3s lag=2400 time_lag=1.5s in=2030/s out=1530/s executors=2/1 "
        "last=up:scale_up_backlog@3s decision=scale_up_backlog",
        "t=4s lag=n/a time_lag=n/a in=n/a out=n/a executors=2/2 "
        "last=up:scale_up_backlog@3s decision=hold_scaling_in_progress",
    ]


def test_live_view_renders_a_rich_panel_on_a_terminal() -> None:
    points, decisions = run_timeline()
    console = Console(record=True, force_terminal=True, width=140, file=io.StringIO())
    with LiveView(console, start_epoch=START) as view:
        assert view.interactive
        view.update(points[3], decisions[:4])
    text = console.export_text()
    for figure in (
        "total lag 2,400",
        "max time lag 1.5 s",
        "input 2,030/s",
        "processed 1,530/s",
        "executors 2 target / 1 running",
        f"{TOPIC}-0",
        "1,500",
        "scale_up_backlog",
        "scale_up_rate",
        "failed",
        "scale_down_idle",
    ):
        assert figure in text, figure


def test_live_view_shows_a_gap_and_keeps_the_last_decisions() -> None:
    console = Console(record=True, force_terminal=True, width=140, file=io.StringIO())
    moves = [record(t, "up", 2, f"reason_{t}", "applied") for t in range(8)]
    holds = [record(8 + t, "none", 2, "hold_steady", "held") for t in range(20)]
    view = LiveView(console, start_epoch=START, decisions_shown=3)
    try:
        view.update(point(30, None, 2, 2), moves + holds)
    finally:
        view.stop()
    text = console.export_text()
    assert "no lag metrics" in text and "total lag n/a" in text
    assert "reason_7" in text and "reason_6" in text and "reason_5" not in text
    assert "hold_steady" in text
