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

**Semantics.** Event time is the header's ``ts`` on both inputs; the watermark is the newest
``ts`` of each input minus ``watermark_delay_s``, the slower input holding it back. An
approval is in time when its Kafka timestamp is within ``[ts, ts + approval_window_s]``; a
frame is approved as soon as an in-time approval with its header has been read (the same
equi-join on the header as a stream-stream join, its time predicate being on the approval
alone). A header the watermark passes unpaired is settled: its frame is *unapproved*, an
approval without a frame *late*. Approved frames are summed per machine into session windows
(``session_gap_s``) and a session is written once, when the watermark passes its end.
Records behind the watermark are counted as late and not paired. A second approval of an
approved frame in the same batch is a *duplicate*; in a later batch, a late approval.

**How, and why this way.** One query, one checkpoint; by default (``kafka_source=auto``) the
``streamscale-kafka`` source reads both topics co-partitioned (``coPartitioned``: one task
reads partition ``p`` of both, as a Kafka Streams join task does, so a frame and its
approval normally meet in one task), and each micro-batch runs in ``foreachBatch``:

1. one Spark job: each task parses its records as Arrow columns (:mod:`.frame_batches`:
   vectorized, no Python call per record), writes the records it cannot use to
   ``game-sessions-dlq``, pairs frames and approvals by header and sums approved frames per
   machine and gap-sized bucket; it returns those few sums, its unpaired headers and its
   counts to the driver;
2. the driver (:mod:`.sessions`) pairs the unpaired headers across tasks and batches, moves
   the watermark, settles headers, merges sessions, writes the closed ones to ``SESSIONS``
   and saves its state (pending headers, open sessions, newest ts per input) in the
   checkpoint, ``sessions/<batch id>``, before the batch commits.

The earlier design, Spark SQL parsing and a streaming aggregation per header and per
session window in RocksDB, ran at 13-27k frames/s on this machine: two shuffles, a state
store update and removal per header, and about 25 µs of JVM time per frame for JSON and hit
parsing. This one needs no shuffle and keeps state only for what is not yet paired
(``docs/benchmarks.md``). Topics that are not co-partitioned (a producer that does not key by
header, or other partition counts, which the co-partitioned read refuses at start) still give
exact results: every header then pairs on the driver, which is slower.

**Kafka reader.** Spark's connector (``kafka_source=kafka``) reads one topic-partition per
task, so no task holds both a frame and its approval: every header takes the driver path
above, with the same exact sessions. Measured with ``benchmarks/pipelines.py --frames 100000
--game-batch 100000`` and ``--frames 200000 --game-batch 200000``, both readers alternating
in one warm Spark session on a quiet moment of this shared 2-core machine: co-partitioned
``streamscale-kafka`` ran 2.1-2.6x the steady rate (113-221k against 53-87k records/s) and
took 0.7-1.1x the time end to end, median 0.8x (2.6-3.8 s against 3.0-4.1 s for two
batches, mostly fixed costs); hence the default. Under a load of 5-14 single-source runs
differed by up to 3x between identical runs.

A restarted query reloads the state of the last committed batch and replays the
uncommitted one; output and dead letters are at-least-once (a replayed batch may repeat
them), counts and state are exact.

Counts (:meth:`GameSessions.batch_counts`): frames in = ``frames_dlq.records`` +
``join.approved`` + ``join.unapproved`` + ``join.late_frames`` + pending frames;
approvals in = ``approvals_dlq.records`` + ``join.approved`` + ``join.duplicate_approvals`` +
``join.late_approvals`` + pending approvals (duplicate frames aside); hits of approved
frames = ``join.hits`` + ``join.hits_undecodable``. Counts named ``now.*`` (pending frames and
approvals, open sessions) are levels at the end of the batch, the others per batch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamscale.pipelines import checkpoint_files as files
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import sessions as driver
from streamscale.pipelines.query import ForeachBatchQuery, read_kafka
from streamscale.settings import KafkaSource, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

NAME: Final = "game-sessions"
STATE_DIR: Final = "sessions"
KEEP_STATES: Final = 5
"""State files kept in the checkpoint (the newest is the one a restart needs)."""

SPAN: Final = "span"
HEADER: Final = "header"
COUNTS: Final = "counts"


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
    """What every task of one micro-batch runs (pickled to the executors)."""

    requests: str
    window_ms: int
    gap_ms: int
    late_before: int | None
    dlq: str
    sink_options: Mapping[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.pipelines import frame_batches as fb

        with collector_paused():
            out = fb.Frames()
            for batch in batches:
                if not batch.num_rows:
                    continue
                is_request = pc.equal(batch.column("topic"), self.requests)
                frames = batch.filter(is_request)
                approvals = batch.filter(pc.invert(is_request))
                fb.read_frames(frames, out, self.late_before)
                fb.read_approvals(approvals, out, self.window_ms, self.late_before)
            paired = fb.pair(out.frames + out.approvals)
            if out.dead:
                write_rows(self.sink_options, [dl.dead_letter_batch(out.dead, self.dlq)])
            counts = dict(out.counts)
            for name, n in paired.counts.items():
                counts[name] = counts.get(name, 0) + n
            tables = [
                (SPAN, fb.spans(paired.approved, self.gap_ms)),
                (HEADER, paired.unpaired),
            ]
            for kind, table in tables:
                if table.num_rows:
                    yield from _tagged(table, kind).to_batches()
            summary = json.dumps({"counts": counts, "max_ts": out.max_ts})
            yield _tagged(fb.SPAN_SCHEMA.empty_table(), COUNTS, 1, summary).to_batches()[0]


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


class GameSessions(ForeachBatchQuery):
    """The game-sessions query: build with the settings, :meth:`start`, read :attr:`counts`."""

    name = NAME
    default_source: KafkaSource = "streamscale-kafka"

    def __init__(
        self,
        settings: Settings,
        checkpoint: str,
        topics: GameTopics | None = None,
        source: KafkaSource | None = None,
    ) -> None:
        self.settings = settings
        self.source = source or settings.source_for(self.default_source)
        self.checkpoint = checkpoint.rstrip("/")
        self.topics = topics or GameTopics()
        self.state = driver.State()
        self.watermark: int | None = None
        self.counts: dict[int, dict[str, int]] = {}
        self._next_batch: int | None = None
        self._lock = threading.Lock()

    @property
    def gap_ms(self) -> int:
        return int(self.settings.session_gap_s * 1000)

    def stream(self, spark: SparkSession) -> DataFrame:
        """Frames and approvals in one source: co-partitioned with ``streamscale-kafka``;
        with Spark's connector each task reads one topic-partition and every header pairs
        on the driver."""
        return read_kafka(
            spark,
            self.settings,
            self.source,
            subscribe=f"{self.topics.requests},{self.topics.approvals}",
            starting=self.settings.starting_offsets,
            query_name=self.name,
            co_partitioned=True,
        )

    def counts_of(self, batch_id: int) -> dict[str, int]:
        counts = self.counts.get(batch_id)
        return dict(counts) if counts is not None else {}

    # one micro-batch -------------------------------------------------------------------------
    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Run the batch's job, advance the driver's state, write closed sessions, save."""
        spark = batch.sparkSession
        with self._lock:
            if self._next_batch != batch_id:
                self.state = self._load(spark, batch_id)
            s = self.settings
            task = BatchTask(
                requests=self.topics.requests,
                window_ms=int(s.approval_window_s * 1000),
                gap_ms=self.gap_ms,
                late_before=self.state.watermark(int(s.watermark_delay_s * 1000)),
                dlq=self.topics.dlq,
                sink_options=s.source_options(),
            )
            columns = batch.select("key", "value", "topic", "partition", "offset", "timestamp")
            rows = columns.mapInArrow(task, task_schema()).toArrow()
            spans, unpaired, counts, max_ts = _split(rows)
            advanced = driver.advance(
                self.state,
                spans,
                unpaired,
                max_ts,
                gap_ms=self.gap_ms,
                delay_ms=int(s.watermark_delay_s * 1000),
            )
            if advanced.closed:
                self._write_sessions(advanced.closed)
            for name, n in advanced.counts.items():
                counts[name] = counts.get(name, 0) + n
            self._save(spark, batch_id, advanced.state)
            self.state = advanced.state
            self.watermark = advanced.watermark
            self.counts[batch_id] = counts
            self._next_batch = batch_id + 1

    def _write_sessions(self, closed: list[driver.Session]) -> None:
        import pyarrow as pa

        from streamscale.kafka.sink import write_rows

        records = [s.record(self.gap_ms) for s in closed]
        batch = pa.RecordBatch.from_pydict(
            {
                "key": [k for k, _ in records],
                "value": [v for _, v in records],
                "topic": [self.topics.output] * len(records),
            },
            schema=pa.schema(
                [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string())]
            ),
        )
        write_rows(self.settings.source_options(), [batch])

    # state in the checkpoint -------------------------------------------------------------------
    def _state_path(self, batch_id: int) -> str:
        return f"{self.checkpoint}/{STATE_DIR}/{batch_id}"

    def _load(self, spark: SparkSession, batch_id: int) -> driver.State:
        """The state as of the start of ``batch_id``: the one saved by the batch before."""
        self._next_batch = batch_id
        if batch_id == 0:
            return driver.State()
        data = files.read_bytes(spark, self._state_path(batch_id - 1))
        if data is None:
            raise RuntimeError(
                f"the checkpoint {self.checkpoint} has no game-sessions state for batch "
                f"{batch_id - 1} ({self._state_path(batch_id - 1)}): it was written by another "
                "version of the pipeline or damaged; start from a new checkpoint location"
            )
        state = driver.State.from_bytes(data)
        log.info(
            "game sessions: state of batch %d loaded: %d pending headers, %d open sessions",
            batch_id - 1,
            state.pending.num_rows,
            len(state.open),
        )
        return state

    def _save(self, spark: SparkSession, batch_id: int, state: driver.State) -> None:
        files.write_bytes(spark, self._state_path(batch_id), state.to_bytes())
        if batch_id >= KEEP_STATES:
            files.delete(spark, self._state_path(batch_id - KEEP_STATES))


def _split(rows: Any) -> tuple[list[Any], list[Any], dict[str, int], dict[str, int]]:
    """The collected task output: spans, unpaired headers, summed counts, newest ts."""
    import pyarrow.compute as pc

    from streamscale.pipelines.frame_batches import SPAN_SCHEMA

    kinds = rows.column("kind")
    spans = rows.filter(pc.equal(kinds, SPAN)).select(SPAN_SCHEMA.names).cast(SPAN_SCHEMA)
    headers = rows.filter(pc.equal(kinds, HEADER)).select(SPAN_SCHEMA.names).cast(SPAN_SCHEMA)
    counts: dict[str, int] = {}
    max_ts: dict[str, int] = {}
    for text in rows.filter(pc.equal(kinds, COUNTS)).column("counts").to_pylist():
        summary = json.loads(text)
        for name, n in summary["counts"].items():
            counts[name] = counts.get(name, 0) + int(n)
        for name, ts in summary["max_ts"].items():
            max_ts[name] = max(max_ts.get(name, ts), int(ts))
    return [spans], [headers], counts, max_ts
