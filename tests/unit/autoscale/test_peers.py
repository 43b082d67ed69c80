"""The peer policies on worked examples from their docs, and their bounds under random inputs."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscale.autoscale import peers, simulator, traces
from streamscale.autoscale.peers import common, ds2, flink, keda_hpa, spark_dynamic
from streamscale.autoscale.policy import BatchSample, Observation, PolicyConfig, Reason
from streamscale.errors import ConfigError

BASE = PolicyConfig(min_executors=1, max_executors=8)
NOW = 1000.0


def obs(
    *,
    executors: int = 2,
    input_rate: float = 2000.0,
    lag: int = 0,
    batch_records: int = 2000,
    batch_busy_s: float = 1.0,
    batches: int = 10,
    pending: int = 0,
    partitions: int = 8,
    now: float = NOW,
    fresh: bool = True,
) -> Observation:
    """``batches`` one-second batches of ``batch_records`` records, each busy ``batch_busy_s``
    on ``executors`` executors, over the last ``batches`` seconds."""
    share, extra = divmod(lag, partitions)
    samples = tuple(
        BatchSample(batch_records, batch_busy_s, executors, now - batches + i)
        for i in range(batches)
    )
    return Observation(
        now_s=now,
        executors=executors,
        pending_executors=pending,
        partitions=partitions,
        partition_lag=tuple(share + (1 if i < extra else 0) for i in range(partitions)),
        input_rate=input_rate,
        recent_input_rate=input_rate,
        processed_rate=input_rate,
        batches=samples,
        metrics_age_s=1.0 if fresh else None,
        time_lag_s=0.0,
    )


# --- Flink (FLIP-271) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("input_rate", "lag", "utilization", "with_restart", "expected"),
    [
        # input / target utilization: 700 records/s at 0.7 need 1 000 records/s
        (700.0, 0.0, 0.7, False, 1000.0),
        # a backlog of 18 000 records to catch up within 30 min adds 10 records/s
        (700.0, 18_000.0, 0.7, False, 1010.0),
        # the restart's 5 min of input, caught up within 30 min: input / 6 more
        (600.0, 0.0, 1.0, True, 700.0),
        # utilization 0 (target 0.7 - boundary 0.7): no rate is enough
        (600.0, 0.0, 0.0, True, math.inf),
    ],
)
def test_flink_target_capacity(
    input_rate: float, lag: float, utilization: float, with_restart: bool, expected: float
) -> None:
    config = flink.defaults(BASE)
    got = flink.target_capacity(config, input_rate, lag, utilization, with_restart)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parallelism", "partitions", "upper", "expected"),
    [(3, 8, 8, 4), (5, 8, 8, 8), (4, 8, 8, 4), (1, 8, 8, 1), (4, 6, 8, 6), (5, 7, 6, 5)],
)
def test_flink_aligns_to_partitions(
    parallelism: int, partitions: int, upper: int, expected: int
) -> None:
    assert flink.aligned(parallelism, partitions, upper) == expected


def test_flink_scales_up_at_once_to_the_target_utilization() -> None:
    # 2 executors process 2 000 records/s of busy time; 2 100 arrive: outside the band (the
    # capacity needed at utilization 1.0 is 2 100). Target: 2 100 / 0.7 + 2 100 × 300 / 1800
    # = 3 350 records/s, a factor 1.675 → ceil(3.35) = 4 executors (a divisor of 8).
    decision, state = flink.decide(flink.defaults(BASE), flink.FlinkState(), obs(input_rate=2100))
    assert (decision.desired, decision.reason) == (4, Reason.SCALE_UP_RATE)
    assert decision.target == pytest.approx(3.35)
    assert state.collect_from_s == NOW + 300  # stabilization: nothing collected for 5 min


def test_flink_holds_within_the_utilization_band() -> None:
    # 2 000 records/s of true rate for 1 500 arriving: between 1 500 (utilization 1.0) and
    # 1 500 × 300/1800 + 1 500 / 0.4 = 4 000 (utilization 0.4, restart counted)
    decision, _ = flink.decide(flink.defaults(BASE), flink.FlinkState(), obs(input_rate=1500))
    assert decision.reason is Reason.HOLD_WITHIN_TOLERANCE
    assert decision.desired == 2


def test_flink_waits_the_window_after_a_change() -> None:
    config = flink.defaults(BASE)
    state = flink.FlinkState(collect_from_s=NOW - 100)  # stabilized 100 s ago, window 900 s
    decision, state = flink.decide(config, state, obs(input_rate=3000))
    assert decision.reason is Reason.HOLD_WARMING_UP
    assert len(state.samples) == 1


def test_flink_scale_down_waits_its_interval_and_takes_the_highest() -> None:
    # 8 executors at 8 000 records/s of true rate for 400 arriving: the scale-down is
    # capped by max-factor 0.6 (keep ceil(0.4 × 8) = 4, a divisor of 8).
    config = replace(flink.tuned(BASE), scale_down_interval_s=60.0)
    state = flink.FlinkState()
    seen = []
    for k, rate in enumerate((400.0, 400.0, 400.0, 400.0, 400.0, 400.0, 400.0)):
        observed = obs(executors=8, input_rate=rate, batch_records=8000, now=NOW + 10 * k)
        decision, state = flink.decide(config, state, observed)
        seen.append((decision.desired, decision.reason))
    assert seen[0] == (8, Reason.HOLD_STABILIZING)
    assert seen[5] == (8, Reason.HOLD_STABILIZING)
    assert seen[6] == (4, Reason.SCALE_DOWN_IDLE)


def test_flink_no_scale_down_while_processing_a_backlog() -> None:
    config = replace(flink.tuned(BASE), scale_down_interval_s=0.0)
    quiet = obs(executors=8, input_rate=400, batch_records=8000)
    assert flink.decide(config, flink.FlinkState(), quiet)[0].desired < 8
    behind = replace(quiet, partition_lag=(2000,) * 8)  # 16 000 records: 40 s of input
    assert flink.decide(config, flink.FlinkState(), behind)[0].desired >= 8


# --- DS2 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "useful_s", "instances", "expected"),
    [(10_000.0, 10.0, 1, 1000.0), (10_000.0, 5.0, 2, 1000.0), (0.0, 0.0, 2, None)],
)
def test_ds2_true_rate_per_instance(
    records: float, useful_s: float, instances: int, expected: float | None
) -> None:
    assert ds2.true_rate_per_instance(records, useful_s, instances) == expected


@pytest.mark.parametrize(
    ("input_rate", "batch_busy_s", "expected"),
    [
        # 2 executors each process 1 000 records/s of useful time: 3 000 arriving need 3
        (3000.0, 1.0, 3),
        # 2 000 records in 0.5 s on 2 executors: 2 000 per instance; 3 000 need 2 (hold)
        (3000.0, 0.5, 2),
        # 500 arriving need 1 (DS2 has no tolerance and no stabilization)
        (500.0, 1.0, 1),
    ],
)
def test_ds2_sizes_on_the_true_rate(input_rate: float, batch_busy_s: float, expected: int) -> None:
    decision, _ = ds2.decide(
        ds2.defaults(BASE), ds2.DS2State(), obs(input_rate=input_rate, batch_busy_s=batch_busy_s)
    )
    assert decision.desired == expected


def test_ds2_warms_up_two_intervals_after_a_change() -> None:
    config = ds2.defaults(BASE)
    state = ds2.DS2State(running=1, last_tick_s=NOW - 10)  # 1 ran, now 2: a change
    decision, state = ds2.decide(config, state, obs(input_rate=5000))
    assert decision.reason is Reason.HOLD_WARMING_UP
    later = obs(input_rate=5000, now=NOW + 20)
    assert ds2.decide(config, state, later)[0].desired == 5


# --- KEDA's Kafka scaler and the HPA --------------------------------------------------


@pytest.mark.parametrize(
    ("lag", "threshold", "partitions", "idle", "expected"),
    [
        (50, 10, 8, False, 50),
        (1000, 10, 8, False, 80),  # 1000 // 10 = 100 pods > 8 partitions: capped at 8 × 10
        (1000, 10, 8, True, 1000),  # allowIdleConsumers: no cap
        # 89 // 10 = 8: not above the partitions, so not capped; the HPA then asks for
        # ceil(8.9) = 9 pods, one more than partitions (the scaler's integer division)
        (89, 10, 8, False, 89),
    ],
)
def test_keda_metric_caps_at_the_partitions(
    lag: int, threshold: float, partitions: int, idle: bool, expected: int
) -> None:
    config = keda_hpa.HpaConfig(BASE, lag_threshold=threshold, allow_idle_consumers=idle)
    assert keda_hpa.kafka_metric(config, lag, partitions) == expected


@pytest.mark.parametrize(
    ("metric", "target", "current", "expected"),
    [
        (200.0, 100.0, 1, 2),  # the HPA docs: twice the target, twice the replicas
        (250.0, 100.0, 2, 3),  # 1.25 per pod: ceil(2.5)
        (210.0, 100.0, 2, 2),  # 1.05 per pod: within the 0.1 tolerance
        (50.0, 100.0, 4, 1),  # ceil(0.5)
        (0.0, 100.0, 3, 0),  # no lag: none (the bounds keep min)
    ],
)
def test_hpa_replica_calculator(metric: float, target: float, current: int, expected: int) -> None:
    config = keda_hpa.HpaConfig(BASE, lag_threshold=target)
    assert keda_hpa.recommendation(config, metric, current) == expected


def test_hpa_scale_up_rate_and_scale_down_window() -> None:
    config = keda_hpa.HpaConfig(replace(BASE, max_executors=64), lag_threshold=100.0)
    up, state = keda_hpa.decide(config, keda_hpa.HpaState(), obs(executors=1, lag=5000))
    assert up.desired == 5  # 50 wanted, at most max(1 + 4, 1 × 2) in one sync
    state = keda_hpa.HpaState(recommendations=((NOW - 200, 6),), last_sync_s=NOW - 15)
    down, state = keda_hpa.decide(config, state, obs(executors=6, lag=100))
    assert (down.desired, down.reason) == (6, Reason.HOLD_STABILIZING)  # 6 within 300 s
    later = obs(executors=6, lag=100, now=NOW + 120)
    assert keda_hpa.decide(config, state, later)[0].desired == 1  # 6 has left the window


def test_hpa_acts_once_per_sync_period() -> None:
    config = keda_hpa.HpaConfig(BASE, lag_threshold=100.0)
    state = keda_hpa.HpaState(last_sync_s=1005.0)  # same 15 s period as 1000 (1005 // 15)
    decision, _ = keda_hpa.decide(config, state, obs(executors=1, lag=5000, now=1010.0))
    assert decision.desired == 1


def test_keda_tuned_threshold_is_30_s_of_one_executor() -> None:
    assert keda_hpa.tuned(BASE, 1000.0).lag_threshold == 30_000.0


# --- Spark's dynamic allocation and the DStreams rule ---------------------------------


@pytest.mark.parametrize(
    ("pending_s", "added"), [(0.5, 0), (1.0, 1), (1.9, 1), (2.0, 3), (3.5, 7), (4.0, 15)]
)
def test_spark_adds_1_2_4_each_second_of_backlog(pending_s: float, added: int) -> None:
    assert spark_dynamic.executors_added(spark_dynamic.defaults(BASE), pending_s) == added


@pytest.mark.parametrize(
    ("busy_s", "tasks", "slots", "expected"),
    [(3.0, 8, 2, 2.25), (3.0, 8, 8, 0.0), (2.0, 8, 3, 4 / 3), (1.0, 4, 8, 0.0)],
)
def test_spark_pending_seconds(busy_s: float, tasks: int, slots: int, expected: float) -> None:
    assert spark_dynamic.pending_seconds(busy_s, tasks, slots) == pytest.approx(expected)


def test_spark_dynamic_grows_to_the_tasks_and_idles_down() -> None:
    config = spark_dynamic.defaults(BASE)
    # 3 s batches of 8 tasks on 2 executors: 2.25 s pending each, 3 more executors per batch
    busy = obs(executors=2, batch_busy_s=3.0, batches=3)
    decision, _ = spark_dynamic.decide(config, spark_dynamic.DynamicState(), busy)
    assert decision.desired == 8  # 2 + 3 + 3 + 3, capped at the 8 tasks
    idle = obs(executors=8, batches=0)
    state = spark_dynamic.DynamicState(last_tick_s=NOW - 10, last_batch_s=NOW - 61)
    assert spark_dynamic.decide(config, state, idle)[0].desired == 1


@pytest.mark.parametrize(
    ("batch_busy_s", "executors", "expected"),
    [(0.95, 2, 3), (2.4, 2, 4), (0.2, 3, 2), (0.5, 3, 3), (0.2, 1, 1)],
)
def test_dstreams_rule(batch_busy_s: float, executors: int, expected: int) -> None:
    config = spark_dynamic.streaming_defaults(BASE)
    state = spark_dynamic.StreamingState(last_run_s=NOW - 60)
    observed = obs(executors=executors, batch_busy_s=batch_busy_s, batches=60)
    assert spark_dynamic.decide_streaming(config, state, observed)[0].desired == expected


# --- every peer -----------------------------------------------------------------------


def test_named_peers_and_unknown() -> None:
    for name in peers.PEER_NAMES:
        assert peers.named(name, BASE, 1000.0, 0.5).name == name
    with pytest.raises(ConfigError, match="unknown peer"):
        peers.named("hpa", BASE, 1000.0, 0.5)


observations = st.builds(
    obs,
    executors=st.integers(0, 12),
    input_rate=st.floats(0, 20_000),
    lag=st.integers(0, 2_000_000),
    batch_records=st.integers(0, 40_000),
    batch_busy_s=st.floats(0, 30),
    batches=st.integers(0, 64),
    pending=st.integers(0, 4),
    partitions=st.integers(1, 16),
    fresh=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(peers.PEER_NAMES), first=observations, second=observations)
def test_every_peer_stays_within_bounds(name: str, first: Observation, second: Observation) -> None:
    """Whatever it sees, a peer asks for a count within ``[min, max]`` and scales up to no
    more executors than partitions (KEDA: one more, its integer division, see above); it is
    deterministic."""
    base = replace(BASE, min_executors=1, max_executors=10)
    peer: peers.Peer[Any, Any] = peers.named(name, base, 1000.0, 0.5)
    state = peer.state
    for observed in (first, replace(second, now_s=first.now_s + 10)):
        again, _ = peer.decide(peer.config, state, observed)
        decision, state = peer.decide(peer.config, state, observed)
        assert decision == again
        assert 1 <= decision.desired <= 10
        assert decision.current == common.current(observed)
        if decision.desired > decision.current:
            extra = 1 if name.startswith("keda") else 0
            assert decision.desired <= max(1, observed.partitions + extra)


@pytest.mark.parametrize("name", peers.PEER_NAMES)
def test_every_peer_runs_in_the_simulator(name: str) -> None:
    trace = traces.step()
    scenario = simulator.GENERIC
    config = scenario.policy_config()
    strategy = simulator.resolve(name, config, trace, scenario.model)
    first = simulator.simulate(trace, scenario.model, strategy)
    assert first.strategy == name
    assert first.summary == simulator.simulate(trace, scenario.model, strategy).summary
    assert max(first.requested) <= 8 and min(first.requested) >= 1
    assert first.decisions


def test_a_long_batch_counts_when_it_ends() -> None:
    """A batch that started before the last observation and ended after it is measured (a
    20 s batch at the batch limit on one executor would otherwise never be)."""
    long = BatchSample(20_000, 20.5, 1, NOW - 25.0)
    older = BatchSample(20_000, 20.5, 1, NOW - 46.0)
    observed = replace(obs(executors=1, batches=0), batches=(older, long))
    assert common.batches_since(observed, NOW - 10) == [long]
    decision, _ = ds2.decide(
        ds2.defaults(BASE),
        ds2.DS2State(),
        replace(observed, input_rate=4500, recent_input_rate=4500),
    )
    assert decision.desired == 5  # 20 000 records in 20.5 s of useful time: 4 500 need 5
