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

- every batch reads the referential to its end offset at planning time (Spark's offset log
  keeps it, so a replay reads the same range): ``maxOffsetsPerTrigger`` limits the purchases
  only, and no purchase misses an older version because a batch limit cut the referential;
- versions read ahead of the purchases stay *pending*; a version is folded into the table
  once Spark's watermark passes its timestamp. The **fold point** is the batch's watermark:
  the newest purchase timestamp of the batches before it minus ``watermark_delay_s`` (only
  purchases move it; it never goes back). A purchase older than the fold point (timestamps
  out of order across partitions by more than the delay) sees the folded table, as a Kafka
  Streams KTable join sees the table as it is; no row is dropped as late;
- a record appended after a batch was planned applies from the next batch on, even to a
  purchase it predates (no engine sees a record before it exists).

So a rename produced between two purchases is seen by the second one whether or not the
three records fall into one micro-batch, and a replayed batch (its offsets and watermark are
in the checkpoint) gives the same answers. A restart is Spark's restart from the checkpoint:
the table, pending versions included, is in the state store.

**How: a table sharded in Spark's state store** (issue 22; the Kafka Streams KTable with its
repartition topic). One query reads both topics (two Kafka sources, one checkpoint):

1. each task parses what it read. Purchases in Spark SQL, with no Python worker
   (:func:`parse_purchases`: the answers of :func:`.purchase_batches.parse`, a differential
   test checks them): one row per purchase keyed by product id, a bad one as its dead
   letter (original bytes and headers) keyed by its offset. Referential records as Spark
   SQL checked them (:func:`parse_referential`, the definition of a good one), then in a
   Python task (``mapInArrow``, :class:`ParseTask`, only where the referential has new
   records), which writes their dead letters and returns one row per version (the name as
   the JSON text the output carries) and a row of counts (gathered by Spark's ``observe``
   into the batch's progress). Measured (docs/sustainable.md): with the purchases' hand-off
   to Python and back gone, a batch at 10,000 purchases/s took 1.0 s instead of 1.6 s;
2. ONE shuffle by product id into the table operator (``jvm/operators``,
   ``io.streamscale.operators.ReferentialTable``: Spark's ``flatMapGroupsWithState`` in
   Java, no timeout, called through py4j). Its state, one entry per product in the state
   store (RocksDB with changelog checkpointing by default, ``spark.sql.shuffle.partitions``
   state partitions spread over the executors), is the folded name and the pending versions;
   per product of a batch it appends the batch's versions (log order), folds at the
   watermark, names the batch's purchases by the as-of rule above and writes the entry back
   only if it changed. JVM code only: no Python call per key. The bad purchases pass
   through untouched;
3. ``foreachBatch`` runs a ``mapInArrow`` over the operator's output (:class:`WriteTask`)
   that writes the named purchases (:func:`.purchase_batches.output`: the JSON records
   joined column-wise) to ``achats-enrichis`` and the bad purchases to the dead-letter
   topic with the project's producer, on the executors (exactly-once: it yields them to
   the JVM's transactional writer, below), counting the purchases as it goes.

The driver keeps nothing between batches; it reads no checkpoint file of its own. Chosen by
measurement (``docs/scaling.md``): PySpark's ``applyInPandasWithState`` over the same shuffle
cost 7.3 s a batch at 20k distinct keys; the earlier design (the whole referential as a dict
on the driver, broadcast to every task after each change, its range read from Spark's offset
log) spent 8.1 s of driver time per changed batch at 10⁷ products and needed the table in the
driver's and every executor's memory.

**Kafka reader.** By default (``kafka_source=auto``) Spark's own connector,
``format("kafka")``; ``streamscale-kafka`` gives the same answers (measured equal within
noise in steady rate, the connector faster to start: docs/benchmarks.md, "Pipelines
(issue 3)").

Counts (:meth:`Enrichment.batch_counts`, in each batch's progress): ``purchases = enriched +
purchases_dlq`` and ``referential = referential_applied + referential_dlq``; ``unknown``
counts the enriched purchases named ``REF INCONNUE``; ``dlq.<error>`` per error. The table
operator's figures (rows updated and removed, state bytes, RocksDB metrics) are in the
progress's ``stateOperators``.

Delivery is at-least-once by default, as with the Kafka sink: a batch replayed after a crash
may repeat its output and dead letters, never lose them; state and counts are exact. With
``delivery=exactly-once`` each task writes in one Kafka transaction per batch
(:mod:`streamscale.kafka.transactions`): a referential task's unit is the topic-partition
it reads (role ``parse``; the offset log fixes its range), a write task's is its shuffle
partition (role ``write``; a hash partitioning by product id, or by offset for a bad
purchase, the same on a replay). The write step's
transactions run in the executor JVM (:func:`.transactions.write_in_jvm`): the Python task
yields the sink rows and its counts, and the JVM, which keeps one producer per unit for its
life, writes them; a producer kept by a Python worker was fenced by another worker's
almost every batch (docs/benchmarks.md, exactly-once section).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from streamscale.kafka import transactions as tx
from streamscale.kafka.options import HEADERS_TYPE, headers_arrow_type
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines.query import (
    ForeachBatchQuery,
    jvm_operator,
    progress_data,
    read_kafka,
)
from streamscale.settings import KafkaSource, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NAME: Final = "enrichment"

OPERATOR: Final = "io.streamscale.operators.ReferentialTable"
"""The table operator's class (``jvm/operators/src``, built into ``jvm/lib/operators``)."""
OBSERVED: Final = "enrichment-tasks"
"""Name of the observed metric that gathers the parse tasks' counts into the batch's progress."""
EVENT_TIME: Final = "event_time"
PURCHASE: Final = "p"
VERSION: Final = "r"
DEAD: Final = "d"
COUNTS: Final = "c"
KEYED_COLUMNS: Final = (
    ("kind", "STRING"),
    ("pid", "BIGINT"),
    ("key", "BINARY"),
    ("id_text", "STRING"),
    ("price", "STRING"),
    ("name", "STRING"),
    ("ts", "BIGINT"),
    ("part", "INT"),
    ("off", "BIGINT"),
    ("counts", "STRING"),
    ("value", "BINARY"),
    ("headers", HEADERS_TYPE),
)
KEYED_SCHEMA: Final = ", ".join(f"{name} {kind}" for name, kind in KEYED_COLUMNS)
"""The rows into the table operator: purchases (kind ``p``) and versions (``r``) keyed by
product id, bad purchases (``d``: their original ``value`` and dead-letter ``headers``),
and the referential tasks' counts (``c``)."""

PRODUCT_SCHEMA: Final = "id BIGINT, name STRING, _corrupt STRING"
KEY_ID: Final = "TRY_CAST(CAST(key AS STRING) AS BIGINT)"
PRODUCT_FIELDS: Final = {"id": "an integer product id", "name": "a string"}
PURCHASE_SCHEMA: Final = "id BIGINT, price DECIMAL(10,2), _corrupt STRING"


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


def sql_purchase_pattern() -> str:
    """:data:`.purchase_batches.PURCHASE_PATTERN` for Java's regular expressions: numbered
    groups (1: the id, 2: the price) and ``\\z`` for its end (Java's ``$`` also matches
    before a final line break, RE2's does not)."""
    import re

    from streamscale.pipelines.purchase_batches import PURCHASE_PATTERN

    return re.sub(r"\(\?P<\w+>", "(", PURCHASE_PATTERN).removesuffix("$") + r"\z"


def parse_purchases(df: DataFrame) -> DataFrame:
    """Purchases (source rows) → :data:`KEYED_SCHEMA` rows in Spark SQL, no Python worker:
    a usable purchase as kind ``p`` keyed by its product id, a bad one as kind ``d`` with its
    dead letter's ``value`` and ``headers`` (keyed by its offset: any key would do, the
    operator passes it through to the write step).

    The same answers as :func:`.purchase_batches.parse`: the compact form producers write is
    recognised by the same regular expression and keeps its id and price texts; any other
    value is read as ``from_json`` into ``id BIGINT, price DECIMAL(10,2)`` reads it (which
    :func:`.purchase_batches.check_purchase` mirrors), with the error codes and details of
    :func:`.deadletter.json_error_sql` (a value that is not UTF-8 among them: not JSON);
    a purchase without a key is refused whatever its value."""
    from pyspark.sql import functions as F

    from streamscale.pipelines.purchase_batches import PURCHASE_FIELDS

    text = "CAST(value AS STRING)"
    pattern = dl.sql_str(sql_purchase_pattern())
    what = "purchase value"
    # The compact form's id text, '' when the value is not in it (a match has an id).
    matched = df.withColumn("id_match", F.expr(f"regexp_extract({text}, {pattern}, 1)"))
    # Read as JSON only when needed (a CASE branch: the compact form never pays for it).
    parsed = matched.withColumn(
        "j",
        F.expr(
            f"CASE WHEN key IS NOT NULL AND id_match = '' "
            f"THEN from_json({text}, {dl.sql_str(PURCHASE_SCHEMA)}) END"
        ),
    )
    json_error = dl.json_error_sql(text, "j", PURCHASE_FIELDS)
    json_detail = dl.json_detail_sql(text, "j", PURCHASE_FIELDS, what)
    # from_json reads a JSON string as a decimal too ("2.50"); a purchase's price must be a
    # number (check_purchase), which only the value's own types tell.
    price_string = f"schema_of_variant(variant_get(try_parse_json({text}), '$.price')) = 'STRING'"
    wrong = dl.sql_str(
        f"{what} has a field of the wrong type (expected "
        + ", ".join(f"{f} {d}" for f, d in PURCHASE_FIELDS.items())
        + ")"
    )
    checked = parsed.withColumns(
        {
            "error": F.expr(
                f"CASE WHEN key IS NULL THEN '{dl.NULL_KEY}' "
                f"WHEN id_match <> '' THEN NULL "
                f"WHEN ({json_error}) IS NOT NULL THEN ({json_error}) "
                f"WHEN {price_string} THEN '{dl.WRONG_TYPE}' END"
            ),
            "detail": F.expr(
                "CASE WHEN key IS NULL THEN 'purchase key (transaction id) is null' "
                f"WHEN id_match <> '' THEN NULL "
                f"WHEN ({json_error}) IS NOT NULL THEN ({json_detail}) "
                f"WHEN {price_string} THEN {wrong} END"
            ),
        }
    )
    good = "error IS NULL"
    fast = "id_match <> ''"
    # A price read as JSON keeps the sign of a negative zero, as Python's Decimal does.
    price_text = (
        "CASE WHEN j.price = 0 AND ltrim(get_json_object(value_text, '$.price')) LIKE '-%' "
        "THEN '-0.00' ELSE CAST(j.price AS STRING) END"
    ).replace("value_text", text)
    headers = dl.headers_sql("error", "detail", "topic", "partition", "offset")
    return checked.select(
        F.expr(f"CASE WHEN {good} THEN '{PURCHASE}' ELSE '{DEAD}' END").alias("kind"),
        F.expr(
            f"CASE WHEN {fast} THEN CAST(id_match AS BIGINT) WHEN {good} THEN j.id ELSE offset END"
        ).alias("pid"),
        F.col("key"),
        F.expr(f"CASE WHEN {fast} THEN id_match WHEN {good} THEN CAST(j.id AS STRING) END").alias(
            "id_text"
        ),
        F.expr(
            f"CASE WHEN {fast} THEN regexp_extract({text}, {pattern}, 2) "
            f"WHEN {good} THEN {price_text} END"
        ).alias("price"),
        F.lit(None).cast("string").alias("name"),
        F.expr("unix_millis(timestamp)").alias("ts"),
        F.col("partition").cast("int").alias("part"),
        F.col("offset").cast("bigint").alias("off"),
        F.lit(None).cast("string").alias("counts"),
        F.expr(f"CASE WHEN {good} THEN NULL ELSE value END").alias("value"),
        F.expr(f"CASE WHEN {good} THEN NULL ELSE {headers} END").alias("headers"),
    )


# --- the tasks (pickled to the executors) ------------------------------------------------


@dataclass(frozen=True)
class ParseTask:
    """Step 1 of the module doc for the referential's records (Spark SQL checked them,
    :func:`parse_referential`): dead-letter the bad ones, key the rest by product id as
    versions (:data:`KEYED_SCHEMA`, the name as the JSON text the output carries), and yield
    one row of counts. A task runs only where the referential has new records."""

    dlq: str
    sink_options: Mapping[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.kafka.transactions import arrow_input_pairs, input_unit
        from streamscale.pipelines import purchase_batches as pb

        out = pb.Enriched()
        read: set[tuple[str, int]] = set()
        with collector_paused():
            for batch in batches:
                if not batch.num_rows:
                    continue
                read |= arrow_input_pairs(batch)
                yield referential_versions(batch, out)
            if out.dead:
                write_rows(
                    self.sink_options,
                    [dl.dead_letter_batch(out.dead, self.dlq)],
                    input_unit(read),
                )
        yield pa.RecordBatch.from_pylist(
            [{"kind": COUNTS, "counts": json.dumps(out.counts)}], schema=keyed_schema()
        )


def keyed_schema() -> Any:
    """:data:`KEYED_SCHEMA` as an Arrow schema."""
    import pyarrow as pa

    arrow = {
        "STRING": pa.string(),
        "BIGINT": pa.int64(),
        "BINARY": pa.binary(),
        "INT": pa.int32(),
        HEADERS_TYPE: headers_arrow_type(),
    }
    return pa.schema([(name, arrow[kind]) for name, kind in KEYED_COLUMNS])


def referential_versions(batch: Any, out: Any) -> Any:
    """Referential rows checked by :func:`parse_referential` as :data:`KEYED_SCHEMA`
    versions (name as JSON text, null for a tombstone); the bad ones go to ``out.dead``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from streamscale.pipelines import purchase_batches as pb

    out.count("referential", batch.num_rows)
    bad = batch.filter(batch.column("error").is_valid())
    for r in bad.select([*dl.SOURCE_COLUMNS, "error", "detail"]).to_pylist():
        out.dead.append(
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
        out.count("referential_dlq")
        out.count(f"dlq.{r['error']}")
    good = batch.filter(batch.column("error").is_null())
    n = good.num_rows
    out.count("referential_applied", n)
    deleted = good.column("deleted").to_pylist()
    names = [
        None if d else name
        for d, name in zip(deleted, good.column("name").to_pylist(), strict=True)
    ]
    stamps = pc.cast(good.column("ts_ms"), pa.int64())
    schema = keyed_schema()
    columns = {
        "kind": pa.array([VERSION] * n, pa.string()),
        "pid": good.column("pid"),
        "key": pa.nulls(n, pa.binary()),
        "id_text": pa.nulls(n, pa.string()),
        "price": pa.nulls(n, pa.string()),
        "name": pb.name_json(names),
        "ts": stamps,
        "part": pc.cast(good.column("partition"), pa.int32()),
        "off": pc.cast(good.column("offset"), pa.int64()),
        "counts": pa.nulls(n, pa.string()),
        "value": pa.nulls(n, pa.binary()),
        "headers": pa.nulls(n, headers_arrow_type()),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


@dataclass(frozen=True)
class WriteTask:
    """Step 3 of the module doc: write the named purchases, and the bad ones' dead letters
    that the table operator passed through; yield one row of counts (``purchases``,
    ``enriched``, ``unknown``, ``purchases_dlq``, ``dlq.<error>``)."""

    output: str
    sink_options: Mapping[str, str] | None
    """None: yield the sink rows for the JVM's transactional writer
    (:data:`.transactions.JVM_ROWS`) instead of writing them."""
    dlq: str = dl.dlq_topic(NAME)

    def sink_rows(self, batch: Any, out: Any) -> Iterator[Any]:
        """The sink rows (``key, value, topic`` and, for dead letters, ``headers``) of the
        operator's output ``batch``, counted into ``out``."""
        import pyarrow as pa

        from streamscale.pipelines import purchase_batches as pb

        headers = batch.column("headers")
        named = batch
        if headers.null_count < batch.num_rows:
            dead = batch.filter(headers.is_valid())
            named = batch.filter(headers.is_null())
            for letter in dead.column("headers").to_pylist():
                error = next(h["value"] for h in letter if h["key"] == dl.HEADER_ERROR)
                out.count("purchases_dlq")
                out.count(f"dlq.{error.decode()}")
            out.count("purchases", dead.num_rows)
            yield dead.select(["key", "value", "headers"]).append_column(
                "topic", pa.array([self.dlq] * dead.num_rows, pa.string())
            )
        if named.num_rows:
            out.count("purchases", named.num_rows)
            yield pb.output(named.select(["key", "id_text", "price", "name"]), self.output, out)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from streamscale.kafka.collector import collector_paused
        from streamscale.kafka.sink import write_rows
        from streamscale.pipelines import purchase_batches as pb

        out = pb.Enriched()
        if self.sink_options is None:
            for b in batches:
                for rows in self.sink_rows(b, out):
                    yield jvm_rows(rows)
            yield jvm_rows(
                pa.RecordBatch.from_pydict({"value": pa.nulls(1, pa.binary())}),
                json.dumps(out.counts),
            )
            return
        with collector_paused():
            write_rows(
                self.sink_options,
                (rows for b in batches if b.num_rows for rows in self.sink_rows(b, out)),
            )
        yield pa.RecordBatch.from_pydict({"counts": [json.dumps(out.counts)]})


def jvm_rows(rows: Any, counts: str | None = None) -> Any:
    """Sink rows (any of ``key, value, topic, headers``) as :data:`.transactions.JVM_ROWS`,
    with ``counts`` (a pass-through row's) on every row."""
    import pyarrow as pa

    arrow = {"BINARY": pa.binary(), "STRING": pa.string(), HEADERS_TYPE: headers_arrow_type()}
    schema = pa.schema([(name, arrow[kind]) for name, kind in tx.JVM_COLUMNS])
    n = rows.num_rows
    columns = {name: rows.column(name) for name in rows.schema.names}
    columns["counts"] = pa.array([counts] * n, pa.string())
    return pa.RecordBatch.from_arrays(
        [columns.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema
    )


def table_operator(rows: DataFrame) -> DataFrame:
    """Step 2 of the module doc: ``rows`` (:data:`KEYED_SCHEMA` less the counts, with the
    watermark) through the JVM table operator; the named purchases ``key, id_text, price,
    name`` (name: JSON text, null when unknown)."""
    from pyspark.sql import DataFrame

    spark = rows.sparkSession
    operator = jvm_operator(spark, OPERATOR)
    return DataFrame(operator.enrich(rows._jdf), spark)


def pending_versions(data: bytes | None) -> list[tuple[int, str | None]]:
    """The pending versions of a table entry as the operator stores them (its state's
    ``pending`` field, read with Spark's state data source): (Kafka timestamp ms, name as
    JSON text or None for a tombstone), in log order.

    The layout (``ReferentialTable.encode``): big-endian int count, the count's timestamps as
    longs, then per version an int UTF-8 length (-1: a tombstone) and its bytes; empty: none.
    One binary field rather than two arrays keeps Spark's generated state deserializer the
    same from batch to batch (``ReferentialTable.Entry`` says why)."""
    if not data:
        return []
    (count,) = struct.unpack_from(">i", data)
    stamps = struct.unpack_from(f">{count}q", data, 4)
    at = 4 + 8 * count
    out: list[tuple[int, str | None]] = []
    for stamp in stamps:
        (length,) = struct.unpack_from(">i", data, at)
        at += 4
        if length < 0:
            out.append((stamp, None))
            continue
        out.append((stamp, bytes(data[at : at + length]).decode()))
        at += length
    if at != len(data):
        raise ValueError(f"pending versions: {len(data) - at} bytes after the last version")
    return out


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

    def add(self, counts: Mapping[str, int]) -> None:
        """Add a task's counts (``dlq.<error>`` into :attr:`errors`)."""
        for name, n in counts.items():
            if name.startswith("dlq."):
                error = name.removeprefix("dlq.")
                self.errors[error] = self.errors.get(error, 0) + int(n)
            else:
                setattr(self, name, getattr(self, name) + int(n))

    def as_dict(self) -> dict[str, int]:
        out = {k: v for k, v in self.__dict__.items() if isinstance(v, int)}
        out.update({f"dlq.{k}": v for k, v in sorted(self.errors.items())})
        return out


class Enrichment(ForeachBatchQuery):
    """The enrichment query: build with the settings, :meth:`start`, read
    :meth:`batch_counts` of its progress."""

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
        self.counts: dict[int, dict[str, int]] = {}
        """The write step's counts per batch id (the purchases: ``purchases``, ``enriched``,
        ``unknown``, ``purchases_dlq``, ``dlq.<error>``); the referential tasks' are in the
        progress."""

    def stream(self, spark: SparkSession) -> DataFrame:
        """The purchases of each batch named by the table in the state store (module doc,
        steps 1-2); Spark hands them to :meth:`process_batch`."""
        from pyspark.sql import functions as F

        s = self.settings
        purchases = read_kafka(
            spark,
            s,
            self.source,
            subscribe=self.topics.purchases,
            starting=s.starting_offsets,
            query_name=self.name,
        )
        # A table is read in full: the referential always starts at the earliest offset, and
        # each batch reads it to its end (no maxOffsetsPerTrigger), so that no purchase misses
        # a version older than itself that a batch limit left for later.
        referential = read_kafka(
            spark,
            s.model_copy(update={"max_offsets_per_trigger": None}),
            self.source,
            subscribe=self.topics.referential,
            starting="earliest",
            query_name=self.name,
        )
        # Purchases in Spark SQL (no Python worker); the referential's records, few after
        # the first batch, through a Python task that writes their dead letters itself.
        task = ParseTask(self.topics.dlq, s.sink_options("parse"))
        versions = parse_referential(referential).mapInArrow(task, KEYED_SCHEMA)
        rows = parse_purchases(purchases).unionByName(versions)
        rows = rows.observe(OBSERVED, F.collect_list("counts").alias("tasks"))
        # The fold point: Spark's watermark over the purchases' timestamps (a version's row
        # carries the epoch, which never moves it). No timeout: no row is ever late.
        kind = F.col("kind")
        stamp = F.when(kind == PURCHASE, F.col("ts")).otherwise(F.lit(0))
        delay_ms = round(s.watermark_delay_s * 1000)
        timed = (
            rows.filter(kind != COUNTS)
            .drop("counts")
            .withColumn(EVENT_TIME, F.timestamp_millis(stamp))
            .withWatermark(EVENT_TIME, f"{delay_ms} milliseconds")
        )
        return table_operator(timed)

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        """Write the batch's named purchases (module doc, step 3, on the executors)."""
        s = self.settings
        counts = BatchCounts()
        if s.delivery == "exactly-once":
            # Written by the executors' JVM, which keeps one transactional producer per
            # unit for its life (transactions.write_in_jvm says why not the Python workers).
            task = WriteTask(self.topics.output, None, self.topics.dlq)
            rows = batch.mapInArrow(task, tx.JVM_ROWS)
            for _, text in tx.write_in_jvm(rows, s.kafka_options(), s.kafka_config(), "write"):
                counts.add(json.loads(text))
        else:
            task = WriteTask(self.topics.output, s.sink_options("write"), self.topics.dlq)
            for row in batch.mapInArrow(task, "counts STRING").collect():
                counts.add(json.loads(row["counts"]))
        self.counts[batch_id] = counts.as_dict()

    def counts_of(self, batch_id: int) -> dict[str, int]:
        counts = self.counts.get(batch_id)
        return dict(counts) if counts is not None else {}

    def batch_counts(self, progress: Any) -> dict[str, int]:
        """The batch's counts (:class:`BatchCounts`): the parse tasks' (observed) and the
        write step's."""
        data = progress_data(progress)
        counts = BatchCounts()
        counts.add(super().batch_counts(data))
        observed = (data.get("observedMetrics") or {}).get(OBSERVED) or {}
        for text in observed.get("tasks") or []:
            counts.add(json.loads(text))
        return counts.as_dict()
