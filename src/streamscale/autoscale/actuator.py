"""The actuator: the I/O edge that applies an executor count to a live Spark application.

The controller decides a target; an :class:`Actuator` reads how many executors run and applies
the target. :class:`SparkActuator` drives the SparkContext through py4j; :class:`FakeActuator`
is an in-memory stand-in for unit tests of the controller.

What Spark 4.3 does on standalone, found by experiment (see docs/benchmarks.md):

- Dynamic allocation must be off: ``SparkContext.killExecutors`` refuses to run with it, and
  its queued-task heuristic would fight the autoscaler. With it off, the Master grants
  ``spark.cores.max / spark.executor.cores`` executors at application start
  (``spark.executor.instances`` is ignored on standalone), so ``spark.cores.max`` is the
  ceiling and ``apply(initial)`` brings the count down to the start value.
- ``requestTotalExecutors(n, 0, Map())`` sets the Master's executor limit: raising it launches
  executors (registered about 3 s later); lowering it stops nothing that runs.
  ``requestExecutors(k)`` adds to an internal target, so it is not used.
- ``killExecutors(ids)`` stops executors: the process exits and the Master frees its cores
  at once, the driver forgets it after ``spark.standalone.executorRemoveDelayOnDisconnection``
  (5 s by default; :func:`streamscale.cluster.app_conf` sets 1 s). It also lowers the internal
  target by one per executor, and a kill before any request sets that target to 0 (then a
  crashed executor is never replaced). The actuator therefore kills first and then re-sends
  the exact total, after which the Master replaces a crashed executor by itself.
- A total above ``spark.cores.max / spark.executor.cores`` is acknowledged but never granted,
  so targets are clamped to that ceiling.
- A killed executor stays in ``getExecutorIds()`` until it is gone; the scheduler backend's
  ``isExecutorActive`` excludes it, so a second ``apply`` during that time kills no one else.

What Spark's Kubernetes backend does (read from ``KubernetesClusterSchedulerBackend`` and
``ExecutorPodsAllocator`` of Spark 4.2; not run here, no API server on this machine):

- At start it asks for ``spark.executor.instances`` executors (2 when unset);
  ``spark.cores.max`` means nothing there (:func:`initial_executors`,
  :func:`max_executors_from_conf`).
- ``requestTotalExecutors(n)`` sets the pod allocator's target: it creates the missing
  executor pods, at most ``spark.kubernetes.allocation.batch.size`` per round of
  ``spark.kubernetes.allocation.batch.delay`` (1 s). Lowering the target deletes only pods
  still *pending*, and only those requested more than ``spark.dynamicAllocation.
  executorIdleTimeout`` ago (60 s); it never deletes a running executor's pod. So the
  scale-in path is the same as on standalone: kill, then send the exact total.
- ``killExecutors(ids)`` tells each executor to exit at once and, after
  ``spark.kubernetes.dynamicAllocation.deleteGracePeriod`` (5 s), deletes the pods still
  running (the pod's ``terminationGracePeriodSeconds`` applies); finished pods are deleted by
  the lifecycle manager (``spark.kubernetes.executor.deleteOnTermination``). Executor ids are
  never reused: every scale-out creates new pods (``spark.kubernetes.allocation.maximum``
  caps how many over the application's life, see :mod:`streamscale.autoscale.headroom`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from streamscale.autoscale.headroom import DYNAMIC_ALLOCATION_ON
from streamscale.autoscale.state_placement import (
    NO_STATE,
    LoadedState,
    SparkStateReader,
    StateReader,
    locality_wait_s,
    spark_time_s,
    spread_state,
)
from streamscale.errors import ConfigError, Error
from streamscale.settings import LOCALITY_WAIT_PROCESS, STATE_LOCALITY_WAIT

log = logging.getLogger(__name__)


Spreader = Callable[[Mapping[str, str]], Mapping[str, Mapping[int, str]]]
"""Spreads state partitions over the executors given (id → host); what moved, per query."""


class ExecutorWaitTimeout(Error, TimeoutError):
    """The executor count did not reach what was waited for in time."""


if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Direction = Literal["up", "down", "none"]


@dataclass(frozen=True)
class ExecutorState:
    """One executor as the driver sees it (the driver itself is never listed)."""

    id: str
    host_port: str = ""
    active_tasks: int = 0
    total_tasks: int = 0

    @property
    def idle(self) -> bool:
        return self.active_tasks == 0


@dataclass(frozen=True)
class Removed:
    """An executor a scale-in removed, and what its loss costs: the tasks it was running and
    the state partitions it held loaded (``state_bytes`` None: size unknown), which the next
    micro-batch reloads on another executor."""

    id: str
    active_tasks: int = 0
    state_partitions: int = 0
    state_bytes: int | None = 0

    def as_tuple(self) -> tuple[str, int, int, int | None]:
        """``(id, active tasks, state partitions, state bytes)``, as the decision log has it."""
        return (self.id, self.active_tasks, self.state_partitions, self.state_bytes)


@dataclass(frozen=True)
class ApplyResult:
    """What one :meth:`Actuator.apply` did.

    ``target`` is the total sent to the cluster manager (``requested`` clamped to
    ``[0, max_executors]``); ``killed`` the executors asked to stop, cheapest loss first
    (:func:`choose_victims`), and ``removed`` the same with what each held;
    ``acknowledged`` whether the cluster manager accepted the request; ``error`` why not.
    """

    requested: int
    target: int
    before: int
    killed: tuple[str, ...] = ()
    acknowledged: bool = True
    error: str | None = None
    removed: tuple[Removed, ...] = ()

    @property
    def direction(self) -> Direction:
        if self.target > self.before:
            return "up"
        if self.target < self.before:
            return "down"
        return "none"

    @property
    def ok(self) -> bool:
        return self.acknowledged and self.error is None


@runtime_checkable
class Actuator(Protocol):
    """Reads and sets the executor count of one application."""

    def running(self) -> int:
        """Executors registered and not being removed (the driver excluded)."""
        ...

    def apply(self, target: int) -> ApplyResult:
        """Ask for ``target`` executors in total; idempotent, so it may be repeated."""
        ...

    def lost(self) -> tuple[Lost, ...]:
        """Executors gone since the last call that no :meth:`apply` removed (a crash, a
        host cut off, a preempted pod), each once, with the cluster's reason."""
        ...

    def registered_since(self, since_s: float) -> list[float]:
        """When executors registered with the driver at or after ``since_s`` (seconds since
        the epoch), those gone since included: what a scale-out's start is measured on."""
        ...


@dataclass(frozen=True)
class Lost:
    """An executor that left without the autoscaler removing it: the count may be below
    target until the cluster manager replaces it (the Master or the pod allocator does)."""

    id: str
    reason: str = ""
    time_s: float | None = None
    """When the driver removed it (seconds since the epoch; None: not reported): the batch
    then in flight is the first its loss slowed (:attr:`.scale_cost.ScaleEvent.lost`)."""

    def as_tuple(self) -> tuple[str, str]:
        """``(id, reason)``, as the decision log has it."""
        return (self.id, self.reason)


def newly_lost(
    removed: Mapping[str, Lost], reported: set[str], killed: set[str]
) -> tuple[Lost, ...]:
    """The executors of ``removed`` (by id: every executor the driver has seen go) not
    reported before nor killed by the autoscaler, oldest id first."""
    fresh = [i for i in removed if i not in reported and i not in killed]
    return tuple(removed[i] for i in sorted(fresh, key=_id_order))


def _id_order(executor_id: str) -> tuple[int, str]:
    return (int(executor_id), "") if executor_id.isdigit() else (1 << 62, executor_id)


def choose_victims(
    executors: list[ExecutorState],
    count: int,
    state: Mapping[str, LoadedState] | None = None,
) -> list[ExecutorState]:
    """The ``count`` executors to kill: those whose loss costs least.

    Idle first, then least busy (a running task would re-run elsewhere); among executors
    equally busy, the one holding the fewest state bytes, then the fewest state partitions
    (each lost partition is reloaded by the next batch), then the newest. ``state`` maps an
    executor id to what it holds loaded; an executor absent from it holds nothing. When the
    size of some executor's state is unknown, sizes are ignored and partitions decide. With
    no state information, this is newest idle first: the newest holds the least cache.
    """
    if count <= 0:
        return []
    state = state or {}
    sizes_known = all(s.bytes is not None for s in state.values())

    def cheapest_first(e: ExecutorState) -> tuple[int, int, int, int, str]:
        held = state.get(e.id, NO_STATE)
        size = (held.bytes or 0) if sizes_known else 0
        numeric = -int(e.id) if e.id.isdigit() else 0
        return (e.active_tasks, size, held.partitions, numeric, e.id)

    return sorted(executors, key=cheapest_first)[:count]


def removed_executor(victim: ExecutorState, state: Mapping[str, LoadedState]) -> Removed:
    """The record of a victim with the state it held (none when absent from ``state``)."""
    held = state.get(victim.id, NO_STATE)
    return Removed(victim.id, victim.active_tasks, held.partitions, held.bytes)


def describe_removed(
    executor: str, active_tasks: int, state_partitions: int, state_bytes: int | None
) -> str:
    """One phrase for the log: ``removed executor 1 (2 tasks, 3 state partitions, 6211 B)``."""
    size = "size unknown" if state_bytes is None else f"{state_bytes} B"
    tasks = f"{active_tasks} tasks, " if active_tasks else ""
    return f"removed executor {executor} ({tasks}{state_partitions} state partitions, {size})"


def clamp(target: int, max_executors: int | None) -> int:
    """``target`` within ``[0, max_executors]`` (no upper bound when None)."""
    target = max(0, target)
    return target if max_executors is None else min(target, max_executors)


def _takes_instances(master: str) -> bool:
    """Whether the cluster manager of ``master`` starts ``spark.executor.instances`` executors
    and ignores ``spark.cores.max`` (Kubernetes, YARN), unlike standalone."""
    return master.startswith(("k8s://", "yarn"))


def max_executors_from_conf(conf: Mapping[str, str]) -> int | None:
    """Executor ceiling implied by ``spark.cores.max / spark.executor.cores`` (None: unbounded).

    Only standalone reads ``spark.cores.max``: on Kubernetes and YARN (``spark.master`` says
    which) it bounds nothing, and a total above it is granted like any other."""
    cores_max = conf.get("spark.cores.max")
    if cores_max is None or _takes_instances(conf.get("spark.master", "")):
        return None
    per_executor = int(conf.get("spark.executor.cores", "1"))
    return max(0, int(cores_max) // max(1, per_executor))


DEFAULT_EXECUTOR_INSTANCES = 2
"""Spark's ``spark.executor.instances`` when unset and dynamic allocation is off (its
``SchedulerBackendUtils.getInitialTargetExecutorNumber``)."""


def initial_executors(conf: Mapping[str, str], max_executors: int) -> int:
    """How many executors the cluster manager starts for a session with ``conf`` (dynamic
    allocation off), before the autoscaler asks for anything: what the start waits for.

    Kubernetes (and YARN) start ``spark.executor.instances`` (2 when unset): the Kubernetes
    backend asks its pod allocator for that total when it starts. Standalone grants
    ``spark.cores.max / spark.executor.cores`` (``spark.executor.instances`` is ignored
    there), or up to ``max_executors`` when no ceiling is set."""
    if _takes_instances(conf.get("spark.master", "")):
        raw = conf.get("spark.executor.instances", "").strip()
        return max(0, int(raw)) if raw.isdigit() else DEFAULT_EXECUTOR_INSTANCES
    ceiling = max_executors_from_conf(conf)
    return max_executors if ceiling is None else ceiling


class SparkActuator:
    """Applies executor targets to a running SparkSession through its SparkContext (py4j).

    Needs Spark's dynamic allocation off and a cluster manager that takes executor requests
    (standalone, Kubernetes, YARN); in local mode there are no executors to scale and
    :meth:`apply` reports an error. Executors a kill was sent for are not counted as running.

    With ``kill_busy`` (the default) a scale-in that finds too few idle executors also kills
    the least busy ones (their tasks re-run elsewhere and do not count as failures); without
    it only idle executors go, and a later :meth:`apply` finishes the job.

    A scale-in removes the executors whose loss costs least (:func:`choose_victims`): it reads
    which state partitions each executor holds loaded with ``state_reader`` (by default
    :class:`~streamscale.autoscale.state_placement.SparkStateReader`, the status store and
    the checkpoints); when that read fails, it chooses as without state (newest idle first).

    A scale-out spreads the state partitions over the executors once the added ones have
    registered (``spreader``, by default :func:`~streamscale.autoscale.state_placement.
    spread_state`): Spark keeps every partition on the executor that loaded it, so without
    this an added executor gets state only when the scheduler happens to hand it a task (in
    docs/benchmarks.md, 4 of 8 partitions after 6 batches, whichever it was given). The spread
    runs from :meth:`running`, which the controller polls every step, until nothing is left
    to move, at most ``spread_attempts`` times, each after the batches that were running at
    the last move have reported (such a batch may report partitions back where it loaded
    them, and until then the placement read is the one before the move). A scale-in
    likewise gives the partitions of the executors it removes to those it keeps, evenly,
    before the kill.

    For a partition to stay where it is (and where a spread puts it), a task must wait a
    moment for its executor: ``process_locality_wait`` is set as ``spark.locality.wait.
    process`` in the running SparkContext, once a stateful query runs (stateless queries'
    Kafka tasks keep running at once wherever a core is free), unless the session sets it
    (None: left alone). With the project's ``spark.locality.wait=0s`` alone, a free executor
    takes a busy one's partition and the two reload it back and forth (docs/benchmarks.md).
    Node and rack waits stay 0: a stage waits that long at most once for the partitions of
    a lost executor. The wait is a floor: at most every ``adapt_every_s``, after a new
    batch, it is set to the last stateful stage's time (``stage_seconds``, by default from
    the status store's tasks) when that is more, up to 10 s: on a busy machine one executor
    is still at work more than the floor after another is done, which would take its task.
    A scale-in hands the victims' partitions over before the kill, and sets the wait to 0
    until the victims are gone and ``restore_wait_s`` passed (the next batch's Kafka tasks
    may still prefer a victim), then back.
    """

    def __init__(
        self,
        spark: SparkSession,
        *,
        kill_busy: bool = True,
        state_reader: StateReader | None = None,
        spreader: Spreader | None = None,
        spread_attempts: int = 5,
        process_locality_wait: str | None = STATE_LOCALITY_WAIT,
        restore_wait_s: float = 5.0,
        stage_seconds: Callable[[], Sequence[float]] | None = None,
        adapt_every_s: float = 10.0,
    ) -> None:
        self._spark = spark
        self._sc = spark.sparkContext
        self._jsc: Any = self._sc._jsc.sc()
        self._kill_busy = kill_busy
        reader = SparkStateReader(spark)
        self._state_reader: StateReader = state_reader or reader
        self._spreader: Spreader = spreader or (lambda hosts: spread_state(spark, executors=hosts))
        self._spread_attempts = spread_attempts
        self._spread_due: int | None = None  # the executor count a due spread waits for
        self._spread_left = 0
        self._spread_marks: dict[str, int] = {}  # query run id -> its last batch at a move
        self.spreads: list[Mapping[str, Mapping[int, str]]] = []  # what each spread moved
        self._lock = threading.Lock()
        conf = {str(k): str(v) for k, v in self._sc.getConf().getAll()}
        if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise ConfigError(DYNAMIC_ALLOCATION_ON)
        self.max_executors = max_executors_from_conf(conf)
        self._wait_to_set = None if LOCALITY_WAIT_PROCESS in conf else process_locality_wait
        self._wait_set: str | None = None  # the wait this actuator set, once set
        try:
            self._wait_floor_s = spark_time_s(process_locality_wait or "0")
        except ValueError as exc:
            raise ConfigError(f"process_locality_wait: {exc} (say 1s or 500ms)") from None
        self._stage_seconds = stage_seconds or reader.stage_seconds
        self._adapt_every_s = adapt_every_s
        self._adapted: tuple[dict[str, int], float] = ({}, float("-inf"))  # (batches, when)
        self._restore_s = restore_wait_s
        self._restore_at: tuple[set[str], float] | None = None  # (victims, not before)
        self.target: int | None = None  # the last total applied, None before any apply
        self._killed: set[str] = set()  # every executor this actuator asked to stop
        self._reported: set[str] | None = None  # removed executors already told; None: none read

    def _set_conf(self, key: str, value: str) -> None:
        """Set ``key`` in the running SparkContext's own conf: the scheduler reads the
        locality waits from it for every new task set, so the next stage has it."""
        try:
            self._jsc.conf().set(key, value)
        except Exception as exc:
            log.warning("%s not set: %s", key, _short(exc))

    def _restore_due(self) -> bool:
        """Whether the wait a scale-in lifted is due back: its victims gone, time passed."""
        if self._restore_at is None or time.monotonic() < self._restore_at[1]:
            return False
        return not self._restore_at[0] & set(self.executor_ids(include_removing=True))

    def _adapt_wait(self) -> None:
        """Size the process locality wait from the last stateful stages' time, once a new
        batch is done and ``adapt_every_s`` passed (a status store read, a few py4j calls)."""
        batches, when = self._adapted
        now = time.monotonic()
        if now - when < self._adapt_every_s:
            return
        done = self._last_batches()
        if not done or done == batches:
            return
        self._adapted = (done, now)
        try:
            seconds = self._stage_seconds()
        except Exception as exc:  # the status store no longer has the stage: next time
            log.debug("stage times unreadable: %s", _short(exc))
            return
        wait = f"{round(locality_wait_s(seconds, self._wait_floor_s) * 1000)}ms"
        if self._wait_set is None or spark_time_s(wait) != spark_time_s(self._wait_set):
            longest = max(seconds, default=0.0)
            log.info("process locality wait %s (the longest stateful stage: %.1f s)", wait, longest)
            self._set_conf(LOCALITY_WAIT_PROCESS, wait)
            self._wait_set = wait

    def _last_batches(self) -> dict[str, int]:
        """Run id -> id of the last batch reported, for each active stateful query (empty
        when none can be read)."""
        try:
            return {
                str(q.runId): int(progress["batchId"])
                for q in self._spark.streams.active
                if (progress := q.lastProgress) and progress.get("stateOperators")
            }
        except Exception:  # no streaming queries manager (a stub), or the session is stopping
            return {}

    def _stateful_query_runs(self) -> bool:
        try:
            return any(
                (q.lastProgress or {}).get("stateOperators") for q in self._spark.streams.active
            )
        except Exception:  # no streaming queries manager (a stub), or the session is stopping
            return False

    # -- reading -------------------------------------------------------------------------

    def _to_list(self, seq: Any) -> list[Any]:
        jvm: Any = self._sc._jvm
        return list(jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq))

    def executor_ids(self, *, include_removing: bool = False) -> list[str]:
        """Ids of registered executors (the driver excluded), without those a kill was sent
        for unless ``include_removing`` (they stay registered until their process is gone)."""
        ids = [str(i) for i in self._to_list(self._jsc.getExecutorIds())]
        if include_removing:
            return ids
        backend = self._jsc.schedulerBackend()
        try:
            return [i for i in ids if backend.isExecutorActive(i)]
        except Exception:  # a backend without executor tracking (local mode)
            return ids

    def executors(self) -> list[ExecutorState]:
        """Active executors with their running and total task counts (status store view)."""
        summaries = {
            str(s.id()): s for s in self._to_list(self._jsc.statusStore().executorList(True))
        }
        out = []
        for executor_id in self.executor_ids():
            summary = summaries.get(executor_id)
            if summary is None:  # registered, not yet seen by the status listener
                out.append(ExecutorState(executor_id))
            else:
                out.append(
                    ExecutorState(
                        executor_id,
                        str(summary.hostPort()),
                        int(summary.activeTasks()),
                        int(summary.totalTasks()),
                    )
                )
        return out

    def removed_executors(self) -> dict[str, Lost]:
        """Every executor the driver has seen go, by id, with Spark's removal reason and
        time, from the status store, which keeps the last ``spark.ui.retainedDeadExecutors``
        (100)."""
        out = {}
        for s in self._to_list(self._jsc.statusStore().executorList(False)):
            executor_id = str(s.id())
            if executor_id == "driver" or bool(s.isActive()):
                continue
            reason, removed = s.removeReason(), s.removeTime()
            out[executor_id] = Lost(
                executor_id,
                str(reason.get()) if reason.isDefined() else "",
                removed.get().getTime() / 1000.0 if removed.isDefined() else None,
            )
        return out

    def lost(self) -> tuple[Lost, ...]:
        """Executors gone since the last call that this actuator did not kill; the first
        call only learns what had gone before it."""
        try:
            removed = self.removed_executors()
        except Exception as exc:  # the session stopping: nothing to report this step
            log.debug("removed executors unreadable: %s", _short(exc))
            return ()
        with self._lock:
            if self._reported is None:
                self._reported = set(removed)
                return ()
            found = newly_lost(removed, self._reported, self._killed)
            self._reported |= set(removed)
        return found

    def registered_since(self, since_s: float) -> list[float]:
        """Spark's ``addTime`` of every executor the status store lists (the last
        ``spark.ui.retainedDeadExecutors`` gone ones included) at or after ``since_s``."""
        found = []
        for s in self._to_list(self._jsc.statusStore().executorList(False)):
            if str(s.id()) == "driver":
                continue
            added = s.addTime().getTime() / 1000.0
            if added >= since_s:
                found.append(added)
        return sorted(found)

    def running(self) -> int:
        if self._wait_to_set is not None and self._stateful_query_runs():
            self._set_conf(LOCALITY_WAIT_PROCESS, self._wait_to_set)
            self._wait_set, self._wait_to_set = self._wait_to_set, None
        if self._restore_due():
            self._set_conf(LOCALITY_WAIT_PROCESS, self._wait_set or "0s")
            self._restore_at = None
        elif self._wait_set is not None and self._restore_at is None:
            self._adapt_wait()
        count = len(self.executor_ids())
        if self._spread_due is not None and count >= self._spread_due:
            self.spread()
        return count

    def _spread_over(self, hosts: Mapping[str, str]) -> Mapping[str, Mapping[int, str]]:
        try:
            moved = self._spreader(hosts)
        except Exception as exc:
            log.warning("state partitions not spread: %s", _short(exc))
            moved = {}
        self.spreads.append(moved)
        return moved

    def spread(self) -> Mapping[str, Mapping[int, str]]:
        """Spread the state partitions over the executors now (``spreader``); returns what
        moved, per query. Waits (moves nothing) while an executor is not yet in the status
        store (its host unknown). A failed spread is logged and counts as an attempt: the
        query runs on, its state only less spread."""
        if not self._spread_landed():
            return {}
        hosts = _hosts(self.executors())
        if not all(hosts.values()):
            return {}
        moved = self._spread_over(hosts)
        self._spread_marks = self._last_batches()
        self._spread_left -= 1
        if not any(moved.values()) or self._spread_left <= 0:
            self._spread_due = None
        return moved

    def _spread_landed(self) -> bool:
        """Whether every batch that was running at the last move has reported since. Until
        then the placement read is the one before the move, and that batch may load a moved
        partition where it was and report it back there: the next check waits for it."""
        done = self._last_batches()
        return all(done.get(run_id, mark + 1) > mark for run_id, mark in self._spread_marks.items())

    # -- acting --------------------------------------------------------------------------

    def _request_total(self, total: int) -> bool:
        jvm: Any = self._sc._jvm
        empty = jvm.PythonUtils.toScalaMap({})
        return bool(self._jsc.requestTotalExecutors(total, 0, empty))

    def _kill(self, ids: list[str]) -> bool:
        jvm: Any = self._sc._jvm
        return bool(self._jsc.killExecutors(jvm.PythonUtils.toSeq(ids)))

    def apply(self, target: int) -> ApplyResult:
        """Kill surplus executors (idle first), then request exactly ``target`` in total."""
        with self._lock:
            wanted = clamp(target, self.max_executors)
            executors = self.executors()
            before = len(executors)
            surplus = before - wanted
            state: Mapping[str, LoadedState] = {}
            if surplus > 0:
                state = self.loaded_state()
                if state:  # the read took time: the choice is made on what runs now
                    executors = self.executors()
            victims = choose_victims(executors, surplus, state)
            if not self._kill_busy:
                victims = [v for v in victims if v.idle]
            killed = tuple(v.id for v in victims)
            removed = tuple(removed_executor(v, state) for v in victims)
            if any(r.state_partitions for r in removed):
                # The victims' partitions go to the executors kept, evenly, before the kill:
                # the next batch loads each there once, where it then stays.
                kept = [e for e in executors if e.id not in killed]
                hosts = _hosts(kept)
                if kept and all(hosts.values()):
                    self._spread_over(hosts)
            if killed and self._wait_set is not None:
                # Tasks planned before the driver forgets the victims (Kafka's prefer them)
                # would wait for them: no wait until they are gone and restore_wait_s passed.
                self._set_conf(LOCALITY_WAIT_PROCESS, "0s")
                self._restore_at = (set(killed), time.monotonic() + self._restore_s)
            self._killed |= set(killed)
            try:
                kill_ok = self._kill(list(killed)) if killed else True
                request_ok = self._request_total(wanted)
            except Exception as exc:  # py4j errors carry the JVM message
                return ApplyResult(target, wanted, before, killed, False, _short(exc), removed)
            self.target = wanted
            if wanted > before:  # spread state once the added executors register
                self._spread_due, self._spread_left = wanted, self._spread_attempts
                self._spread_marks = {}
            else:  # nothing added, or a scale-in: the executors a spread waited for won't come
                self._spread_due = None
            error = None
            if not kill_ok:
                error = "the cluster manager refused the kill"
            elif not request_ok:
                error = "the cluster manager did not take the request (local mode?)"
            return ApplyResult(
                target, wanted, before, killed, kill_ok and request_ok, error, removed
            )

    def loaded_state(self) -> Mapping[str, LoadedState]:
        """What each executor holds loaded, as ``state_reader`` reads it; empty (choose as
        without state) when the read fails: a scale-in must not fail for want of it."""
        try:
            return self._state_reader()
        except Exception as exc:
            log.warning("state placement unreadable, removing the newest idle: %s", _short(exc))
            return {}

    def wait_for(
        self,
        count: int,
        timeout_s: float = 60.0,
        *,
        include_removing: bool = False,
        poll_s: float = 0.1,
    ) -> float:
        """Block until exactly ``count`` executors run; the seconds it took.

        With ``include_removing``, executors being killed count until they are gone (to
        measure how long a kill takes). Raises :class:`ExecutorWaitTimeout` (a TimeoutError)
        when ``timeout_s`` passes first.
        """
        start = time.monotonic()
        while True:
            now = len(self.executor_ids(include_removing=include_removing))
            if now == count:
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise ExecutorWaitTimeout(
                    f"{now} executors after {timeout_s:.0f} s, wanted {count}"
                )
            time.sleep(poll_s)


def _hosts(executors: list[ExecutorState]) -> dict[str, str]:
    """Executor id → host ("" while the status store does not list it yet)."""
    return {e.id: e.host_port.rsplit(":", 1)[0] for e in executors}


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


@dataclass
class FakeActuator:
    """An in-memory actuator for controller tests: the count follows the target at once,
    or after ``delay_applies`` further calls to :meth:`running` (a start/stop delay).

    A faulty cluster manager: ``fail`` refuses every request; ``refuse`` refuses the next
    that many; ``lose`` acknowledges the next that many and does nothing (a request lost
    on its way, or granted executors that never come). ``state`` is what each executor
    (ids ``"0"`` up) holds loaded, reported in ``removed`` when it goes."""

    current: int = 1
    max_executors: int | None = None
    delay_applies: int = 0
    fail: bool = False
    refuse: int = 0
    lose: int = 0
    history: list[int] = field(default_factory=list)
    state: dict[str, LoadedState] = field(default_factory=dict)
    gone: list[Lost] = field(default_factory=list)
    """Executors lost and not yet reported by :meth:`lost` (:meth:`lose_executor`)."""
    clock: Callable[[], float] = time.time
    """When executors register (:meth:`registered_since`): the count rising in
    :meth:`running` or :meth:`apply` registers the new ones at this clock's time."""
    registered: list[float] = field(default_factory=list)
    _pending: int | None = None
    _countdown: int = 0

    def lose_executor(self, reason: str = "worker lost", time_s: float | None = None) -> None:
        """The newest executor crashes (at ``time_s``, when given): one fewer runs until an
        :meth:`apply` replaces it."""
        self.current -= 1
        self.gone.append(Lost(str(self.current), reason, time_s))

    def lost(self) -> tuple[Lost, ...]:
        found, self.gone = tuple(self.gone), []
        return found

    def registered_since(self, since_s: float) -> list[float]:
        return [t for t in self.registered if t >= since_s]

    def _set(self, count: int) -> None:
        self.registered.extend([self.clock()] * max(0, count - self.current))
        self.current = count

    def running(self) -> int:
        if self._pending is not None:
            if self._countdown <= 0:
                self._set(self._pending)
                self._pending = None
            else:
                self._countdown -= 1
        return self.current

    def apply(self, target: int) -> ApplyResult:
        wanted = clamp(target, self.max_executors)
        self.history.append(wanted)
        if self.fail:
            return ApplyResult(target, wanted, self.current, (), False, "fake failure")
        if self.refuse > 0:
            self.refuse -= 1
            error = "the cluster manager refused the request (fake)"
            return ApplyResult(target, wanted, self.current, (), False, error)
        before = self.current
        if self.lose > 0:
            self.lose -= 1
            return ApplyResult(target, wanted, before, tuple(str(i) for i in range(wanted, before)))
        killed = tuple(str(i) for i in range(wanted, before))
        removed = tuple(removed_executor(ExecutorState(k), self.state) for k in killed)
        if self.delay_applies:
            self._pending, self._countdown = wanted, self.delay_applies
        else:
            self._set(wanted)
        return ApplyResult(target, wanted, before, killed, removed=removed)
