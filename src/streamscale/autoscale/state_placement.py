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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

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
        tracker = self._sc.statusTracker()
        jobs = sorted(tracker.getJobIdsForGroup(run_id), reverse=True)[: self._max_jobs]
        for job_id in jobs:
            job = tracker.getJobInfo(job_id)
            if job is None or str(job.status) != "SUCCEEDED":
                continue
            placement: dict[int, str] = {}
            for stage_id in sorted(job.stageIds, reverse=True):
                if self._is_stateful(stage_id):
                    for p, e in placement_from_tasks(self._tasks(stage_id)).items():
                        placement.setdefault(p, e)
            if placement:
                return placement
        return {}

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
            yield TaskRecord(
                int(t.taskId()), int(t.partitionId()), str(t.executorId()), str(t.status())
            )


def _checkpoint_root(query: Any) -> str | None:
    """The resolved checkpoint location of a running query (py4j), None if unknown."""
    try:
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception:
        return None
