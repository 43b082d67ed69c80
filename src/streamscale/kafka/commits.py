"""Processed offsets of every streaming query, committed to a Kafka consumer group.

Neither Spark's Kafka connector nor the ``streamscale-kafka`` source commits to Kafka: offsets
live in the checkpoint. So that Kafka's own ``kafka-consumer-groups --describe`` (and Burrow,
KEDA, kafka-lag-exporter) sees each pipeline with its true lag, :class:`GroupCommitter`, a
``StreamingQueryListener``, commits each Kafka source's ``endOffset`` of every committed batch
(its processed offsets, read from the progress event) to the query's consumer group, without
joining the group. One mechanism for both sources; the checkpoint stays the truth, so a failed
commit is a logged warning and a counter, never an error of the query.

The group and cluster of each source come from :mod:`streamscale.kafka.groups` (pure).

Options are read from the running query in the JVM: each streaming relation of the query's
logical plan carries its source's options (``StreamingDataSourceV2Relation.options``), for
Spark's ``KafkaMicroBatchStream`` and the Python data source's ``PythonMicroBatchStream``
alike (the latter's own ``options`` field is nulled by Scala once its lazy ``readInfo`` is
built, so reflection on the stream works for the connector only and is the fallback). The
source's ``kafka.bootstrap.servers`` and the security keys that mean the same in the Java
client and librdkafka choose the cluster committed to, so a query on another cluster is
committed to its own; the connection given to the committer serves its own cluster and any
source whose options cannot be read.

Commits run on one worker thread: Spark's listener thread only parses and queues (a commit to
an unreachable cluster blocks librdkafka for about 45 s), and queued offsets of one query
coalesce to the newest.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from streamscale.kafka.client import first_error_line
from streamscale.kafka.groups import (
    MAX_REMEMBERED,
    CommitTarget,
    batch_commits,
    moved_forward,
    remember_group,
    targets_for,
)
from streamscale.kafka.offsets import Offsets, TopicPartition
from streamscale.lag.model import is_kafka_description, query_label
from streamscale.progress_events import JsonProgressListener

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0


# ------------------------------------------------------------------------------ JVM side
def _java_map(jmap: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in jmap.items()}


def _private_options(stream: Any) -> Any:
    """The ``options`` field of a stream object or one of its superclasses, by reflection."""
    cls = stream.getClass()
    for _ in range(8):
        if cls is None:
            return None
        for f in cls.getDeclaredFields():
            if f.getName() == "options":
                f.setAccessible(True)
                return f.get(stream)
        cls = cls.getSuperclass()
    return None


def jvm_source_options(execution: Any) -> list[tuple[str, dict[str, str]]]:
    """``(description, options)`` of each distinct streaming source of a running (or stopped)
    query's ``StreamExecution``, in plan order, as py4j reads them."""
    leaves = execution.logicalPlan().collectLeaves()
    seen: list[Any] = []
    out: list[tuple[str, dict[str, str]]] = []
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        kind = leaf.getClass().getSimpleName()
        if kind == "StreamingDataSourceV2ScanRelation":
            relation = leaf.relation()
        elif kind == "StreamingDataSourceV2Relation":
            relation = leaf
        else:
            continue
        stream = leaf.stream()
        if any(stream.equals(s) for s in seen):
            continue
        seen.append(stream)
        try:
            options = relation.options()
        except Exception:
            options = _private_options(stream)
        found = _java_map(options.asCaseSensitiveMap()) if options is not None else {}
        out.append((str(stream.toString()), found))
    return out


# ------------------------------------------------------------------------------ listener
class Committer(Protocol):
    """What the committer needs of :class:`~streamscale.kafka.admin.KafkaAdmin`."""

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None: ...

    def close(self) -> None: ...


def _kafka_admin(conf: Mapping[str, str]) -> Committer:
    from streamscale.kafka.admin import KafkaAdmin

    return KafkaAdmin(conf, timeout_s=ADMIN_TIMEOUT_S)


@dataclass
class _Run:
    execution: Any = None
    targets: list[CommitTarget | None] | None = None


@dataclass
class _Pending:
    batch_id: int
    offsets: dict[CommitTarget, Offsets]


class GroupCommitter(JsonProgressListener):
    """Commits the processed offsets of every query of a session to its consumer group.

    Add it with :func:`commit_offsets`. ``kafka_config`` (librdkafka keys) is the connection
    for sources on its cluster or whose options cannot be read; ``find_query`` gives a running
    query's ``StreamExecution`` by id (None: options unknown, defaults apply);
    ``read_sources`` reads a query's sources from it; ``make_admin`` makes the commit client
    of one cluster. ``commits`` and ``failures`` count commit calls.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        *,
        find_query: Callable[[str], Any] = lambda _id: None,
        read_sources: Callable[[Any], list[tuple[str, dict[str, str]]]] = jvm_source_options,
        make_admin: Callable[[Mapping[str, str]], Committer] = _kafka_admin,
        is_kafka: Callable[[str], bool] = is_kafka_description,
    ) -> None:
        super().__init__()
        self.kafka_config = dict(kafka_config)
        self._find_query = find_query
        self._read_sources = read_sources
        self._make_admin = make_admin
        self._is_kafka = is_kafka
        self._cond = threading.Condition()
        self._runs: dict[str, _Run] = {}
        self._pending: dict[str, _Pending] = {}
        self._handled: dict[str, int] = {}
        self._done: dict[CommitTarget, tuple[str, Offsets]] = {}
        self._admins: dict[tuple[tuple[str, str], ...], Committer] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._prune = False
        self._busy = False
        self.commits = 0
        self.failures = 0
        self.errors = 0

    # listener callbacks (Spark's listener thread: parse and queue, never raise) ------------
    def onQueryStarted(self, event: Any) -> None:
        # Posted synchronously by the query's thread: the query is still active here, even
        # when it ends before its progress events reach this listener.
        try:
            execution = self._find_query(str(event.id))
            with self._cond:
                self._runs[str(event.runId)] = _Run(execution=execution)
        except Exception:
            self.errors += 1
            log.exception("group committer: cannot record a started query")

    def onQueryProgress(self, event: Any) -> None:
        try:
            self.record(event.progress)
        except Exception:
            self.errors += 1
            log.exception("group committer: cannot record a progress event")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._cond:
            self._runs.pop(str(event.runId), None)
            self._prune = True  # close the clients of clusters no live query commits to
            self._cond.notify_all()

    # the work -----------------------------------------------------------------------------
    def record(self, progress: Mapping[str, Any]) -> None:
        """Queue the commits of one progress (a ``StreamingQueryProgress`` or its JSON)."""
        run_id = str(progress.get("runId"))
        batch_id = int(progress.get("batchId", -1))
        wanted = batch_commits(progress, self._targets(run_id, progress))
        with self._cond:
            pending = self._pending.get(run_id)
            if pending is not None:
                pending.batch_id = max(pending.batch_id, batch_id)
                for target, offsets in wanted.items():
                    pending.offsets.setdefault(target, {}).update(offsets)
            elif wanted:
                self._pending[run_id] = _Pending(batch_id, wanted)
            else:
                self._mark_handled(run_id, batch_id)
                return
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._work, name="streamscale-group-committer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _targets(self, run_id: str, progress: Mapping[str, Any]) -> list[CommitTarget | None]:
        with self._cond:
            run = self._runs.setdefault(run_id, _Run())
            if run.targets is not None:
                return run.targets
            execution = run.execution
        query_id = str(progress.get("id"))
        found: list[tuple[str, dict[str, str]]] = []
        try:
            if execution is None:
                execution = self._find_query(query_id)
            if execution is not None:
                found = self._read_sources(execution)
        except Exception as exc:
            log.warning("group committer: cannot read the sources of query %s: %s", query_id, exc)
        targets = targets_for(progress, found, self.kafka_config, is_kafka=self._is_kafka)
        groups = sorted({t.group for t in targets if t is not None})
        if groups:
            remember_group(query_label(progress), groups[0])
        with self._cond:
            run.targets = targets
            run.execution = None  # resolved: the JVM object is no longer needed
        return targets

    def _mark_handled(self, run_id: str, batch_id: int) -> None:
        if len(self._handled) >= MAX_REMEMBERED and run_id not in self._handled:
            self._handled.pop(next(iter(self._handled)))
        self._handled[run_id] = max(self._handled.get(run_id, -1), batch_id)
        self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (self._pending or self._prune or self._closed):
                    self._cond.wait()
                if not self._pending and self._closed:
                    return
                pending = None
                if self._pending:
                    run_id = next(iter(self._pending))
                    pending = self._pending.pop(run_id)
                    self._busy = True
                else:
                    self._prune = False
                    live = {t.conf for run in self._runs.values() for t in run.targets or () if t}
            if pending is None:
                for conf in [c for c in self._admins if c not in live]:
                    self._close_admin(conf)
                continue
            for target, offsets in pending.offsets.items():
                self._commit(run_id, target, offsets)
            with self._cond:
                self._busy = False
                self._mark_handled(run_id, pending.batch_id)

    def _close_admin(self, conf: tuple[tuple[str, str], ...]) -> None:
        admin = self._admins.pop(conf, None)
        if admin is None:
            return
        try:
            admin.close()
        except Exception as exc:
            log.debug("closing a commit client: %s", exc)

    def _commit(self, run_id: str, target: CommitTarget, offsets: Offsets) -> None:
        prior_run, prior = self._done.get(target, ("", {}))
        committed = prior if prior_run == run_id else {}  # a new run: its checkpoint rules
        moved = moved_forward(offsets, committed)
        if not moved:
            return
        try:
            admin = self._admins.get(target.conf)
            if admin is None:
                admin = self._admins[target.conf] = self._make_admin(target.config)
            admin.commit(target.group, moved)
        except Exception as exc:  # the checkpoint is the truth: a failed mirror is a warning
            self.failures += 1
            why = first_error_line(str(exc), user=target.config.get("sasl.username"))
            log.warning(
                "could not commit offsets to group %s on %s: %s", target.group, target.servers, why
            )
            return
        self.commits += 1
        self._done[target] = (run_id, {**committed, **moved})

    # for callers ---------------------------------------------------------------------------
    def wait_for(self, query: Any, timeout_s: float = 60.0) -> bool:
        """Until the commits of ``query``'s last progress are done (or failed); False when
        ``timeout_s`` passes first. Progress reaches listeners asynchronously: call it before
        reading the group after a query ends, or before stopping the session."""
        last = query.lastProgress
        if last is None:
            return True
        return self.wait_for_batch(str(query.runId), int(last["batchId"]), timeout_s)

    def wait_for_batch(self, run_id: str, batch_id: int, timeout_s: float = 60.0) -> bool:
        """Until batch ``batch_id`` of run ``run_id`` is handled; False on time-out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._handled.get(run_id, -1) < batch_id:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Until every queued commit is done (or failed); False on time-out. Run at exit for
        each committer, so that the commits of a query's last batches outlive the session."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Commit what is queued (within ``timeout_s``), stop the worker, close the clients.

        That wait is the committer's only one: the flush at exit skips it afterwards, so a
        process whose brokers are gone ends ``timeout_s`` after its query, not twice that."""
        _live.discard(self)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        if thread is None or not thread.is_alive():
            for conf in list(self._admins):
                self._close_admin(conf)


# ------------------------------------------------------------------------------- sessions
_ATTRIBUTE = "_streamscale_group_committer"


def group_committer(spark: Any) -> GroupCommitter | None:
    """The committer :func:`commit_offsets` registered on ``spark``, if any."""
    found = getattr(spark, _ATTRIBUTE, None)
    return found if isinstance(found, GroupCommitter) else None


def commit_offsets(spark: Any, kafka_config: Mapping[str, str]) -> GroupCommitter:
    """Commit the processed offsets of every streaming query of ``spark`` to its consumer
    group from now on; returns the listener. ``kafka_config`` (librdkafka keys) is the
    connection used for sources on that cluster. Once per session: a second call updates the
    connection of the committer already registered and returns it."""
    existing = group_committer(spark)
    if existing is not None:
        existing.kafka_config = dict(kafka_config)
        return existing
    streams = spark._jsparkSession.streams()

    def find_query(query_id: str) -> Any:
        query = streams.get(query_id)
        return None if query is None else query.streamingQuery()

    committer = GroupCommitter(kafka_config, find_query=find_query)
    spark.streams.addListener(committer)
    setattr(spark, _ATTRIBUTE, committer)
    _live.add(committer)
    return committer


_live: weakref.WeakSet[GroupCommitter] = weakref.WeakSet()
EXIT_FLUSH_S = 10.0


@atexit.register
def _flush_at_exit() -> None:
    """Commit what is still queued before the interpreter ends (the worker is a daemon)."""
    deadline = time.monotonic() + EXIT_FLUSH_S
    for committer in list(_live):
        if not committer.flush(max(0.0, deadline - time.monotonic())):
            log.warning("group committer: commits still queued at exit were dropped")
