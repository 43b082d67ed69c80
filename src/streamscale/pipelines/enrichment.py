"""Purchase enrichment: ``achats`` left-joined with the latest ``referentiel`` value per product.

Input: purchases ``{"id": product id, "price": decimal}`` keyed by transaction id, and the
compacted referential ``{"id", "name"}`` keyed by product id (a null value is a tombstone).
Output: ``achats-enrichis`` ``{"id","name","price"}`` keyed by the ORIGINAL purchase key,
``name`` ``"REF INCONNUE"`` when the product is unknown or deleted. Referential records are
never emitted; bad records of either topic go to ``enrichment-dlq`` (:mod:`.deadletter`).

Table semantics — what "known when the purchase is processed" means, deterministically:

- every referential record of an EARLIER micro-batch applies (latest by log order, a
  tombstone deletes);
- a referential record of the SAME micro-batch applies to a purchase when its Kafka
  timestamp is ≤ the purchase's (a tie goes to the referential), the latest such one by log
  order; otherwise the purchase sees the table as it was before the batch.

So a rename produced between two purchases is seen by the second one whether or not the
three records fall into one micro-batch, and a replayed batch (its offsets are in the
checkpoint) gives the same answers.

Design, chosen by measurement (docs/benchmarks.md, "Pipelines (issue 3)"): one query reads
both topics (two ``streamscale-kafka`` sources, one checkpoint) into ``foreachBatch``.

- Parsing, validation, the join and JSON formatting are Spark SQL (JVM); Python touches a
  purchase only in the Kafka source and sink. Each batch is ONE Spark job (read, parse, join,
  write output and dead letters): the batch's referential offset range is in the
  checkpoint's offset log (written before the batch runs), so the driver reads those few
  records itself, checks them with the same Spark SQL, and keeps the table (a dict, like a
  Kafka Streams GlobalKTable), handed to the JVM as a cached DataFrame whenever it changes.
  Purchases are joined against it (broadcast while small, shuffled otherwise: Spark's
  shuffle re-keys, no repartition topic) and against the batch's own referential versions
  (the as-of rule above, with array higher-order functions).
- The table is rebuilt from the compacted topic on (re)start, read up to the offsets where
  the replayed batch starts. The compacted topic is the changelog; nothing else is stored.
- The alternative, a KTable-style ``transformWithStateInPandas`` over the union of both topics
  keyed by product id (RocksDB + changelog checkpointing), moves every purchase through a
  Python state function on top of the source and sink, and ran at about 40k purchases/s on
  this machine against a 70k/s ceiling for the source and sink alone (the prototype's); the
  JVM design runs at 85-106k purchases/s steady today (docs/benchmarks.md). Its advantage,
  restart without re-reading the referential, is worth about 2 s for 100k products here
  (measured), which we accept. Limit: the table lives in the driver's memory (about 150
  bytes a product: millions are fine, billions are not).

Delivery is at-least-once, as with the Kafka sink: a batch replayed after a crash may repeat
its output, never lose it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.checkpoint_files import read_text
from streamscale.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

NAME: Final = "enrichment"
REF_UNKNOWN: Final = "REF INCONNUE"

PURCHASE_SCHEMA: Final = "id BIGINT, price DECIMAL(10,2), _corrupt STRING"
PRODUCT_SCHEMA: Final = "id BIGINT, name STRING, _corrupt STRING"
KEY_ID: Final = "TRY_CAST(CAST(key AS STRING) AS BIGINT)"
PURCHASE_FIELDS: Final = {"id": "an integer product id", "price": "a decimal"}
PRODUCT_FIELDS: Final = {"id": "an integer product id", "name": "a string"}


@dataclass(frozen=True)
class EnrichmentTopics:
    """The topics of the pipeline (defaults: the catalog of :mod:`.topics`)."""

    purchases: str = "achats"
    referential: str = "referentiel"
    output: str = "achats-enrichis"
    dlq: str = dl.dlq_topic(NAME)


# --- Spark SQL building blocks (pure functions of DataFrames) ------------------------------


def parse_purchases(df: DataFrame) -> DataFrame:
    """Source rows → plus ``pid, price, ts_ms, error, detail`` (error NULL: a good purchase)."""
    from pyspark.sql import functions as F

    text = "CAST(value AS STRING)"
    parsed = df.withColumn("j", F.from_json(F.expr(text), PURCHASE_SCHEMA))
    return parsed.select(
        *dl.SOURCE_COLUMNS,
        *(["src"] if "src" in df.columns else []),
        F.col("j.id").alias("pid"),
        F.col("j.price").alias("price"),
        F.expr("unix_millis(timestamp)").alias("ts_ms"),
        F.expr(dl.json_error_sql(text, "j", PURCHASE_FIELDS)).alias("error"),
        F.expr(dl.json_detail_sql(text, "j", PURCHASE_FIELDS, "purchase value")).alias("detail"),
    )


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


def parse_batch(df: DataFrame) -> DataFrame:
    """The union of both sources (``src`` 'p' or 'r') → purchase columns and ``error``.

    One projection: a purchase gets its purchase checks, a referential record its own (its
    ``from_json`` sits inside the CASE branch, so purchases never pay for it). Valid
    referential rows are dropped by :func:`enrich`; the driver reads them itself.
    """
    from pyspark.sql import functions as F

    parsed = parse_purchases(df)
    ref_json = f"from_json(CAST(value AS STRING), {dl.sql_str(PRODUCT_SCHEMA)})"
    ref_error, ref_detail = _referential_checks(ref_json)
    return parsed.withColumns(
        {
            "error": F.expr(f"CASE WHEN src = 'p' THEN error ELSE {ref_error} END"),
            "detail": F.expr(f"CASE WHEN src = 'p' THEN detail ELSE {ref_detail} END"),
        }
    )


def enrich(
    purchases: DataFrame,
    table: DataFrame,
    versions: DataFrame | None,
    topics: EnrichmentTopics,
) -> DataFrame:
    """Parsed purchases → sink rows ``key, value, topic, headers`` plus ``name, error``.

    A good purchase becomes its JSON output; a bad one its dead letter (original bytes,
    headers). One projection does both, so the batch's purchases are read from Kafka once.
    ``table`` (``id, name``) is the referential before the batch; ``versions`` (``pid,
    versions``: an array of ``partition, offset, ts_ms, name, deleted`` sorted by log order)
    holds the batch's own referential records, applied by the as-of rule of the module doc.
    """
    from pyspark.sql import functions as F

    joined = purchases.join(
        table.select(F.col("id").alias("pid"), F.col("name").alias("table_name")), "pid", "left"
    )
    table_name = F.coalesce(F.col("table_name"), F.lit(REF_UNKNOWN))
    if versions is None:
        name = table_name
    else:
        joined = joined.join(F.broadcast(versions), "pid", "left").withColumn(
            "v", F.expr("try_element_at(filter(versions, x -> x.ts_ms <= ts_ms), -1)")
        )
        name = (
            F.when(F.col("v").isNull(), table_name)
            .when(F.col("v.deleted"), F.lit(REF_UNKNOWN))
            .otherwise(F.col("v.name"))
        )
    good = F.col("error").isNull()
    output = F.to_json(
        F.struct(F.col("pid").alias("id"), name.alias("name"), F.col("price").alias("price"))
    )
    return joined.select(
        F.col("key"),
        F.when(good, F.encode(output, "UTF-8")).otherwise(F.col("value")).alias("value"),
        F.when(good, F.lit(topics.output)).otherwise(F.lit(topics.dlq)).alias("topic"),
        F.when(good, dl.no_headers())
        .otherwise(dl.headers_column(F.col("error"), F.col("detail")))
        .alias("headers"),
        F.when(good, name).alias("name"),
        F.col("error"),
        *([F.col("src")] if "src" in purchases.columns else []),
    )


# --- the referential table, held by the driver ---------------------------------------------

Version = tuple[int, int, int, str | None, bool]  # partition, offset, ts_ms, name, deleted


@dataclass
class Table:
    """The referential as of the start of the next batch: product id → name."""

    names: dict[int, str] = field(default_factory=dict)
    version: int = 0

    def apply(self, rows: list[tuple[int, Version]]) -> None:
        """Apply ``(pid, version)`` rows in log order (a tombstone deletes)."""
        for pid, (_, _, _, name, deleted) in sorted(rows, key=lambda r: (r[1][0], r[1][1])):
            if deleted or name is None:
                self.names.pop(pid, None)
            else:
                self.names[pid] = name
        if rows:
            self.version += 1


def group_versions(rows: list[tuple[int, Version]]) -> dict[int, list[Version]]:
    """The batch's referential rows per product id, in log order."""
    out: dict[int, list[Version]] = {}
    for pid, version in rows:
        out.setdefault(pid, []).append(version)
    for versions in out.values():
        versions.sort(key=lambda v: (v[0], v[1]))
    return out


VERSIONS_SCHEMA: Final = (
    "pid BIGINT, versions ARRAY<STRUCT<partition: INT, offset: BIGINT, ts_ms: BIGINT, "
    "name: STRING, deleted: BOOLEAN>>"
)


# --- writing to Kafka from foreachBatch ----------------------------------------------------


def write_kafka(df: DataFrame, sink_options: Mapping[str, str]) -> Counter[str]:
    """Write ``key, value, topic, headers`` rows with the project's sink; records per topic.

    Batch DataFrames cannot use the streaming sink, so each task runs its writer through
    ``mapInArrow`` (same producer, same delivery checks: a failed delivery fails the task).
    """
    from streamscale.kafka.options import parse_sink
    from streamscale.kafka.sink import KafkaStreamWriter

    options = parse_sink(sink_options, df.columns)

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        counts: Counter[str] = Counter()

        def counted() -> Iterator[Any]:
            for batch in batches:
                if batch.num_rows:
                    for item in pc.value_counts(batch.column("topic")).to_pylist():
                        counts[item["values"]] += item["counts"]
                yield batch

        KafkaStreamWriter(options).write(counted())
        yield pa.RecordBatch.from_pydict(
            {"topic": list(counts), "records": list(counts.values())},
            schema=pa.schema([("topic", pa.string()), ("records", pa.int64())]),
        )

    result: Counter[str] = Counter()
    for row in df.mapInArrow(write, "topic STRING, records BIGINT").collect():
        result[row.topic] += row.records
    return result


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


class Enrichment:
    """The enrichment query: build with the settings, :meth:`start`, read :attr:`counts`."""

    name = NAME

    def __init__(
        self,
        settings: Settings,
        checkpoint: str,
        topics: EnrichmentTopics | None = None,
    ) -> None:
        self.settings = settings
        self.checkpoint = checkpoint.rstrip("/")
        self.topics = topics or EnrichmentTopics()
        self.table = Table()
        self._table_df: DataFrame | None = None
        self._table_df_version = -1
        self._next_batch: int | None = None
        self._last_ref_offsets: tuple[int, dict[int, int]] | None = None
        self._lock = threading.Lock()
        self.counts: dict[int, BatchCounts] = {}

    # query ----------------------------------------------------------------------------------
    def _source(self, spark: SparkSession, topic: str, starting: str) -> DataFrame:
        return (
            spark.readStream.format("streamscale-kafka")
            .options(**self.settings.source_options())
            .option("subscribe", topic)
            .option("startingOffsets", starting)
            .option("queryName", self.name)
            .load()
        )

    def stream(self, spark: SparkSession) -> DataFrame:
        """Both topics in one streaming DataFrame; ``src`` (a literal per side) lets each
        job of a batch prune the other side's scan."""
        from pyspark.sql import functions as F

        purchases = self._source(spark, self.topics.purchases, self.settings.starting_offsets)
        # A table is read in full: the referential always starts at the earliest offset.
        referential = self._source(spark, self.topics.referential, "earliest")
        return purchases.withColumn("src", F.lit("p")).unionByName(
            referential.withColumn("src", F.lit("r"))
        )

    def start(self, spark: SparkSession, trigger: Mapping[str, Any]) -> StreamingQuery:
        """Start the query (``trigger`` as for ``DataStreamWriter.trigger``)."""
        return (
            self.stream(spark)
            .writeStream.queryName(self.name)
            .foreachBatch(self.process_batch)
            .option("checkpointLocation", self.checkpoint)
            .trigger(**trigger)
            .start()
        )

    def batch_counts(self, progress: Any) -> dict[str, int]:
        """The counts of the batch that ``progress`` (a ``StreamingQueryProgress``) reports."""
        batch_id = getattr(progress, "batchId", None)
        if batch_id is None and isinstance(progress, Mapping):
            batch_id = progress.get("batchId")
        counts = self.counts.get(int(batch_id)) if batch_id is not None else None
        return counts.as_dict() if counts is not None else {}

    # one micro-batch -------------------------------------------------------------------------
    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Apply the batch's referential, enrich its purchases, write output and dead letters.

        The batch's referential records (their offset range is in the checkpoint's offset
        log) are read by the driver first; then ONE Spark job reads the batch from Kafka,
        parses, joins and writes the output and every dead letter.
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        with self._lock:
            if self._next_batch != batch_id:
                self._rebuild(spark, batch_id)
            counts = BatchCounts()

            start = self._ref_offsets(spark, batch_id - 1) if batch_id > 0 else None
            end = self._ref_offsets(spark, batch_id)
            good, counts.referential = read_referential(
                spark, self.settings, self.topics.referential, end, start
            )
            versions_df = None
            if good:
                versions_df = spark.createDataFrame(
                    [(pid, [list(v) for v in vs]) for pid, vs in group_versions(good).items()],
                    VERSIONS_SCHEMA,
                )

            observation = Observation(f"{self.name}-{batch_id}")
            is_p = F.col("src") == "p"
            bad = F.col("error").isNotNull()
            rows = (
                enrich(
                    parse_batch(batch).where("src = 'p' OR error IS NOT NULL"),
                    self._table_frame(spark),
                    versions_df,
                    self.topics,
                )
                .observe(
                    observation,
                    F.count(F.col("name")).alias("enriched"),
                    F.count(F.when(F.col("name") == REF_UNKNOWN, 1)).alias("unknown"),
                    F.count(F.when(is_p & bad, 1)).alias("purchases_dlq"),
                    F.count(F.when(~is_p & bad, 1)).alias("referential_dlq"),
                    *(F.count(F.when(F.col("error") == e, 1)).alias(e) for e in dl.ERRORS),
                )
                .drop("name", "error", "src")
            )
            written = write_kafka(rows, self.settings.source_options())
            metrics = observation.get

            counts.enriched = int(metrics.get("enriched", 0))
            counts.unknown = int(metrics.get("unknown", 0))
            counts.purchases_dlq = int(metrics.get("purchases_dlq", 0))
            counts.purchases = counts.enriched + counts.purchases_dlq
            counts.referential_applied = len(good)
            counts.referential_dlq = int(metrics.get("referential_dlq", 0))
            counts.errors = {e: int(metrics.get(e, 0)) for e in dl.ERRORS if metrics.get(e)}
            expected = {self.topics.output: counts.enriched}
            expected[self.topics.dlq] = counts.purchases_dlq + counts.referential_dlq
            if {t: written[t] for t in expected} != expected:
                raise RuntimeError(f"batch {batch_id}: wrote {dict(written)}, counted {expected}")
            if counts.referential != counts.referential_applied + counts.referential_dlq:
                raise RuntimeError(
                    f"batch {batch_id}: {counts.referential} referential records read, "
                    f"{counts.referential_applied} applied, {counts.referential_dlq} rejected"
                )
            self.table.apply(good)
            self.counts[batch_id] = counts
            self._next_batch = batch_id + 1

    def _table_frame(self, spark: SparkSession) -> DataFrame:
        """The table as a cached DataFrame, recreated only when it changed."""
        if self._table_df is None or self._table_df_version != self.table.version:
            import pandas as pd

            frame = pd.DataFrame(
                {
                    "id": pd.Series(list(self.table.names), dtype="int64"),
                    "name": pd.Series(list(self.table.names.values()), dtype="object"),
                }
            )
            new = spark.createDataFrame(frame, "id BIGINT, name STRING").cache()
            new.count()  # materialized: its real size lets the planner broadcast it
            if self._table_df is not None:
                self._table_df.unpersist()
            self._table_df = new
            self._table_df_version = self.table.version
        return self._table_df

    # restart ---------------------------------------------------------------------------------
    def _rebuild(self, spark: SparkSession, batch_id: int) -> None:
        """Rebuild the table as of the start of ``batch_id`` from the compacted topic."""
        self.table = Table()
        self._table_df_version = -1
        if batch_id > 0:
            until = self._ref_offsets(spark, batch_id - 1)
            rows, _ = read_referential(spark, self.settings, self.topics.referential, until)
            self.table.apply(rows)
            log.info(
                "enrichment: table rebuilt from %s up to %s: %d products",
                self.topics.referential,
                until,
                len(self.table.names),
            )
        self._next_batch = batch_id

    def _ref_offsets(self, spark: SparkSession, batch_id: int) -> dict[int, int]:
        """The referential's end offsets of ``batch_id`` in the checkpoint's offset log
        (written before the batch runs: ``v1``, metadata, then one JSON line per source).

        A batch's start is the previous batch's end: the last answer is kept, so each offset
        file is read once.
        """
        if self._last_ref_offsets is not None and self._last_ref_offsets[0] == batch_id:
            return dict(self._last_ref_offsets[1])
        offsets: dict[int, int] = {}
        text = read_text(spark, f"{self.checkpoint}/offsets/{batch_id}")
        for line in text.splitlines()[2:]:
            if not line.startswith("{"):
                continue
            sources = json.loads(line)
            if self.topics.referential in sources:
                offsets = {int(p): int(o) for p, o in sources[self.topics.referential].items()}
                break
        self._last_ref_offsets = (batch_id, offsets)
        return dict(offsets)


def read_referential(
    spark: SparkSession,
    settings: Settings,
    topic: str,
    until: Mapping[int, int],
    start: Mapping[int, int] | None = None,
) -> tuple[list[tuple[int, Version]], int]:
    """The valid records of ``topic`` in ``[start, until)`` (next offsets per partition;
    ``start`` None or a missing partition: the earliest offset) and how many were read.

    Read by the driver with the source's own reader and checked by the same Spark SQL as
    the stream (invalid ones are dead-lettered by the batch job, not here).
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
        admin = KafkaAdmin(options.kafka, options.end_offsets_method, settings.request_timeout_s)
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
    if not read:
        return [], 0
    df = spark.createDataFrame(pa.Table.from_batches(batches), source_schema(False))
    parsed = parse_referential(df).where("error IS NULL")
    rows = parsed.select("pid", "partition", "offset", "ts_ms", "name", "deleted").toArrow()
    return [
        (r["pid"], (r["partition"], r["offset"], r["ts_ms"], r["name"], bool(r["deleted"])))
        for r in rows.to_pylist()
    ], read
