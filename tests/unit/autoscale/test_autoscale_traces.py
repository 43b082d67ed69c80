"""Built-in traces and CSV trace files, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamscale.autoscale import traces


@pytest.mark.parametrize("name", sorted(set(traces.BUILTIN) - {"demo"}))
def test_builtin(name: str) -> None:
    trace = traces.load(name)
    rates = trace.per_second()
    assert len(rates) == trace.duration_s >= 1200
    assert min(rates) >= 500 and max(rates) <= 6500  # within 1..8 executors of 1000 rec/s
    assert trace.rate_at(0) == rates[0]


def test_step_shape() -> None:
    trace = traces.step()
    assert trace.step_changes == 2
    assert (trace.rate_at(119), trace.rate_at(120), trace.rate_at(720)) == (1000, 4500, 1000)


def test_demo_profile() -> None:
    """``streamscale demo``'s defaults: 800 frames/s (1 592 records/s) for 36 s, 450 000
    frames in 10 s, 800 frames/s for 72 s, then nothing until 240 s."""
    trace = traces.load("demo")
    rates = trace.per_second()
    steady = 800 * (1 + 100 / 101)
    assert rates[0] == rates[35] == rates[46] == rates[117] == pytest.approx(steady, abs=0.01)
    assert sum(rates[36:46]) == pytest.approx(450_000 * (1 + 100 / 101), abs=1)
    assert rates[118] == rates[-1] == 0
    assert trace.duration_s == 240


def test_csv(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("t_seconds,input_rate\n0,100\n10,2000.5\n\n30,0\n", encoding="utf-8")
    trace = traces.load(str(path), tail_s=20)
    assert trace.name == "burst"
    assert trace.duration_s == 50
    rates = trace.per_second()
    assert (rates[9], rates[10], rates[29], rates[30], rates[49]) == (100, 2000.5, 2000.5, 0, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "<trace>:1: the header must be 't_seconds,input_rate'"),
        ("time,rate\n0,1\n", "<trace>:1: the header must be"),
        ("t_seconds,input_rate\n", "<trace>: no data rows"),
        ("t_seconds,input_rate\n0,abc\n", "<trace>:2: not a number: '0,abc'"),
        ("t_seconds,input_rate\n0,1,2\n", "<trace>:2: expected 2 columns, found 3"),
        ("t_seconds,input_rate\n0,-1\n", "<trace>:2: values must be finite and >= 0"),
        ("t_seconds,input_rate\n0,nan\n", "<trace>:2: values must be finite and >= 0"),
        ("t_seconds,input_rate\n5,1\n", "<trace>:2: the first row must be at t_seconds 0"),
        ("t_seconds,input_rate\n0,1\n10,2\n10,3\n", "<trace>:4: t_seconds must increase"),
        ("t_seconds,input_rate\n0,1\n1.5,2\n", "<trace>:3: t_seconds must be a whole second"),
    ],
)
def test_csv_errors(text: str, message: str) -> None:
    with pytest.raises(traces.TraceError) as info:
        traces.parse_csv(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_unknown_name_or_file(tmp_path: Path) -> None:
    with pytest.raises(traces.TraceError, match="not a built-in trace .* nor a file"):
        traces.load(str(tmp_path / "missing.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(traces.TraceError, match="cannot read"):
        traces.load(str(bad))


def _record(t: float, lag: int | None, batches: list[int]) -> dict[str, object]:
    """A decision record at ``t`` with ``total_lag`` and batches of these sizes."""
    return {
        "time": 1_000.0 + t,
        "total_lag": lag,
        "batches": [[i, 1_000.0 + t - 1, 0.5, n, 1] for i, n in enumerate(batches)],
    }


def test_a_decision_log_replays_its_input() -> None:
    records = [
        _record(0, None, []),  # no metrics yet: not replayed
        _record(5, 0, [300]),
        _record(10, 2_000, [1_000]),  # 1 000 processed + 2 000 more behind: 600 rec/s
        _record(15, 500, [4_000]),  # 4 000 processed, 1 500 less behind: 500 rec/s
        _record(20, 0, [500]),  # 500 processed, 500 less behind: 0 rec/s
    ]
    trace = traces.from_decision_log(records[::-1])  # in any order
    assert trace.points == ((0, 600.0), (5, 500.0), (10, 0.0))
    assert trace.duration_s == 15
    assert traces.from_decision_log(records, tail_s=10).duration_s == 25


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([], "no two decision records with metrics"),
        ([_record(5, 0, [])], "no two decision records with metrics"),
        ([{"time": "x", "total_lag": 0}], "not a decision log record"),
    ],
)
def test_a_decision_log_that_cannot_be_replayed(
    records: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(traces.TraceError, match=message):
        traces.from_decision_log(records)


def test_a_decision_log_file_loads_as_its_replayed_input(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    records = [_record(5, 0, [300]), _record(10, 2_000, [1_000])]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    trace = traces.load(str(path))
    assert (trace.name, trace.points) == ("decisions", ((0, 600.0),))
    path.write_text("{not json\n")
    with pytest.raises(traces.TraceError, match=r"decisions.jsonl:1: not JSON"):
        traces.load(str(path))
