"""Which state partitions each executor holds loaded, and how big they are: what removing it costs.

Spark's ``StateStoreRDD`` prefers, for each state partition, the executor that last loaded it
(the ``StateStoreCoordinator``). Removing an executor drops the partitions it holds, and the
next micro-batch reloads them elsewhere (RocksDB snapshot plus changelog replay from the
checkpoint), slower by the reload. Scale-in therefore removes the executor holding least.

What the driver exposes, found on a real stateful query (Spark 4.2, UI off as this project
runs it; see docs/benchmarks.md):

- Placement: a streaming query runs its jobs in the job group of its run id; the newest
  succeeded job's stage whose RDD graph holds a ``StateStoreRDD`` (or, for a stream-stream
  join, a ``StateStoreAwareZipPartitionsRDD``) ran one task per state partition, and the
  status store's task list gives each task's partition and executor. That executor loaded
  the partition and keeps it until it is lost or the partition is scheduled elsewhere.
- Size: the state operators' SQL metrics (rows, memory used by state, RocksDB figures) are
  *not* kept per task: the status store drops SQL accumulables from task data, and the query
  progress only sums them over partitions. The size of a partition is therefore read from
  the checkpoint (``<checkpoint>/state/<operator>/<partition>``, every operator summed):
  the snapshots and changelogs a reload reads, through the driver's Hadoop file system.

The pure parts (:class:`StatePartition`, :func:`placement_from_tasks`,
:func:`loaded_by_executor`) are plain functions; :class:`SparkStateReader` is the I/O edge.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from streamscale.settings import STATE_LOCALITY_WAIT_CAP_S

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STATEFUL_RDDS = ("StateStoreRDD", "StateStoreAwareZipPartitionsRDD")
"""RDD class names that mark a stage as loading state partitions (one per task)."""


@dataclass(frozen=True)
class StatePartition:
    """One state partition of one query, loaded on ``executor``; ``bytes`` its size in the
    checkpoint (every stateful operator of the query summed), None when unreadable."""

    query: str
    partition: int
    executor: str
    bytes: int | None = None


@dataclass(frozen=True)
class LoadedState:
    """What one executor holds loaded: ``partitions`` state partitions of ``bytes`` in all
    (None when the size of one of them is unknown)."""

    partitions: int = 0
    bytes: int | None = 0


NO_STATE = LoadedState()


@dataclass(frozen=True)
class TaskRecord:
    """One task attempt of a stage as the status store lists it."""

    task_id: int
    partition: int
    executor: str
    status: str
    launched: float | None = None  # epoch seconds
    seconds: float | None = None  # its run time, None while it runs


def stage_span_s(tasks: Iterable[TaskRecord]) -> float:
    """Seconds from the first launch to the last finish of a stage's succeeded tasks (0 when
    none is timed)."""
    timed = [
        (t.launched, t.launched + t.seconds)
        for t in tasks
        if t.status.upper() == "SUCCESS" and t.launched is not None and t.seconds is not None
    ]
    if not timed:
        return 0.0
    return max(end for _, end in timed) - min(start for start, _ in timed)


TIME_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def spark_time_s(value: str, bare_unit_s: float = 1e-3) -> float:
    """Seconds of a Spark time setting (``1s``, ``500ms``, ``2min``; a bare number is in
    ``bare_unit_s``, milliseconds for the locality waits). Spark reads whole numbers only."""
    found = re.fullmatch(r"(\d+)([a-z]*)", value.strip().lower())
    if found is None or (found[2] and found[2] not in TIME_UNITS_S):
        raise ValueError(f"not a Spark time: {value!r}")
    return int(found[1]) * (TIME_UNITS_S[found[2]] if found[2] else bare_unit_s)


def locality_wait_s(
    stage_seconds: Iterable[float], floor_s: float, cap_s: float = STATE_LOCALITY_WAIT_CAP_S
) -> float:
    """The process locality wait for stateful stages whose last runs took ``stage_seconds``
    (first launch to last finish): the longest, within ``floor_s`` and ``cap_s``, in tenths
    of a second. An executor that is free takes another's pending task once the wait has
    passed since it was first refused (Spark's delay scheduling), and the state is then
    reloaded there, and back the next batch. How long one executor still has work when
    another is done is less than the stage, so a wait of the stage keeps each partition
    where it is, also on a busy machine where the stage outlasts the floor."""
    longest = max(stage_seconds, default=0.0)
    return round(min(cap_s, max(floor_s, longest)), 1)


def placement_from_tasks(tasks: Iterable[TaskRecord]) -> dict[int, str]:
    """Partition → executor of its successful attempt (the latest one when speculation or a
    retry succeeded twice): where the partition's state was loaded."""
    out: dict[int, tuple[int, str]] = {}
    for t in tasks:
        if t.status.upper() != "SUCCESS":
            continue
        known = out.get(t.partition)
        if known is None or t.task_id > known[0]:
            out[t.partition] = (t.task_id, t.executor)
    return {p: e for p, (_, e) in sorted(out.items())}


def loaded_by_executor(partitions: Iterable[StatePartition]) -> dict[str, LoadedState]:
    """Executor id → the state partitions it holds and their bytes (None if one is unknown)."""
    counts: dict[str, int] = {}
    sizes: dict[str, int | None] = {}
    for p in partitions:
        counts[p.executor] = counts.get(p.executor, 0) + 1
        before = sizes.get(p.executor, 0)
        sizes[p.executor] = None if before is None or p.bytes is None else before + p.bytes
    return {e: LoadedState(counts[e], sizes[e]) for e in sorted(counts)}


def is_stateful_graph(dot: str) -> bool:
    """Whether a stage's RDD operation graph (Graphviz text) loads state partitions."""
    return any(name in dot for name in STATEFUL_RDDS)


def spread_plan(placement: Mapping[int, str], executors: Sequence[str]) -> dict[int, str]:
    """The fewest moves that spread state partitions evenly over ``executors``: partition →
    the executor it should move to (partitions that stay are absent).

    ``placement`` maps each state partition to the executor holding it. Every executor ends
    with ``n // k`` or ``n // k + 1`` partitions (``n`` partitions, ``k`` executors); those
    already holding most keep the larger quotas, each keeps the lowest-numbered partitions it
    holds, and a partition moves at most once. A partition held by an executor absent from
    ``executors`` (lost) is placed too: it is reloaded wherever it goes. Spark never does
    this itself: an added executor gets a state partition only when the scheduler happens to
    give it one (the StateStoreCoordinator keeps each partition where it was loaded).
    """
    live = sorted(set(executors), key=_executor_order)
    if not live:
        return {}
    held: dict[str, list[int]] = {e: [] for e in live}
    orphans: list[int] = []
    for p in sorted(placement):
        held.get(placement[p], orphans).append(p)
    n, k = len(placement), len(live)
    by_load = sorted(live, key=lambda e: (-len(held[e]), _executor_order(e)))
    quota = {e: n // k + (1 if i < n % k else 0) for i, e in enumerate(by_load)}
    free = list(orphans)
    for e in live:
        free.extend(held[e][quota[e] :])
    moves: dict[int, str] = {}
    for e in live:
        room = quota[e] - min(len(held[e]), quota[e])
        for p in sorted(free)[:room]:
            moves[p] = e
            free.remove(p)
    return moves


def _executor_order(executor: str) -> tuple[int, int, str]:
    """Numeric executor ids in numeric order, others after them by name."""
    return (0, int(executor), "") if executor.isdigit() else (1, 0, executor)


class StateReader(Protocol):
    """Reads, for every executor holding state, what it holds (executors absent hold none)."""

    def __call__(self) -> Mapping[str, LoadedState]: ...


class SparkStateReader:
    """Reads the state placement of the session's active streaming queries through py4j.

    For each query, looks back over at most ``max_jobs`` of its newest jobs for the newest
    succeeded one with a stateful stage, reads that stage's task placement from the status
    store, and the size of each placed partition from the query's checkpoint. A few py4j
    calls per query and one file-system summary per (operator, partition): cheap enough to
    run on every scale-in, which is the only time it runs.
    """

    def __init__(self, spark: SparkSession, *, max_jobs: int = 8) -> None:
        self._spark = spark
        self._sc = spark.sparkContext
        self._max_jobs = max_jobs

    def __call__(self) -> dict[str, LoadedState]:
        return loaded_by_executor(self.partitions())

    def partitions(self) -> list[StatePartition]:
        """Every state partition of the active queries with its executor and size."""
        out: list[StatePartition] = []
        for query in self._spark.streams.active:
            if not (query.lastProgress or {}).get("stateOperators"):
                continue  # stateless (or no batch yet): nothing loaded, no job to look at
            run_id = str(query.runId)
            placement = self.placement(run_id)
            if not placement:
                continue
            sizes = self.sizes(_checkpoint_root(query), placement)
            out.extend(
                StatePartition(run_id, p, executor, sizes.get(p))
                for p, executor in placement.items()
            )
        return out

    def placement(self, run_id: str) -> dict[int, str]:
        """State partition → executor, from the newest succeeded stateful stage of the query
        whose run id is ``run_id`` (empty when none is found among its newest jobs)."""
        placement: dict[int, str] = {}
        for tasks in self._stateful_stages(run_id):
            for p, e in placement_from_tasks(tasks).items():
                placement.setdefault(p, e)
        return placement

    def stage_seconds(self) -> list[float]:
        """First launch to last finish of each active stateful query's newest succeeded
        stateful stages: what the process locality wait is sized from."""
        return [
            stage_span_s(tasks)
            for query in self._spark.streams.active
            if (query.lastProgress or {}).get("stateOperators")
            for tasks in self._stateful_stages(str(query.runId))
        ]

    def _stateful_stages(self, run_id: str) -> list[list[TaskRecord]]:
        """The task attempts of each stateful stage of the newest succeeded job of the query
        whose run id is ``run_id`` that has one (newest stage first; empty when none is found
        among its newest jobs)."""
        tracker = self._sc.statusTracker()
        jobs = sorted(tracker.getJobIdsForGroup(run_id), reverse=True)[: self._max_jobs]
        for job_id in jobs:
            job = tracker.getJobInfo(job_id)
            if job is None or str(job.status) != "SUCCEEDED":
                continue
            stages = [
                list(self._tasks(stage_id))
                for stage_id in sorted(job.stageIds, reverse=True)
                if self._is_stateful(stage_id)
            ]
            if any(placement_from_tasks(tasks) for tasks in stages):
                return stages
        return []

    def sizes(self, checkpoint_root: str | None, partitions: Iterable[int]) -> dict[int, int]:
        """Partition → bytes under ``<checkpoint_root>/state/<operator>/<partition>``, summed
        over the operators; partitions that cannot be read are left out."""
        if checkpoint_root is None:
            return {}
        jvm: Any = self._sc._jvm
        try:
            state_dir = jvm.org.apache.hadoop.fs.Path(checkpoint_root, "state")
            fs = state_dir.getFileSystem(self._sc._jsc.hadoopConfiguration())
            operators = [s.getPath() for s in fs.listStatus(state_dir) if s.isDirectory()]
        except Exception as exc:  # no state directory yet, or an unreadable checkpoint
            log.debug("state sizes unreadable under %s: %s", checkpoint_root, exc)
            return {}
        out: dict[int, int] = {}
        for p in partitions:
            total = 0
            for operator in operators:
                path = jvm.org.apache.hadoop.fs.Path(operator, str(p))
                try:
                    if fs.exists(path):
                        total += int(fs.getContentSummary(path).getLength())
                except Exception as exc:
                    log.debug("state size of %s unreadable: %s", path, exc)
                    break
            else:
                out[p] = total
        return out

    # -- py4j ---------------------------------------------------------------------------

    def _store(self) -> Any:
        return self._sc._jsc.sc().statusStore()

    def _is_stateful(self, stage_id: int) -> bool:
        jvm: Any = self._sc._jvm
        try:
            graph = self._store().operationGraphForStage(stage_id)
            dot = str(jvm.org.apache.spark.ui.scope.RDDOperationGraph.makeDotFile(graph))
        except Exception:  # the stage's graph is no longer kept
            return False
        return is_stateful_graph(dot)

    def _tasks(self, stage_id: int) -> Iterator[TaskRecord]:
        jvm: Any = self._sc._jvm
        info = self._sc.statusTracker().getStageInfo(stage_id)
        if info is None:
            return
        tasks = self._store().taskList(stage_id, info.currentAttemptId, info.numTasks * 4 + 16)
        for t in jvm.scala.jdk.javaapi.CollectionConverters.asJava(tasks):
            duration = t.duration()
            yield TaskRecord(
                int(t.taskId()),
                int(t.partitionId()),
                str(t.executorId()),
                str(t.status()),
                int(t.launchTime().getTime()) / 1000,
                int(duration.get()) / 1000 if duration.isDefined() else None,
            )


def _checkpoint_root(query: Any) -> str | None:
    """The resolved checkpoint location of a running query (py4j), None if unknown."""
    try:
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception:
        return None


STORE_NAMES = (
    "default",
    "left-keyToNumValues",
    "left-keyWithIndexToValue",
    "right-keyToNumValues",
    "right-keyWithIndexToValue",
)
"""State store names a partition may hold: one per aggregation, four per stream-stream join."""


def spread_state(
    spark: SparkSession,
    reader: SparkStateReader | None = None,
    executors: Mapping[str, str] | None = None,
) -> dict[str, dict[int, str]]:
    """Spread the state partitions of the active stateful queries over the live executors
    (:func:`spread_plan`); returns, per query run id, partition → executor it was moved to.

    A move tells Spark's StateStoreCoordinator that the partition's stores are now on the
    target executor (``reportActiveInstance``, as an executor reports a store it loaded):
    the next batch's stateful stage prefers that executor for the partition, the executor
    loads it from the checkpoint once, and the old one unloads its copy at its next
    maintenance (it is no longer the active instance). ``executors`` maps the live executor
    ids to their hosts (by default, the status store's). Meant right after an added executor
    registers: it moves each partition at most once, and nothing when already even.
    """
    sc = spark.sparkContext
    reader = reader or SparkStateReader(spark)
    if executors is None:
        executors = _live_executors(spark)
    jvm: Any = sc._jvm
    pkg = jvm.org.apache.spark.sql.execution.streaming.state
    coordinator = spark._jsparkSession.streams().stateStoreCoordinator()
    empty = jvm.PythonUtils.toSeq([])
    out: dict[str, dict[int, str]] = {}
    for query in spark.streams.active:
        if not (query.lastProgress or {}).get("stateOperators"):
            continue
        run_id = str(query.runId)
        root = _checkpoint_root(query)
        placement = reader.placement(run_id)
        moves = spread_plan(placement, list(executors))
        if root is None or not moves:
            continue
        uuid = jvm.java.util.UUID.fromString(run_id)
        operators = _operator_ids(spark, root)
        for p, executor in moves.items():
            for operator in operators:
                for name in STORE_NAMES:
                    store = pkg.StateStoreId(root + "/state", operator, p, name)
                    provider = pkg.StateStoreProviderId(store, uuid)
                    if name == "default" or coordinator.getLocation(provider).isDefined():
                        coordinator.reportActiveInstance(
                            provider, executors[executor], executor, empty
                        )
        log.info("state partitions of query %s moved: %s", run_id, moves)
        out[run_id] = moves
    return out


def _live_executors(spark: SparkSession) -> dict[str, str]:
    """Active executor id → host, from the status store (the driver left out)."""
    sc = spark.sparkContext
    jvm: Any = sc._jvm
    store = sc._jsc.sc().statusStore()
    out: dict[str, str] = {}
    for s in jvm.scala.jdk.javaapi.CollectionConverters.asJava(store.executorList(True)):
        executor = str(s.id())
        if executor != "driver":
            out[executor] = str(s.hostPort()).rsplit(":", 1)[0]
    return out


def _operator_ids(spark: SparkSession, root: str) -> list[int]:
    """The stateful operator ids of a checkpoint (``<root>/state/<id>``); [0] if unreadable."""
    sc = spark.sparkContext
    jvm: Any = sc._jvm
    try:
        state_dir = jvm.org.apache.hadoop.fs.Path(root, "state")
        fs = state_dir.getFileSystem(sc._jsc.hadoopConfiguration())
        names = [str(s.getPath().getName()) for s in fs.listStatus(state_dir) if s.isDirectory()]
    except Exception:
        return [0]
    return sorted(int(n) for n in names if n.isdigit()) or [0]
