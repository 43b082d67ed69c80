"""Game sessions: frames paired with their approvals within 3 s, hits decoded, per-machine sessions.

Input: ``GAME-FRAME-RQ`` (frames) and ``GAME-FRAME-RS`` (approvals, byte-identical), both keyed
by the frame header ``{ts, machine, zone}`` (formats in :mod:`.hits`). Output: ``SESSIONS``,
one JSON record per closed session keyed by the machine id::

    {"machine":"123456","zone":"EU","game":"NeonBrawl","start":1767225600000,
     "end":1767225632000,"firstTs":1767225600000,"lastTs":1767225602000,"frames":3,
     "hits":7,"totalImpact":812,"maxImpact":201,
     "impactTypes":{"Fatal":0,"Critical":1,"Special":0,"Direct":4,"Missed":2},
     "directions":{"UP":3,"DOWN":1,"RIGHT":2,"LEFT":1}}

``start``/``end`` are the session window (``end`` = last frame + gap), ``firstTs``/``lastTs``
the first and last frame's ``ts``; all epoch milliseconds.

**Semantics.** Event time is the header's ``ts`` on both inputs. An approval is in time
when its Kafka timestamp is within ``[ts, ts + approval_window_s]``; a frame is approved when
an in-time approval with its header has been read (the same equi-join on the header as a
stream-stream join, its time predicate being on the approval alone). Approved frames are
summed per machine into session windows (``session_gap_s``) and a session is written once,
when the watermark passes its end (Spark's append mode). The watermark is Spark's: the newest
``ts`` read minus ``watermark_delay_s``. A header still unpaired when the session window that
holds it closes is settled: its frame is *unapproved*, an approval without a frame *late*.
A second approval of an approved frame in the same batch is a *duplicate*; in a later batch,
a late approval. A row whose window would already be closed when it arrives (its
``last ts + gap`` behind the watermark) is dropped by Spark and counted (``late.rows``).

**How, and why this way.** One query, one checkpoint, and its state in Spark's state store:

1. by default (``kafka_source=auto``) the ``streamscale-kafka`` source reads both topics
   co-partitioned (``coPartitioned``: one task reads partition ``p`` of both, as a Kafka
   Streams join task does, so a frame and its approval normally meet in one task). Each task
   parses its records as Arrow columns (``mapInArrow``, :mod:`.frame_batches`: vectorized, no
   Python call per record), writes the records it cannot use to ``game-sessions-dlq``, pairs
   frames and approvals by header and sums approved frames per machine and gap-sized bucket
   (*spans*); it returns the spans, the headers it could not pair and one row of counts
   (gathered by Spark's ``observe`` into the batch's progress);
2. ONE shuffle by machine into the project's session-window operator
   (``io.streamscale.operators.SessionWindows``: Spark's ``transformWithState``, JVM code
   only, state in the state store, RocksDB with changelog checkpointing by default,
   ``spark.sql.shuffle.partitions`` state partitions spread over the executors). Each row
   opens the window ``[first_ts, last_ts + gap)``, and a machine's windows that overlap
   merge, as in Spark's ``session_window``; per machine the state is one value (its open
   rows) and one event-time timer, at its earliest window's end. Spark's own session windows
   cost a batch in proportion to the open sessions (a prefix scan per key and a pass over the
   whole store to find the windows to close); this operator reads and writes only the
   machines a batch has rows for and the timers that fire (``docs/sustainable.md``);
3. when the watermark reaches a window's end, its timer fires and the operator emits the
   window's rows to ``foreachBatch``, where a second ``mapInArrow`` pairs its headers, splits
   it into the machine's true sessions (:func:`.sessions.close`) and writes them to
   ``SESSIONS``, on the executors.

The watermarked column is each row's window end, with the delay plus the gap: so the
watermark is the newest ``ts`` read minus the delay, and Spark itself drops (and counts) the
rows whose window has closed before they arrive. ``transformWithState`` needs the RocksDB
state store: ``state_store=hdfs`` is refused for this pipeline.

The driver keeps nothing a restart needs: a restarted query is Spark's restart from the
checkpoint (offsets, state store), which replays the uncommitted batch. Output and dead
letters are at-least-once by default (a replayed batch may repeat them); counts and state
are exact. With ``delivery=exactly-once`` each task writes in one Kafka transaction per batch
(:mod:`streamscale.kafka.transactions`): role ``dlq`` in step 1, each task's unit named by
the topic-partitions it read (fixed by the offset log), and ``sessions`` in step 3,
whose partitions are the state's shuffle partitions (a hash of the machine; the state
store and the watermark of a replayed batch are those of its first run).

Topics that are not co-partitioned (a producer that does not key by header, or other
partition counts, which the co-partitioned read refuses at start) and Spark's connector
(``kafka_source=kafka``, one topic-partition per task) still give exact results: no task
holds both a frame and its approval, and every header is paired when its window closes,
which costs state but no driver work.

Counts (:meth:`GameSessions.batch_counts`): frames in = ``frames_dlq.records`` +
``join.approved`` + ``join.unapproved`` + frames in rows dropped as late + frames in windows
still open; approvals in = ``approvals_dlq.records`` + ``join.approved`` +
``join.duplicate_approvals`` + ``join.late_approvals`` + those still open (duplicate frames
aside); hits of approved frames = ``join.hits`` + ``join.hits_undecodable``. A pair made in a
task is counted in its batch, a pair made when its window closes in that batch.
``late.rows`` counts the rows (spans and headers) Spark dropped as late; the state operator's
figures (rows updated and removed, memory, RocksDB metrics) are in the query progress.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamscale.errors import ConfigError
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.query import ForeachBatchQuery, jvm_operator, progress_data, read_kafka
from streamscale.settings import KafkaSource, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NAME: Final = "game-sessions"

SPAN: Final = "span"
HEADER: Final = "header"
COUNTS: Final = "counts"
EVENT_TIME: Final = "event_time"
OPERATOR: Final = "io.streamscale.operators.SessionWindows"
OBSERVED: Final = "game-sessions-tasks"
"""Name of the observed metric that gathers the tasks' counts into the batch's progress."""


@dataclass(frozen=True)
class GameTopics:
    """The topics of the pipeline (defaults: the catalog of :mod:`.topics`)."""

    requests: str = "GAME-FRAME-RQ"
    approvals: str = "GAME-FRAME-RS"
    output: str = "SESSIONS"
    dlq: str = dl.dlq_topic(NAME)


def task_schema() -> str:
    """DDL of what each task returns: spans, unpaired headers and one counts row."""
    from streamscale.pipelines.frame_batches import SPAN_SCHEMA

    columns = [
        f"{name} {'STRING' if str(t) == 'string' else 'BIGINT'}"
        for name, t in zip(SPAN_SCHEMA.names, SPAN_SCHEMA.types, strict=True)
    ]
    return ", ".join(["kind STRING", *columns, "counts STRING"])


@dataclass(frozen=True)
class BatchTask:
    """What every task of a micro-batch runs on the records it read (pickled to the
    executors): parse, dead-letter, pair, sum (module doc, step 1)."""

    requests: str
    window_ms: int
    gap_ms: int
    dlq: str
    sink_options: Mapping[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.kafka.transactions import arrow_input_pairs, input_unit
        from streamscale.pipelines import frame_batches as fb

        with collector_paused():
            out = fb.Frames()
            read: set[tuple[str, int]] = set()
            for batch in batches:
                if not batch.num_rows:
                    continue
                read |= arrow_input_pairs(batch)
                is_request = pc.equal(batch.column("topic"), self.requests)
                fb.read_frames(batch.filter(is_request), out)
                fb.read_approvals(batch.filter(pc.invert(is_request)), out, self.window_ms)
            paired = fb.pair(out.frames + out.approvals)
            if out.dead:
                # The unit is named by the topic-partitions read (the offset log fixes them).
                batch = dl.dead_letter_batch(out.dead, self.dlq)
                write_rows(self.sink_options, [batch], input_unit(read))
            counts = dict(out.counts)
            for name, n in paired.counts.items():
                counts[name] = counts.get(name, 0) + n
            for kind, table in (
                (SPAN, fb.spans(paired.approved, self.gap_ms)),
                (HEADER, paired.unpaired),
            ):
                if table.num_rows:
                    yield from _tagged(table, kind).to_batches()
            yield _tagged(fb.SPAN_SCHEMA.empty_table(), COUNTS, 1, json.dumps(counts)).to_batches()[
                0
            ]


def _tagged(table: Any, kind: str, rows: int | None = None, counts: str | None = None) -> Any:
    """``table`` (spans) with the ``kind`` and ``counts`` columns of :func:`task_schema`;
    ``rows`` makes a row of nulls out of an empty table (the counts row)."""
    import pyarrow as pa

    if rows is not None:
        table = pa.table(
            {f.name: pa.nulls(rows, f.type) for f in table.schema}, schema=table.schema
        )
    n = table.num_rows
    return table.add_column(0, "kind", pa.array([kind] * n, pa.string())).append_column(
        "counts", pa.array([counts] * n, pa.string())
    )


@dataclass(frozen=True)
class CloseTask:
    """What every task runs on the session windows closed in a batch (pickled to the
    executors): pair, split into sessions, write them (module doc, step 3). Yields one row
    of counts."""

    gap_ms: int
    output: str
    sink_options: Mapping[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.pipelines import frame_batches as fb
        from streamscale.pipelines import sessions

        with collector_paused():
            read = [b for b in batches if b.num_rows]
            rows = pa.Table.from_batches(read) if read else None
            if rows is None:
                yield _counts_batch({})
                return
            kinds = rows.column("kind")
            spans = rows.filter(pc.equal(kinds, SPAN)).select(fb.SPAN_SCHEMA.names)
            headers = rows.filter(pc.equal(kinds, HEADER)).select(fb.SPAN_SCHEMA.names)
            closed = sessions.close(
                spans.cast(fb.SPAN_SCHEMA), headers.cast(fb.SPAN_SCHEMA), self.gap_ms
            )
            if closed.table.num_rows:
                keys, values = sessions.records(closed.table, self.gap_ms)
                batch = pa.RecordBatch.from_arrays(
                    [keys, values, pa.array([self.output] * len(keys), pa.string())],
                    names=["key", "value", "topic"],
                )
                write_rows(self.sink_options, [batch])
            yield _counts_batch(closed.counts)


def _counts_batch(counts: Mapping[str, int]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"counts": [json.dumps(dict(counts))]})


def _add(total: dict[str, int], counts: Mapping[str, Any]) -> None:
    for name, n in counts.items():
        total[name] = total.get(name, 0) + int(n)


class GameSessions(ForeachBatchQuery):
    """The game-sessions query: build with the settings, :meth:`start`, read
    :meth:`batch_counts` of its progress."""

    name = NAME
    default_source: KafkaSource = "streamscale-kafka"

    def __init__(
        self,
        settings: Settings,
        checkpoint: str,
        topics: GameTopics | None = None,
        source: KafkaSource | None = None,
    ) -> None:
        if settings.state_store != "rocksdb":
            raise ConfigError(
                f"game sessions keep their sessions with Spark's transformWithState, which needs "
                f"the RocksDB state store: set STREAMSCALE_STATE_STORE=rocksdb (or "
                f"--state-store rocksdb), not {settings.state_store}"
            )
        self.settings = settings
        self.source = source or settings.source_for(self.default_source)
        self.checkpoint = checkpoint.rstrip("/")
        self.topics = topics or GameTopics()
        self.counts: dict[int, dict[str, int]] = {}
        """The closing step's counts per batch id (what the tasks counted is in the progress)."""

    @property
    def gap_ms(self) -> int:
        return int(self.settings.session_gap_s * 1000)

    def stream(self, spark: SparkSession) -> DataFrame:
        """The rows of every machine's open session windows, in Spark's state store; the
        closed ones go to :meth:`process_batch` (module doc, steps 1-2)."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        s = self.settings
        records = read_kafka(
            spark,
            s,
            self.source,
            subscribe=f"{self.topics.requests},{self.topics.approvals}",
            starting=s.starting_offsets,
            query_name=self.name,
            co_partitioned=True,
        )
        task = BatchTask(
            requests=self.topics.requests,
            window_ms=int(s.approval_window_s * 1000),
            gap_ms=self.gap_ms,
            dlq=self.topics.dlq,
            sink_options=s.sink_options("dlq"),
        )
        rows = records.select("key", "value", "topic", "partition", "offset", "timestamp")
        rows = rows.mapInArrow(task, task_schema())
        rows = rows.observe(OBSERVED, F.collect_list("counts").alias("tasks"))
        # The watermarked column is each row's window end, so Spark drops a row whose window
        # has closed (module doc); the delay then adds the gap: newest ts read - delay.
        delay_ms = round(s.watermark_delay_s * 1000) + self.gap_ms
        timed = (
            rows.filter(F.col("kind") != COUNTS)
            .drop("counts")
            .withColumn(EVENT_TIME, F.timestamp_millis(F.col("last_ts") + self.gap_ms))
            .withWatermark(EVENT_TIME, f"{delay_ms} milliseconds")
        )
        operator = jvm_operator(spark, OPERATOR)
        return DataFrame(operator.closed(timed._jdf, EVENT_TIME, self.gap_ms), spark)

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Close the windows the operator emitted: pair, split, write sessions (executors)."""
        task = CloseTask(self.gap_ms, self.topics.output, self.settings.sink_options("sessions"))
        counts: dict[str, int] = {}
        for row in batch.mapInArrow(task, "counts STRING").collect():
            _add(counts, json.loads(row["counts"]))
        self.counts[batch_id] = counts

    def counts_of(self, batch_id: int) -> dict[str, int]:
        counts = self.counts.get(batch_id)
        return dict(counts) if counts is not None else {}

    def batch_counts(self, progress: Any) -> dict[str, int]:
        """The batch's counts: the tasks' (observed), the closing step's, and the rows Spark
        dropped as late (``late.rows``, from the state operator's progress)."""
        data = progress_data(progress)
        counts = super().batch_counts(data)
        observed = (data.get("observedMetrics") or {}).get(OBSERVED) or {}
        for text in observed.get("tasks") or []:
            _add(counts, json.loads(text))
        operators = data.get("stateOperators") or []
        if operators:
            late = sum(int(op.get("numRowsDroppedByWatermark", 0)) for op in operators)
            counts["late.rows"] = late
        return counts
