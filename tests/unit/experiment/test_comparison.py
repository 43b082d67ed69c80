"""Figures that compare scalers on one run, and runs side by side: synthetic timelines,
executor lists and state placements; no process is started."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.experiment.comparison import (
    OBJECTIVE_S,
    ExecutorSpan,
    PlacementSample,
    executor_counts,
    executor_seconds,
    figures,
    lag_over_time,
    max_executors,
    median,
    medians,
    rescales,
    state_moved,
    state_on_removed,
    table,
    time_lag_buckets,
    unknown_lag_seconds,
    violation_seconds,
)
from streamscale.experiment.demo import (
    SPARK_DYNAMIC,
    STREAMSCALE,
    DemoError,
    DemoOptions,
    dynamic_allocation_conf,
    preflight,
)
from streamscale.experiment.report import TimelinePoint


def lagged(*time_lags: float | None, start: float = 0.0) -> list[TimelinePoint]:
    """One point a second from ``start`` with the given time lag (None: no lag data)."""
    return [
        TimelinePoint(t=start + i)
        if lag is None
        else TimelinePoint(t=start + i, total_lag=int(lag * 100), max_time_lag_s=lag)
        for i, lag in enumerate(time_lags)
    ]


def test_the_objective_is_the_policys_30_s() -> None:
    assert OBJECTIVE_S == 30.0


@pytest.mark.parametrize(
    ("lags", "start", "end", "want"),
    [
        ((0, 10, 20), 0, 3, 0.0),
        ((0, 31, 45, 29, 0), 0, 5, 2.0),
        # exactly at the objective is within it
        ((30, 30), 0, 2, 0.0),
        # the last point stands for the time until the window's end
        ((0, 40), 0, 10, 9.0),
        # points outside the window do not count
        ((40, 40, 40, 40), 2, 4, 2.0),
        # no lag data is not a violation
        ((None, None, 0), 0, 3, 0.0),
    ],
)
def test_violation_seconds(
    lags: tuple[float | None, ...], start: float, end: float, want: float
) -> None:
    assert violation_seconds(lagged(*lags), start, end) == want


def test_unknown_lag_seconds_count_the_gaps() -> None:
    points = lagged(0, None, None, 5, None)
    assert unknown_lag_seconds(points, 0, 6) == 4.0  # 2 in the middle, 2 from t=4 to the end


def test_violation_seconds_follow_uneven_sampling() -> None:
    points = [
        TimelinePoint(t=0, total_lag=0, max_time_lag_s=0.0),
        TimelinePoint(t=1.5, total_lag=10, max_time_lag_s=35.0),
        TimelinePoint(t=4.0, total_lag=0, max_time_lag_s=0.0),
    ]
    assert violation_seconds(points, 0, 5) == pytest.approx(2.5)


def test_time_lag_buckets_keep_the_highest_and_mark_gaps() -> None:
    points = lagged(1, 5, 3, None, None, 7, start=100)
    assert time_lag_buckets(points, 100, 106, width_s=2) == (5, 3, 7)
    assert time_lag_buckets(lagged(None, None), 0, 4, width_s=2) == (None, None)


SPANS = [
    ExecutorSpan("0", 5.0, None),  # the first executor, before the window
    ExecutorSpan("1", 40.0, 130.0),  # added by a scale-out, removed by a scale-in
]


def test_executor_seconds_within_the_window() -> None:
    assert executor_seconds(SPANS, 10, 200) == 190 + 90
    assert executor_seconds(SPANS, 50, 100) == 50 + 50
    assert executor_seconds(SPANS, 150, 200) == 50


def test_executor_counts_and_rescales() -> None:
    assert executor_counts(SPANS) == [(5.0, 1), (40.0, 2), (130.0, 1)]
    assert rescales(SPANS, 10, 200) == 2
    assert rescales(SPANS, 0, 100) == 1  # the first executor's start is no rescale
    assert rescales(SPANS, 100, 200) == 1


def test_the_first_executor_registering_late_is_no_rescale() -> None:
    """Dynamic allocation's first executor may register after the query started."""
    spans = [ExecutorSpan("0", 25.0, None), ExecutorSpan("1", 31.0, 250.0)]
    assert rescales(spans, 0, 300) == 2  # 1 → 2 and 2 → 1, not 0 → 1
    assert max_executors(SPANS, 10, 200) == 2
    assert max_executors(SPANS, 140, 200) == 1


def test_an_executor_replaced_at_the_same_instant_is_no_rescale() -> None:
    spans = [ExecutorSpan("0", 0.0, 50.0), ExecutorSpan("1", 50.0, None)]
    assert executor_counts(spans) == [(0.0, 1)]
    assert rescales(spans, 1, 100) == 0


@given(
    st.lists(
        st.tuples(
            st.floats(0, 1000, allow_nan=False),
            st.one_of(st.none(), st.floats(0, 1000, allow_nan=False)),
        ),
        max_size=6,
    ),
    st.floats(0, 500, allow_nan=False),
    st.floats(0, 500, allow_nan=False),
)
def test_executor_seconds_never_exceed_the_window_per_executor(
    raw: list[tuple[float, float | None]], start: float, length: float
) -> None:
    spans = [
        ExecutorSpan(str(i), a, None if r is None else max(a, r)) for i, (a, r) in enumerate(raw)
    ]
    total = executor_seconds(spans, start, start + length)
    assert 0 <= total <= len(spans) * length + 1e-9


def samples(*placements: str, start: float = 0.0) -> list[PlacementSample]:
    """One sample a second; ``"0011"``: partitions 0-1 on executor 0, 2-3 on executor 1."""
    return [
        PlacementSample(start + i, {p: e for p, e in enumerate(placement)})
        for i, placement in enumerate(placements)
    ]


@pytest.mark.parametrize(
    ("placements", "want"),
    [
        (("0000", "0000"), 0),
        (("0000", "0011"), 2),  # a spread over an added executor
        (("0011", "0000"), 2),  # the removed executor's partitions come back
        (("0011", "0101", "0011"), 4),  # bouncing back and forth
    ],
)
def test_state_moved(placements: tuple[str, ...], want: int) -> None:
    assert state_moved(samples(*placements)) == want


def test_a_partition_missing_from_a_sample_keeps_its_executor() -> None:
    partial = [
        PlacementSample(0, {0: "0", 1: "1"}),
        PlacementSample(1, {0: "0"}),
        PlacementSample(2, {0: "0", 1: "1"}),
    ]
    assert state_moved(partial) == 0


def test_state_on_removed_executors_is_read_before_the_removal() -> None:
    placed = samples("0011", "0011", "0000", start=128)  # executor 1 removed at 130
    assert state_on_removed(placed, SPANS, 10, 200) == 2
    assert state_on_removed(placed, SPANS, 10, 120) == 0  # removed after the window


def test_figures_of_a_run() -> None:
    points = lagged(0, 10, 35, 40, 20, 0, 0, 0, 0, 0, start=10)
    found = figures(points, SPANS, samples("0000", "0011", start=50), 10, 20)
    assert found.violation_s == 2.0
    assert found.max_time_lag_s == 40
    assert found.executor_s == 10
    assert found.rescales == 0
    assert found.time_lag_buckets == (40,)
    assert found.placement_samples == 0  # sampled after the window
    assert found.as_dict()["time_lag_buckets"] == [40]


def test_medians_and_the_table() -> None:
    runs = [
        {"violation_s": 10.0, "executor_s": 300.0, "verified": True, "time_lag_buckets": [1, 50]},
        {"violation_s": 30.0, "executor_s": 340.0, "verified": False, "time_lag_buckets": [3]},
    ]
    got = medians(runs)
    assert got["violation_s"] == 20.0
    assert got["executor_s"] == 320.0
    assert got["rescales"] is None
    assert got["verified"] == "1/2"
    assert got["time_lag_buckets"] == [2.0, 50.0]
    text = table({"streamscale": got, "spark-dynamic": got}, runs=2)
    assert text.splitlines()[0] == "| median of 2 runs | streamscale | spark-dynamic |"
    assert "| executor-seconds | 320 | 320 |" in text
    assert "| output verified | 1/2 | 1/2 |" in text
    over_time = lag_over_time({"streamscale": got}).splitlines()
    assert over_time[2:] == ["| 0 | 2.0 |", "| 10 | 50.0 |"]


def test_median_skips_unknown_values() -> None:
    assert median([None, 3, 1]) == 2.0
    assert median([None]) is None


def test_dynamic_allocation_as_a_user_enables_it() -> None:
    conf = dynamic_allocation_conf(1, 2)
    assert conf["spark.dynamicAllocation.enabled"] == "true"
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert conf["spark.dynamicAllocation.minExecutors"] == "1"
    assert conf["spark.dynamicAllocation.maxExecutors"] == "2"
    assert "spark.dynamicAllocation.executorIdleTimeout" not in conf  # Spark's default
    changed = dynamic_allocation_conf(1, 2, [("spark.dynamicAllocation.executorIdleTimeout", "5s")])
    assert changed["spark.dynamicAllocation.executorIdleTimeout"] == "5s"


@pytest.mark.parametrize(
    "key", ["spark.executor.cores", "spark.dynamicAllocation.enabled", "dynamicAllocation.x"]
)
def test_dynamic_allocation_refuses_other_settings(key: str) -> None:
    with pytest.raises(DemoError, match="not a setting of Spark's dynamic allocation"):
        dynamic_allocation_conf(1, 2, [(key, "1")])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"scaler": "keda"}, "unknown scaler"),
        (
            {
                "scaler": STREAMSCALE,
                "dynamic_allocation": (("spark.dynamicAllocation.executorIdleTimeout", "5s"),),
            },
            "need the spark-dynamic scaler",
        ),
        ({"scaler": SPARK_DYNAMIC, "run_for_s": 0.0}, "window must be positive"),
    ],
)
def test_preflight_refuses_bad_comparison_options(
    tmp_path: object, changes: dict[str, object], message: str
) -> None:
    options = DemoOptions(metrics_port=0, report_dir=tmp_path, **changes)  # type: ignore[arg-type]
    with pytest.raises(DemoError, match=message):
        preflight(options)
