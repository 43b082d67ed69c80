"""The lag model: records lag, time lag and rates from offset samples (pure, no I/O).

A *sample* is what one micro-batch of one query tells about each topic-partition it reads:
the end offset (true high watermark, as reported by the source) observed at some wall time,
and the processed offset (end offset of the last committed batch, the next offset to read).

- records lag = end − processed, never negative;
- time lag = how long ago the end offset was equal to the processed offset, found by linear
  interpolation in a short history of (wall time, end offset) points per partition, as
  kafka-lag-exporter does; 0 when caught up; extrapolated along the history's mean slope when
  the processed offset is older than the history;
- input rate = end-offset growth per second, processed rate = processed-offset growth per
  second, both over a window ending at the newest sample; the recent input rate over a short
  window, or a shorter one still when the input has just stepped up (:func:`step_rate`).

:class:`LagTracker` accumulates samples of every query behind a lock (the Spark listener
writes, the /metrics scrape and the autoscaler read) and answers :class:`QuerySnapshot`s,
which carry the age of their newest sample so that a reader can tell an outage from no lag.
It also holds the executor counts and scaling-decision counts that the autoscaler reports, so
that one object carries everything the /metrics endpoint exports.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamscale.kafka.offsets import OffsetError, from_json

TopicPartition = tuple[str, int]
Point = tuple[float, int]
"""``(wall time in seconds since the epoch, offset)``."""

DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
"""Upper bounds (seconds) of the batch-duration histogram; ``+Inf`` is implied."""

EXECUTOR_STATES = ("target", "running")


# --------------------------------------------------------------------------------- samples
@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """End and processed offsets of one topic-partition, as one progress event reports them."""

    topic: str
    partition: int
    end_offset: int
    processed_offset: int

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class BatchStats:
    """One committed micro-batch: what the autoscaler needs to measure processing capacity.

    ``busy_s`` is the whole trigger (``durationMs.triggerExecution``); ``process_s`` the
    execution of the batch itself (``durationMs.addBatch``).
    """

    batch_id: int
    wall_time: float
    records: int
    busy_s: float
    process_s: float
    state_loaded: int = 0
    """State stores its stateful operators loaded from the checkpoint (0: stateless)."""
    state_load_s: float = 0.0
    state_bytes_copied: int = 0

    @property
    def records_per_busy_second(self) -> float:
        return self.records / self.busy_s if self.busy_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class StateOperatorStats:
    """One stateful operator of a query as its last batch's progress reports it
    (``stateOperators``): how its state is spread and what keeping it cost.

    ``partitions`` is the operator's ``numShufflePartitions``, fixed at the query's first
    start: the stateful stage runs that many tasks, whatever the executor count. The RocksDB
    figures (``disk_bytes``, ``loaded``, ``load_s``, ``bytes_copied``) are None with another
    provider. ``rows`` is None where the session does not count RocksDB's rows
    (``spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false``, which saves a
    read per write): Spark then reports 0 whatever the state holds."""

    operator: str
    """``operatorName``, with ``#2``, ``#3``... when a query has several of one name."""
    partitions: int
    rows: int | None
    rows_updated: int
    rows_removed: int
    memory_bytes: int
    commit_s: float
    store_instances: int
    disk_bytes: int | None = None
    """Size of the SST files (``rocksdbSstFileSize``)."""
    loaded: int | None = None
    """State stores loaded from the checkpoint this batch (``rocksdbNumLoadedFromDfs``)."""
    load_s: float | None = None
    """Time spent loading state stores this batch (``rocksdbLoadLatencyMs``)."""
    bytes_copied: int | None = None
    """Checkpoint bytes copied this batch, both ways (``rocksdbBytesCopied``)."""


def state_operators(
    progress: Mapping[str, Any], *, rocksdb_rows_counted: bool = True
) -> tuple[StateOperatorStats, ...]:
    """The stateful operators of one progress (a ``StreamingQueryProgress``'s JSON).

    ``rocksdb_rows_counted``: the session's :data:`~streamscale.settings.ROCKSDB_ROWS_KEY`
    (Spark's default true);
    false makes ``rows`` None for RocksDB operators, known by their ``rocksdb*`` metrics."""
    out: list[StateOperatorStats] = []
    seen: dict[str, int] = {}
    for op in progress.get("stateOperators") or ():
        name = str(op.get("operatorName") or "state")
        seen[name] = seen.get(name, 0) + 1
        custom: Mapping[str, Any] = op.get("customMetrics") or {}
        load_ms = custom.get("rocksdbLoadLatencyMs")
        rocksdb = any(str(key).startswith("rocksdb") for key in custom)
        counted = rocksdb_rows_counted or not rocksdb
        out.append(
            StateOperatorStats(
                operator=name if seen[name] == 1 else f"{name}#{seen[name]}",
                partitions=int(op.get("numShufflePartitions") or 0),
                rows=int(op.get("numRowsTotal") or 0) if counted else None,
                rows_updated=int(op.get("numRowsUpdated") or 0),
                rows_removed=int(op.get("numRowsRemoved") or 0),
                memory_bytes=int(op.get("memoryUsedBytes") or 0),
                commit_s=float(op.get("commitTimeMs") or 0) / 1000.0,
                store_instances=int(op.get("numStateStoreInstances") or 0),
                disk_bytes=_int_or_none(custom.get("rocksdbSstFileSize")),
                loaded=_int_or_none(custom.get("rocksdbNumLoadedFromDfs")),
                load_s=None if load_ms is None else float(load_ms) / 1000.0,
                bytes_copied=_int_or_none(custom.get("rocksdbBytesCopied")),
            )
        )
    return tuple(out)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def state_size(operators: Sequence[StateOperatorStats]) -> int:
    """Bytes of a query's state, summed over its stateful operators: what a moved state
    partition reloads from the checkpoint (the SST files' size with RocksDB, the memory used
    by another provider)."""
    return sum(op.memory_bytes if op.disk_bytes is None else op.disk_bytes for op in operators)


def state_partitions(operators: Sequence[StateOperatorStats]) -> tuple[int, str] | None:
    """The fewest state partitions among a query's stateful operators, and that operator:
    the stateful stage with the fewest tasks (None without a stateful operator)."""
    known = [(op.partitions, op.operator) for op in operators if op.partitions > 0]
    return min(known) if known else None


@dataclass(frozen=True, slots=True)
class ProgressSample:
    """What one progress event of one query says.

    ``wall_time`` is when the end offsets were observed (seconds since the epoch).
    ``batch`` is None for samples that report no batch (idle refreshes); ``state`` holds the
    batch's stateful operators (none for a stateless query).
    """

    query: str
    wall_time: float
    partitions: tuple[PartitionOffsets, ...]
    batch: BatchStats | None = None
    state: tuple[StateOperatorStats, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetPoint:
    """One entry of a partition's history."""

    wall_time: float
    end_offset: int
    processed_offset: int


# ------------------------------------------------------------------------------- functions
def records_lag(end_offset: int, processed_offset: int) -> int:
    """Records between the processed offset and the end offset; never negative."""
    return max(0, end_offset - processed_offset)


def value_at(points: Sequence[Point], when: float) -> float:
    """The offset at ``when`` by linear interpolation (clamped to the first/last point).

    ``points`` are sorted by time. Raises ValueError when empty.
    """
    if not points:
        raise ValueError("no points")
    if when <= points[0][0]:
        return float(points[0][1])
    if when >= points[-1][0]:
        return float(points[-1][1])
    i = bisect.bisect_right([t for t, _ in points], when)
    (t0, v0), (t1, v1) = points[i - 1], points[i]
    if t1 <= t0:
        return float(v1)
    return v0 + (v1 - v0) * (when - t0) / (t1 - t0)


def offset_time(points: Sequence[Point], offset: int) -> float | None:
    """The wall time at which the end offset reached ``offset``, or None if it has not.

    ``points`` are (wall time, end offset) sorted by time with non-decreasing offsets. Between
    two points the end offset is assumed to grow linearly; before the first point it is
    extrapolated along the mean slope of the whole history. When that slope is unknown (one
    point, or no growth) the first point's time is returned: a lower bound of the true lag.
    """
    if not points or offset > points[-1][1]:
        return None
    offsets = [v for _, v in points]
    i = bisect.bisect_left(offsets, offset)  # first point whose end offset >= offset
    if i == 0:
        t0, v0 = points[0]
        t1, v1 = points[-1]
        if v1 > v0 and t1 > t0:
            return t0 - (v0 - offset) * (t1 - t0) / (v1 - v0)
        return t0
    (ta, va), (tb, vb) = points[i - 1], points[i]
    return ta + (offset - va) * (tb - ta) / (vb - va)


def time_lag_seconds(points: Sequence[Point], processed_offset: int, now: float) -> float:
    """How far behind in time ``processed_offset`` is at ``now``; 0 when caught up.

    The end offset is the newest point's. When records lag is positive the result is
    ``now`` minus :func:`offset_time` of the processed offset (never negative).
    """
    if not points or processed_offset >= points[-1][1]:
        return 0.0
    reached = offset_time(points, processed_offset)
    if reached is None:  # pragma: no cover - excluded by the test above
        return 0.0
    return max(0.0, now - reached)


def growth_rate(points: Sequence[Point], window_s: float) -> float:
    """Offset growth per second over the ``window_s`` seconds ending at the newest point.

    Uses what history there is when it is shorter than the window; 0 with fewer than two
    points in time. Never negative.
    """
    if len(points) < 2 or window_s <= 0:
        return 0.0
    t_end, v_end = points[-1]
    t_start = max(t_end - window_s, points[0][0])
    if t_end <= t_start:
        return 0.0
    return max(0.0, (v_end - value_at(points, t_start)) / (t_end - t_start))


STEP_LEAD = 0.1
"""How far the latest window's input rate must lead the recent window's to count as a step
(:func:`step_rate`): the noise of a steady input moves the two averages apart by less."""


def step_rate(recent: float, latest: float, lead: float = STEP_LEAD) -> float:
    """The recent input rate, a step up included: ``latest`` (the average of a shorter
    window) when it leads ``recent`` by more than ``lead``, else ``recent``.

    A step up that came within the recent window shows in it only in part: five seconds
    into a step from 1,000 to 3,000 records/s, the 10 s average says 2,000 and the 5 s one
    3,000. The first decision after the step then sizes for the step, not for a half of it
    that a second change, with a second pause, would have to top up. A fall is not taken
    early (a scale-down waits for every average to show it)."""
    return latest if latest > recent * (1 + lead) else recent


# ----------------------------------------------------------------------------- histories
class PartitionHistory:
    """A bounded history of :class:`OffsetPoint` for one partition.

    Runs of unchanged offsets keep only their first and last point, so that the time at which
    an offset was first reached survives and a few points cover a long quiet period. A point
    older than the newest is ignored; offsets going backwards (topic re-created, query reset
    to an older checkpoint) restart the history.
    """

    def __init__(self, max_points: int = 128) -> None:
        if max_points < 2:
            raise ValueError("max_points must be at least 2")
        self._points: deque[OffsetPoint] = deque(maxlen=max_points)

    def __len__(self) -> int:
        return len(self._points)

    @property
    def points(self) -> tuple[OffsetPoint, ...]:
        return tuple(self._points)

    @property
    def latest(self) -> OffsetPoint | None:
        return self._points[-1] if self._points else None

    def add(self, point: OffsetPoint) -> None:
        pts = self._points
        if pts:
            last = pts[-1]
            if point.wall_time < last.wall_time:
                return
            if point.end_offset < last.end_offset or point.processed_offset < last.processed_offset:
                pts.clear()
            else:
                same_time = point.wall_time == last.wall_time
                flat = len(pts) >= 2 and _same_offsets(point, last) and _same_offsets(last, pts[-2])
                if same_time or flat:  # replace instead of growing
                    pts[-1] = point
                    return
        pts.append(point)

    def end_points(self) -> list[Point]:
        return [(p.wall_time, p.end_offset) for p in self._points]

    def processed_points(self) -> list[Point]:
        return [(p.wall_time, p.processed_offset) for p in self._points]


def _same_offsets(a: OffsetPoint, b: OffsetPoint) -> bool:
    return a.end_offset == b.end_offset and a.processed_offset == b.processed_offset


# ---------------------------------------------------------------------------- histogram
@dataclass(frozen=True, slots=True)
class HistogramState:
    """A cumulative histogram: ``buckets`` are (upper bound, cumulative count), last +Inf."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    total: float


class _Histogram:
    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(b for b in bounds if math.isfinite(b)))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def state(self) -> HistogramState:
        cumulative: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return HistogramState(tuple(cumulative), running, self.total)


# ----------------------------------------------------------------------------- snapshots
@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Lag of one topic-partition of one query at snapshot time."""

    topic: str
    partition: int
    end_offset: int
    processed_offset: int
    records_lag: int
    time_lag_s: float


@dataclass(frozen=True, slots=True)
class QuerySnapshot:
    """Everything known about one query's lag at ``now``.

    ``age_s`` is how old the newest sample is (now − its wall time): a growing age means the
    signal is missing (query stuck or listener gone), which is not the same as zero lag.
    Rates are records per second summed over the query's partitions.
    """

    query: str
    now: float
    sample_time: float
    partitions: tuple[PartitionLag, ...]
    input_rate: float
    processed_rate: float
    batches: tuple[BatchStats, ...]
    batch_durations: HistogramState
    recent_input_rate: float | None = None
    """Input records/s over the tracker's short window, or its latest one when the input has
    just stepped up (:func:`step_rate`): a step shows in it first."""
    state_operators: tuple[StateOperatorStats, ...] = ()
    """The stateful operators of the query's last batch (none: stateless)."""

    @property
    def age_s(self) -> float:
        return max(0.0, self.now - self.sample_time)

    @property
    def total_lag(self) -> int:
        return sum(p.records_lag for p in self.partitions)

    @property
    def max_time_lag_s(self) -> float:
        return max((p.time_lag_s for p in self.partitions), default=0.0)

    def lag_by_topic(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.partitions:
            out[p.topic] = out.get(p.topic, 0) + p.records_lag
        return out

    def recent_capacity(self) -> list[tuple[int, float]]:
        """(records, busy seconds) of the recent batches, oldest first."""
        return [(b.records, b.busy_s) for b in self.batches]


@dataclass
class _QueryState:
    histories: dict[TopicPartition, PartitionHistory] = field(default_factory=dict)
    sample_time: float = -math.inf
    batches: deque[BatchStats] = field(default_factory=deque)
    durations: _Histogram | None = None
    state: tuple[StateOperatorStats, ...] = ()


class LagTracker:
    """Samples of every query → snapshots; thread-safe.

    ``max_points`` bounds each partition's history, ``max_batches`` the recent batches kept
    per query, ``rate_window_s`` the window of the input and processed rates,
    ``recent_window_s`` the short window of the recent input rate, ``latest_window_s`` the
    shorter one that catches a step up sooner (:func:`step_rate`).
    """

    def __init__(
        self,
        *,
        max_points: int = 128,
        max_batches: int = 64,
        rate_window_s: float = 30.0,
        recent_window_s: float = 10.0,
        latest_window_s: float = 5.0,
        duration_buckets: Sequence[float] = DEFAULT_DURATION_BUCKETS,
    ) -> None:
        self.max_points = max_points
        self.max_batches = max_batches
        self.rate_window_s = rate_window_s
        self.recent_window_s = recent_window_s
        self.latest_window_s = latest_window_s
        self.duration_buckets = tuple(duration_buckets)
        self._lock = threading.Lock()
        self._queries: dict[str, _QueryState] = {}
        self._executors: dict[str, dict[str, int]] = {}
        self._decisions: dict[tuple[str, str], int] = {}
        self._lost = 0
        self._capacity: dict[str, tuple[float | None, float | None]] = {}
        self._scale_cost: dict[str, tuple[float, int, float, float]] = {}
        self._loss_cost: dict[str, tuple[float, int]] = {}

    # samples ------------------------------------------------------------------------------
    def ingest(self, sample: ProgressSample) -> None:
        """Add one progress sample. Partitions absent from it are dropped from the query."""
        with self._lock:
            state = self._state(sample.query)
            seen: dict[TopicPartition, OffsetPoint] = {}
            for p in sample.partitions:
                point = OffsetPoint(sample.wall_time, p.end_offset, p.processed_offset)
                prior = seen.get(p.tp)
                if prior is not None:  # one topic read twice by the same query
                    point = OffsetPoint(
                        sample.wall_time,
                        max(prior.end_offset, point.end_offset),
                        min(prior.processed_offset, point.processed_offset),
                    )
                seen[p.tp] = point
            if sample.partitions:
                for tp in [tp for tp in state.histories if tp not in seen]:
                    del state.histories[tp]
            for tp, point in seen.items():
                history = state.histories.get(tp)
                if history is None:
                    history = state.histories[tp] = PartitionHistory(self.max_points)
                history.add(point)
            state.sample_time = max(state.sample_time, sample.wall_time)
            if sample.batch is not None:
                state.state = sample.state
                state.batches.append(sample.batch)
                while len(state.batches) > self.max_batches:
                    state.batches.popleft()
                if state.durations is None:
                    state.durations = _Histogram(self.duration_buckets)
                state.durations.observe(sample.batch.busy_s)

    def refresh(self, query: str, wall_time: float) -> None:
        """Record that at ``wall_time`` the query's offsets were still the last reported ones.

        For idle events: a trigger that finds no new data has seen end == processed.
        """
        with self._lock:
            state = self._queries.get(query)
            if state is None or wall_time <= state.sample_time:
                return
            for history in state.histories.values():
                last = history.latest
                if last is not None:
                    history.add(OffsetPoint(wall_time, last.end_offset, last.processed_offset))
            state.sample_time = wall_time

    def forget(self, query: str) -> None:
        """Drop everything about ``query`` (terminated): its series disappear from /metrics."""
        with self._lock:
            self._queries.pop(query, None)
            self._executors.pop(query, None)
            self._capacity.pop(query, None)
            self._scale_cost.pop(query, None)
            self._loss_cost.pop(query, None)

    def queries(self) -> list[str]:
        with self._lock:
            return sorted(self._queries)

    def _state(self, query: str) -> _QueryState:
        state = self._queries.get(query)
        if state is None:
            state = self._queries[query] = _QueryState()
        return state

    # snapshots ----------------------------------------------------------------------------
    def snapshot(self, query: str, now: float) -> QuerySnapshot | None:
        """The lag of ``query`` at ``now`` (seconds since the epoch); None if never sampled."""
        with self._lock:
            state = self._queries.get(query)
            if state is None or not math.isfinite(state.sample_time):
                return None
            return self._snapshot(query, state, now)

    def snapshots(self, now: float) -> list[QuerySnapshot]:
        """Snapshots of every sampled query, sorted by query name."""
        with self._lock:
            return [
                self._snapshot(q, s, now)
                for q, s in sorted(self._queries.items())
                if math.isfinite(s.sample_time)
            ]

    def _snapshot(self, query: str, state: _QueryState, now: float) -> QuerySnapshot:
        partitions: list[PartitionLag] = []
        input_rate = processed_rate = recent_input_rate = latest_input_rate = 0.0
        for (topic, partition), history in sorted(state.histories.items()):
            last = history.latest
            if last is None:
                continue
            ends = history.end_points()
            partitions.append(
                PartitionLag(
                    topic=topic,
                    partition=partition,
                    end_offset=last.end_offset,
                    processed_offset=last.processed_offset,
                    records_lag=records_lag(last.end_offset, last.processed_offset),
                    time_lag_s=time_lag_seconds(ends, last.processed_offset, now),
                )
            )
            input_rate += growth_rate(ends, self.rate_window_s)
            recent_input_rate += growth_rate(ends, self.recent_window_s)
            latest_input_rate += growth_rate(ends, self.latest_window_s)
            processed_rate += growth_rate(history.processed_points(), self.rate_window_s)
        durations = state.durations or _Histogram(self.duration_buckets)
        return QuerySnapshot(
            query=query,
            now=now,
            sample_time=state.sample_time,
            partitions=tuple(partitions),
            input_rate=input_rate,
            processed_rate=processed_rate,
            batches=tuple(state.batches),
            batch_durations=durations.state(),
            recent_input_rate=step_rate(recent_input_rate, latest_input_rate),
            state_operators=state.state,
        )

    # autoscaler reports -------------------------------------------------------------------
    def set_executors(
        self, query: str, *, target: int | None = None, running: int | None = None
    ) -> None:
        """Record the executor counts the autoscaler wants (target) and sees (running)."""
        with self._lock:
            counts = self._executors.setdefault(query, {})
            for state, value in (("target", target), ("running", running)):
                if value is not None:
                    if value < 0:
                        raise ValueError(f"{state} executors must be >= 0, got {value}")
                    counts[state] = value

    def executors(self) -> dict[str, dict[str, int]]:
        """``{query: {"target": n, "running": m}}`` as last set."""
        with self._lock:
            return {q: dict(c) for q, c in self._executors.items()}

    def set_capacity(
        self, query: str, *, fixed_cost_s: float | None, executor_rate: float | None
    ) -> None:
        """Record the autoscaler's capacity estimate of a query (None: unknown)."""
        with self._lock:
            self._capacity[query] = (fixed_cost_s, executor_rate)

    def capacities(self) -> dict[str, tuple[float | None, float | None]]:
        """``{query: (fixed cost s per batch, records/s per executor)}`` as last set."""
        with self._lock:
            return dict(self._capacity)

    def set_scale_cost(
        self, query: str, *, pause_s: float, reloaded: int, priced_s: float, base_s: float
    ) -> None:
        """Record the autoscaler's last measured scale event of a query: its pause, the state
        stores it reloaded; and what the next change is priced with: the whole state's reload
        time and the pause that does not grow with the state."""
        with self._lock:
            self._scale_cost[query] = (pause_s, reloaded, priced_s, base_s)

    def scale_costs(self) -> dict[str, tuple[float, int, float, float]]:
        """``{query: (last pause s, state stores reloaded, whole-state reload s priced next,
        base pause s priced next)}``."""
        with self._lock:
            return dict(self._scale_cost)

    def set_loss_cost(self, query: str, *, pause_s: float, reloaded: int) -> None:
        """Record what the last executors lost cost a query, as the autoscaler measured it:
        its pause (the batch in flight included) and the state stores reloaded."""
        with self._lock:
            self._loss_cost[query] = (pause_s, reloaded)

    def loss_costs(self) -> dict[str, tuple[float, int]]:
        """``{query: (last loss's pause s, state stores reloaded)}``."""
        with self._lock:
            return dict(self._loss_cost)

    def count_decision(self, direction: str, reason: str, n: int = 1) -> None:
        """Count a scaling decision (direction up|down|none, reason free text, low cardinality)."""
        if n < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            key = (direction, reason)
            self._decisions[key] = self._decisions.get(key, 0) + n

    def decisions(self) -> dict[tuple[str, str], int]:
        """``{(direction, reason): count}`` since start."""
        with self._lock:
            return dict(self._decisions)

    def count_lost(self, n: int = 1) -> None:
        """Count executors gone without the autoscaler removing them (crashed, host lost,
        pod evicted)."""
        if n < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self._lost += n

    def lost(self) -> int:
        """Executors lost since start (:meth:`count_lost`)."""
        with self._lock:
            return self._lost


def merge_offsets(
    end: Mapping[TopicPartition, int], processed: Mapping[TopicPartition, int]
) -> tuple[PartitionOffsets, ...]:
    """Pair end and processed offsets per partition: the inputs of the one lag definition
    (:func:`records_lag`), used by the console line, ``/metrics``, ``streamscale lag`` and the
    autoscaler alike.

    A partition missing from ``end`` takes its processed offset as end (nothing is known
    beyond it). A partition missing from ``processed`` (one the query has not reached yet, as
    a partition added to a subscribed topic) has processed nothing: offset 0, where Spark
    starts a partition it discovers — its whole log is lag, never zero."""
    out = []
    for tp in sorted(set(end) | set(processed)):
        done = processed.get(tp, 0)
        out.append(PartitionOffsets(tp[0], tp[1], max(end.get(tp, done), done), done))
    return tuple(out)


def progress_offsets(
    progress: Mapping[str, Any], is_kafka: Callable[[str], bool] | None = None
) -> tuple[tuple[PartitionOffsets, ...], int] | None:
    """The Kafka partitions of one progress (a ``StreamingQueryProgress``'s JSON): each
    source's processed offsets (``endOffset``) paired with the true end (``latestOffset``) by
    :func:`merge_offsets`, and the input rows of those sources.

    None when no Kafka source reported both (an unknown lag, never a zero one). Several
    sources reading one partition: the least processed, the greatest end.
    """
    check = is_kafka or is_kafka_description
    processed: dict[TopicPartition, int] = {}
    end: dict[TopicPartition, int] = {}
    records = 0
    found = False
    for source in progress.get("sources") or ():
        if not check(str(source.get("description", ""))):
            continue
        done = parse_offsets(source.get("endOffset"))
        latest = parse_offsets(source.get("latestOffset"))
        if done is None or latest is None:
            continue
        found = True
        for tp, off in done.items():
            processed[tp] = min(off, processed.get(tp, off))
        for tp, off in latest.items():
            end[tp] = max(off, end.get(tp, off))
        records += int(source.get("numInputRows") or 0)
    return (merge_offsets(end, processed), records) if found else None


KAFKA_DESCRIPTION = re.compile(r"PythonMicroBatchStream|KafkaV2|KafkaSource|KafkaMicroBatch")
"""Descriptions of sources that may be Kafka (the offsets' shape decides)."""


def is_kafka_description(description: str) -> bool:
    """True for descriptions of the streamscale source (any Python stream) or Spark's Kafka."""
    return bool(KAFKA_DESCRIPTION.search(description or ""))


def query_label(progress: Mapping[str, Any]) -> str:
    """The ``query`` label of a progress: the query's name, or its id when unnamed."""
    name = progress.get("name")
    return str(name) if name else str(progress.get("id"))


def parse_offsets(raw: Any) -> dict[TopicPartition, int] | None:
    """Kafka-shaped offsets (JSON text or already parsed) → ``{(topic, partition): offset}``.

    None when absent (``None``, ``"null"``, ``"None"``, empty) or not of the Kafka shape.
    """
    if raw is None or (isinstance(raw, str) and raw.strip() in ("", "null", "None")):
        return None
    try:
        offsets = from_json(raw)
    except OffsetError:
        return None
    return {(tp.topic, tp.partition): offset for tp, offset in offsets.items()} or None
