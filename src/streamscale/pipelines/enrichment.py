"""Purchase enrichment: ``achats`` left-joined with the latest ``referentiel`` value per product.

Input: purchases ``{"id": product id, "price": decimal}`` keyed by transaction id, and the
compacted referential ``{"id", "name"}`` keyed by product id (a null value is a tombstone).
Output: ``achats-enrichis`` ``{"id","name","price"}`` keyed by the ORIGINAL purchase key,
``name`` ``"REF INCONNUE"`` when the product is unknown or deleted. Referential records are
never emitted; bad records of either topic go to ``enrichment-dlq`` (:mod:`.deadletter`).

Table semantics — what "known when the purchase is processed" means, deterministically: a
purchase with Kafka timestamp ``t`` sees, for its product, the latest referential record (by
log order) with a timestamp ≤ ``t`` (a tie goes to the referential; a tombstone deletes)
among the records read so far, whatever the batch boundaries:

- every batch reads the referential to its end offset at planning time (the offset log keeps
  it, so a replay reads the same range): ``maxOffsetsPerTrigger`` limits the purchases only,
  and no purchase misses an older version because a batch limit cut the referential;
- versions read ahead of the purchases stay *pending*: the driver folds a version into the
  table only once every purchase partition of a batch has passed its timestamp (the oldest
  of the partitions' newest purchase timestamps of that batch). A purchase older than that
  point (timestamps out of order across partitions) sees the folded table, as a Kafka
  Streams KTable join sees the table as it is;
- a record appended after a batch was planned applies from the next batch on, even to a
  purchase it predates (no engine sees a record before it exists).

So a rename produced between two purchases is seen by the second one whether or not the
three records fall into one micro-batch, and a replayed batch (its offsets are in the
checkpoint) gives the same answers. On restart the table is rebuilt from the compacted topic
and folded up to the oldest of the purchase partitions' last timestamps, which keeps at
least as many versions pending (docs/benchmarks.md, "Found on the way").

Design, chosen by measurement (docs/benchmarks.md, "Pipelines (issue 3)"): one query reads
both topics (two Kafka sources, one checkpoint) into ``foreachBatch``.

**Kafka reader.** By default (``kafka_source=auto``) Spark's own connector,
``format("kafka")``; ``streamscale-kafka`` gives the same answers (both write the same
offset JSON, ``{"topic": {"0": 123}}``, to the offset log :meth:`Enrichment._topic_offsets`
reads). Measured with ``benchmarks/pipelines.py --purchases 300000 --batch 100000`` and
``--purchases 600000 --batch 200000``, both readers alternating in one warm Spark session
(``--source kafka --source streamscale-kafka ...``) on a quiet moment of this shared 2-core
machine: end to end the connector took 0.8-0.9x the time (9.8-12.7 s against 12.2-13.9 s,
less query start and a faster first batch), steady rates were equal within noise (44-95k
against 41-87k purchases/s). Cold single-source runs under a load of 5-14 differed by up to
3x between identical runs and decided nothing. The referential is read by the driver with
the project's reader (:func:`read_referential`) whichever source the stream uses.

- The batch's referential offset range is in the checkpoint's offset log (written before the
  batch runs), so the driver reads those few records itself, checks them with Spark SQL
  (:func:`parse_referential`; it writes the bad ones to the dead-letter topic) and keeps the
  table: a dict, like a Kafka Streams GlobalKTable, broadcast to the executors as a
  :class:`.purchase_batches.NameTable` whenever it changed. Purchases need neither a
  repartition topic nor a shuffle: every task has the whole table, as in a broadcast join.
- Each batch is then ONE Spark job over the purchases: each task parses, names and formats
  its purchases as Arrow columns (:mod:`.purchase_batches`: vectorized, no Python call per
  record) and writes output and dead letters with the project's producer, applying the
  pending referential versions by the as-of rule above. The earlier design, the same
  work as Spark SQL (``from_json``, a broadcast hash join, ``to_json``, observed counts),
  spent about 17 µs of JVM time per purchase and ran at 75-92k purchases/s; this one moves
  each purchase through the JVM only between the source and the task.
- The table is rebuilt from the compacted topic on (re)start, read up to the offsets where
  the replayed batch starts. The compacted topic is the changelog; nothing else is stored.
- The alternative, a KTable-style ``transformWithStateInPandas`` over the union of both topics
  keyed by product id (RocksDB + changelog checkpointing), moves every purchase through a
  Python state function one key group at a time, and ran at about 40k purchases/s on this
  machine (the prototype's). Its advantage, restart without re-reading the referential, is
  worth about 2 s for 100k products here (measured), which we accept. Limit: the table lives
  in the driver's memory and in each executor (about 150 bytes a product: millions are
  fine, billions are not).

Delivery is at-least-once by default, as with the Kafka sink: a batch replayed after a crash
may repeat its output, never lose it. With ``delivery=exactly-once`` each task, and the
driver for the referential's dead letters, writes in one Kafka transaction per batch
(:mod:`streamscale.kafka.transactions`, roles ``tasks`` and ``driver``): a task's unit is
the purchase topic-partition it reads, whose offset range the offset log fixes.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.checkpoint_files import read_text
from streamscale.pipelines.products import compact_product
from streamscale.pipelines.query import ForeachBatchQuery, read_kafka
from streamscale.settings import KafkaSource, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

NAME: Final = "enrichment"


PRODUCT_SCHEMA: Final = "id BIGINT, name STRING, _corrupt STRING"
KEY_ID: Final = "TRY_CAST(CAST(key AS STRING) AS BIGINT)"
PRODUCT_FIELDS: Final = {"id": "an integer product id", "name": "a string"}


@dataclass(frozen=True)
class EnrichmentTopics:
    """The topics of the pipeline (defaults: the catalog of :mod:`.topics`)."""

    purchases: str = "achats"
    referential: str = "referentiel"
    output: str = "achats-enrichis"
    dlq: str = dl.dlq_topic(NAME)


# --- Spark SQL building blocks (pure functions of DataFrames) ------------------------------


def _referential_checks(parsed: str) -> tuple[str, str]:
    """(error, detail) SQL of a referential record whose value parses into ``parsed``."""
    text = "CAST(value AS STRING)"
    key_id = KEY_ID
    json_error = dl.json_error_sql(text, parsed, PRODUCT_FIELDS, strings=("name",))
    json_detail = dl.json_detail_sql(text, parsed, PRODUCT_FIELDS, "product value", ("name",))
    error = (
        f"CASE WHEN key IS NULL THEN '{dl.NULL_KEY}' "
        f"WHEN {key_id} IS NULL THEN '{dl.WRONG_TYPE}' "
        f"WHEN value IS NULL THEN NULL "
        f"WHEN ({json_error}) IS NOT NULL THEN ({json_error}) "
        f"WHEN {parsed}.id <> {key_id} THEN '{dl.INVALID_VALUE}' END"
    )
    detail = (
        "CASE WHEN key IS NULL THEN 'a referential record needs its product id as key' "
        f"WHEN {key_id} IS NULL THEN 'referential key is not an integer product id' "
        f"WHEN value IS NULL THEN NULL "
        f"WHEN ({json_error}) IS NOT NULL THEN ({json_detail}) "
        f"WHEN {parsed}.id <> {key_id} THEN 'product value id differs from the record key' END"
    )
    return error, detail


def parse_referential(df: DataFrame) -> DataFrame:
    """Source rows → plus ``pid, name, deleted, ts_ms, error, detail``.

    The product id is the record key (a tombstone has no value); a value must carry the same
    ``id`` and a ``name``.
    """
    from pyspark.sql import functions as F

    error, detail = _referential_checks("j")
    text = "CAST(value AS STRING)"
    parsed = df.withColumn("j", F.from_json(F.expr(text), PRODUCT_SCHEMA))
    return parsed.select(
        *dl.SOURCE_COLUMNS,
        F.expr(KEY_ID).alias("pid"),
        F.col("j.name").alias("name"),
        F.col("value").isNull().alias("deleted"),
        F.expr("unix_millis(timestamp)").alias("ts_ms"),
        F.expr(error).alias("error"),
        F.expr(detail).alias("detail"),
    )


# --- the referential table, held by the driver ---------------------------------------------

Version = tuple[int, int, int, str | None, bool]  # partition, offset, ts_ms, name, deleted


@dataclass
class Table:
    """The referential the driver holds: ``names`` (product id → name) is the table folded up
    to the purchases' progress; ``pending`` holds, per product and in log order, the versions
    read but newer than that (a purchase sees them by its own timestamp)."""

    names: dict[int, str] = field(default_factory=dict)
    version: int = 0
    pending: dict[int, list[Version]] = field(default_factory=dict)

    def apply(self, rows: list[tuple[int, Version]]) -> None:
        """Apply ``(pid, version)`` rows to :attr:`names` in log order (a tombstone deletes)."""
        for pid, (_, _, _, name, deleted) in sorted(rows, key=lambda r: (r[1][0], r[1][1])):
            if deleted or name is None:
                self.names.pop(pid, None)
            else:
                self.names[pid] = name
        if rows:
            self.version += 1

    def add(self, rows: list[tuple[int, Version]]) -> None:
        """Keep a batch's valid referential rows as pending versions (log order per product)."""
        for pid, versions in group_versions(rows).items():
            self.pending.setdefault(pid, []).extend(versions)

    def fold(self, watermark: int) -> None:
        """Fold into :attr:`names` every product's latest pending version (log order) with a
        timestamp ≤ ``watermark`` (ms), and drop the versions before it: no purchase still to
        come is older than ``watermark``, so none could see them."""
        rows: list[tuple[int, Version]] = []
        for pid, versions in list(self.pending.items()):
            last = max((i for i, v in enumerate(versions) if v[2] <= watermark), default=-1)
            if last < 0:
                continue
            rows.append((pid, versions[last]))
            if last + 1 < len(versions):
                self.pending[pid] = versions[last + 1 :]
            else:
                del self.pending[pid]
        self.apply(rows)

    def task_versions(self) -> dict[int, list[tuple[int, str | None]]]:
        """The pending versions as the tasks read them: ``(ts_ms, name or None)`` in log order."""
        return {
            pid: [(ts, None if deleted else name) for _, _, ts, name, deleted in versions]
            for pid, versions in self.pending.items()
        }

    def latest(self) -> dict[int, str]:
        """The table with every version read applied (what a purchase newer than all sees)."""
        out = dict(self.names)
        for pid, versions in self.pending.items():
            _, _, _, name, deleted = versions[-1]
            if deleted or name is None:
                out.pop(pid, None)
            else:
                out[pid] = name
        return out


def group_versions(rows: list[tuple[int, Version]]) -> dict[int, list[Version]]:
    """The batch's referential rows per product id, in log order."""
    out: dict[int, list[Version]] = {}
    for pid, version in rows:
        out.setdefault(pid, []).append(version)
    for versions in out.values():
        versions.sort(key=lambda v: (v[0], v[1]))
    return out


@dataclass(frozen=True)
class EnrichTask:
    """What every task of one micro-batch runs (pickled to the executors): enrich its
    purchases (:mod:`.purchase_batches`), write output and dead letters, return counts and
    the newest purchase timestamp of each partition it read."""

    topics: EnrichmentTopics
    sink_options: Mapping[str, str]
    table: Any  # a Broadcast of purchase_batches.NameTable
    versions: Mapping[int, list[tuple[int, str | None]]]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.kafka.transactions import arrow_input_pairs, input_unit
        from streamscale.pipelines import purchase_batches as pb

        out = pb.Enriched()
        table = self.table.value
        # The write's unit is the purchase topic-partition the task reads (one a task).
        first = next((b for b in batches if b.num_rows), None)
        unit = None if first is None else input_unit(arrow_input_pairs(first))

        def rows() -> Iterator[Any]:
            for batch in [] if first is None else itertools.chain([first], batches):
                if batch.num_rows:
                    yield pb.enrich(batch, table, self.versions, self.topics.output, out)
            if out.dead:
                yield dl.dead_letter_batch(out.dead, self.topics.dlq)

        with collector_paused():
            write_rows(self.sink_options, rows(), unit)
        result = {"counts": out.counts, "newest": out.newest}
        yield pa.RecordBatch.from_pydict({"counts": [json.dumps(result)]})


# --- the pipeline -------------------------------------------------------------------------


@dataclass
class BatchCounts:
    """What one micro-batch did; ``purchases = enriched + purchases_dlq`` and
    ``referential = referential_applied + referential_dlq``."""

    purchases: int = 0
    enriched: int = 0
    unknown: int = 0
    purchases_dlq: int = 0
    referential: int = 0
    referential_applied: int = 0
    referential_dlq: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        out = {k: v for k, v in self.__dict__.items() if isinstance(v, int)}
        out.update({f"dlq.{k}": v for k, v in sorted(self.errors.items())})
        return out


class Enrichment(ForeachBatchQuery):
    """The enrichment query: build with the settings, :meth:`start`, read :attr:`counts`."""

    name = NAME
    default_source: KafkaSource = "kafka"

    def __init__(
        self,
        settings: Settings,
        checkpoint: str,
        topics: EnrichmentTopics | None = None,
        source: KafkaSource | None = None,
    ) -> None:
        self.settings = settings
        self.source = source or settings.source_for(self.default_source)
        self.checkpoint = checkpoint.rstrip("/")
        self.topics = topics or EnrichmentTopics()
        self.table = Table()
        self._table_bc: Any = None
        self._table_bc_version = -1
        self._next_batch: int | None = None
        self._last_offsets: tuple[int, dict[str, dict[int, int]]] | None = None
        self._lock = threading.Lock()
        self.counts: dict[int, BatchCounts] = {}

    # query ----------------------------------------------------------------------------------
    def _source(self, spark: SparkSession, topic: str, starting: str) -> DataFrame:
        return read_kafka(
            spark,
            self.settings,
            self.source,
            subscribe=topic,
            starting=starting,
            query_name=self.name,
        )

    def stream(self, spark: SparkSession) -> DataFrame:
        """Both topics in one streaming DataFrame; ``src`` (a literal per side) tells them
        apart. Inside ``foreachBatch`` the batch is a scan of an existing RDD (Spark 4.2), so
        the purchases job still reads the batch's referential records and filters them out."""
        from pyspark.sql import functions as F

        purchases = self._source(spark, self.topics.purchases, self.settings.starting_offsets)
        # A table is read in full: the referential always starts at the earliest offset, and
        # each batch reads it to its end (no maxOffsetsPerTrigger), so that no purchase misses
        # a version older than itself that a batch limit left for later.
        referential = read_kafka(
            spark,
            self.settings.model_copy(update={"max_offsets_per_trigger": None}),
            self.source,
            subscribe=self.topics.referential,
            starting="earliest",
            query_name=self.name,
        )
        return purchases.withColumn("src", F.lit("p")).unionByName(
            referential.withColumn("src", F.lit("r"))
        )

    def counts_of(self, batch_id: int) -> dict[str, int]:
        counts = self.counts.get(batch_id)
        return counts.as_dict() if counts is not None else {}

    # one micro-batch -------------------------------------------------------------------------
    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Read the batch's referential, enrich its purchases, write output and dead letters.

        The batch's referential records (their offset range is in the checkpoint's offset
        log) are read and checked by the driver first (its dead letters written from there)
        and kept as pending versions; then ONE Spark job reads the batch's purchases from
        Kafka and each task enriches and writes its own, against the folded table and the
        pending versions. Last, versions older than every partition's newest purchase of
        the batch are folded into the table.
        """
        from streamscale.kafka.sink import write_rows

        spark = batch.sparkSession
        with self._lock:
            if self._next_batch != batch_id:
                self._rebuild(spark, batch_id)
            counts = BatchCounts()

            start = self._topic_offsets(spark, batch_id - 1, self.topics.referential)
            end = self._topic_offsets(spark, batch_id, self.topics.referential)
            good, counts.referential, bad = read_referential(
                spark, self.settings, self.topics.referential, end, start if batch_id else None
            )
            if bad:
                write_rows(
                    self.settings.sink_options("driver"),
                    [dl.dead_letter_batch(bad, self.topics.dlq)],
                )
            self.table.add(good)
            task = EnrichTask(
                self.topics,
                self.settings.sink_options("tasks"),
                self._names(spark),
                self.table.task_versions(),
            )
            purchases = batch.where("src = 'p'").select(
                "key", "value", "topic", "partition", "offset", "timestamp"
            )
            newest: dict[int, int] = {}
            for row in purchases.mapInArrow(task, "counts STRING").collect():
                result = json.loads(row.counts)
                for name, n in result["counts"].items():
                    if name.startswith("dlq."):
                        error = name.removeprefix("dlq.")
                        counts.errors[error] = counts.errors.get(error, 0) + n
                    else:
                        setattr(counts, name, getattr(counts, name) + n)
                for p, ts in result["newest"].items():
                    newest[int(p)] = max(ts, newest.get(int(p), ts))
            counts.referential_applied = len(good)
            counts.referential_dlq = len(bad)
            for letter in bad:
                counts.errors[letter.error] = counts.errors.get(letter.error, 0) + 1
            if counts.purchases != counts.enriched + counts.purchases_dlq:
                raise RuntimeError(
                    f"batch {batch_id}: {counts.purchases} purchases read, {counts.enriched} "
                    f"enriched, {counts.purchases_dlq} dead-lettered"
                )
            if counts.referential != counts.referential_applied + counts.referential_dlq:
                raise RuntimeError(
                    f"batch {batch_id}: {counts.referential} referential records read, "
                    f"{counts.referential_applied} applied, {counts.referential_dlq} rejected"
                )
            if newest:
                self.table.fold(min(newest.values()))
            self.counts[batch_id] = counts
            self._next_batch = batch_id + 1

    def _names(self, spark: SparkSession) -> Any:
        """The table as a broadcast :class:`.purchase_batches.NameTable`, made anew only
        when the table changed."""
        if self._table_bc is None or self._table_bc_version != self.table.version:
            from streamscale.pipelines.purchase_batches import NameTable

            if self._table_bc is not None:
                self._table_bc.unpersist()
            self._table_bc = spark.sparkContext.broadcast(NameTable.of(self.table.names))
            self._table_bc_version = self.table.version
        return self._table_bc

    # restart ---------------------------------------------------------------------------------
    def _rebuild(self, spark: SparkSession, batch_id: int) -> None:
        """Rebuild the table as of the start of ``batch_id`` from the compacted topic: every
        version up to the previous batch's end, folded up to the oldest of the purchases'
        partitions' last timestamps (:func:`last_timestamps`; the newest timestamp of each
        partition is not stored, and an earlier fold point only keeps more versions pending)."""
        self.table = Table()
        self._table_bc_version = -1
        if batch_id > 0:
            until = self._topic_offsets(spark, batch_id - 1, self.topics.referential)
            rows, _, _ = read_referential(spark, self.settings, self.topics.referential, until)
            self.table.add(rows)
            ends = self._topic_offsets(spark, batch_id - 1, self.topics.purchases)
            last = last_timestamps(self.settings, self.topics.purchases, ends)
            if last:
                self.table.fold(min(last.values()))
            log.info(
                "enrichment: table rebuilt from %s up to %s: %d products, %d pending",
                self.topics.referential,
                until,
                len(self.table.names),
                len(self.table.pending),
            )
        self._next_batch = batch_id

    def _topic_offsets(self, spark: SparkSession, batch_id: int, topic: str) -> dict[int, int]:
        """``topic``'s end offsets of ``batch_id`` in the checkpoint's offset log (written
        before the batch runs: ``v1``, metadata, then one JSON line per source); empty for
        batch -1.

        A batch's start is the previous batch's end: the last file read is kept, so each
        offset file is read once.
        """
        if batch_id < 0:
            return {}
        if self._last_offsets is None or self._last_offsets[0] != batch_id:
            sources: dict[str, dict[int, int]] = {}
            text = read_text(spark, f"{self.checkpoint}/offsets/{batch_id}")
            for line in text.splitlines()[2:]:
                if line.startswith("{"):
                    for name, offsets in json.loads(line).items():
                        sources[name] = {int(p): int(o) for p, o in offsets.items()}
            self._last_offsets = (batch_id, sources)
        return dict(self._last_offsets[1].get(topic, {}))


def last_timestamps(settings: Settings, topic: str, ends: Mapping[int, int]) -> dict[int, int]:
    """The timestamp (ms) of the record before each partition's end offset in ``ends``
    (partitions without one, or whose record is gone, are left out)."""
    from streamscale.kafka.admin import KafkaAdmin
    from streamscale.kafka.offsets import TopicPartition
    from streamscale.kafka.options import parse_source
    from streamscale.kafka.source import KafkaInputPartition, read_range

    options = parse_source({**settings.source_options(), "subscribe": topic})
    admin = KafkaAdmin(options.kafka, settings.request_timeout_s)
    try:
        earliest = admin.earliest([TopicPartition(topic, p) for p in ends])
    finally:
        admin.close()
    out: dict[int, int] = {}
    for p, end in sorted(ends.items()):
        if end - 1 < earliest.get(TopicPartition(topic, p), end):
            continue
        for batch in read_range(options, KafkaInputPartition(topic, p, end - 1, end), False):
            if batch.num_rows:
                out[p] = int(batch.column("timestamp").cast("int64")[0].as_py()) // 1000
    return out


def read_referential(
    spark: SparkSession,
    settings: Settings,
    topic: str,
    until: Mapping[int, int],
    start: Mapping[int, int] | None = None,
) -> tuple[list[tuple[int, Version]], int, list[dl.DeadLetter]]:
    """The valid records of ``topic`` in ``[start, until)`` (next offsets per partition;
    ``start`` None or a missing partition: the earliest offset), how many were read, and
    the invalid ones as dead letters.

    Read by the driver with the source's own reader; records in the compact form are read
    in Python (:func:`.products.compact_product`), any other by Spark SQL
    (:func:`parse_referential`), in one job for the batch if there are any.
    """
    import pyarrow as pa

    from streamscale.kafka.admin import KafkaAdmin
    from streamscale.kafka.offsets import TopicPartition
    from streamscale.kafka.options import parse_source
    from streamscale.kafka.source import KafkaInputPartition, read_range, source_schema

    options = parse_source({**settings.source_options(), "subscribe": topic})
    begin = dict(start or {})
    missing = [TopicPartition(topic, p) for p in until if p not in begin]
    if missing:
        admin = KafkaAdmin(options.kafka, settings.request_timeout_s)
        try:
            begin.update({tp.partition: o for tp, o in admin.earliest(missing).items()})
        finally:
            admin.close()
    batches: list[Any] = []
    for p, end in sorted(until.items()):
        if end > begin[p]:
            part = KafkaInputPartition(topic, p, begin[p], end)
            batches.extend(read_range(options, part, False))
    read = sum(b.num_rows for b in batches)
    good: list[tuple[int, Version]] = []
    slow: list[Any] = []
    for b in batches:
        keys, values, parts, offsets = (
            b.column(c).to_pylist() for c in ("key", "value", "partition", "offset")
        )
        stamps = b.column("timestamp").cast(pa.int64()).to_pylist()  # µs
        left = []
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            compact = compact_product(key, value)
            if compact is None:
                left.append(i)
                continue
            pid, name = compact
            good.append((pid, (parts[i], offsets[i], stamps[i] // 1000, name, name is None)))
        if left:
            slow.append(b.take(pa.array(left, pa.int64())))
    bad: list[dl.DeadLetter] = []
    if not slow:
        return good, read, bad
    # Anything but the compact form: Spark SQL's reading (the definition).
    df = spark.createDataFrame(pa.Table.from_batches(slow), source_schema(False))
    columns = ("pid", "ts_ms", "name", "deleted", "error", "detail", *dl.SOURCE_COLUMNS)
    parsed = parse_referential(df).select(*columns).toArrow()
    for r in parsed.drop_columns(["key", "value", "topic", "detail"]).to_pylist():
        if r["error"] is None:
            good.append(
                (r["pid"], (r["partition"], r["offset"], r["ts_ms"], r["name"], bool(r["deleted"])))
            )
    for r in parsed.filter(parsed.column("error").is_valid()).to_pylist():
        bad.append(
            dl.DeadLetter(
                r["key"],
                r["value"],
                r["topic"],
                r["partition"],
                r["offset"],
                r["error"],
                r["detail"],
            )
        )
    return good, read, bad
