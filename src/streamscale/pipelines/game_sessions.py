"""Game sessions: frames joined with their approvals within 3 s, hits decoded, per-machine sessions.

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

One streaming query, all in Spark SQL (no Python UDF), one checkpoint:

1. Parse both sides; bad records (null or non-JSON key, wrong types, missing fields, invalid
   values) go to ``game-sessions-dlq``. Each hit of a frame is checked with the codec's SQL
   (:func:`.hits.sql_hit_error`); a frame with undecodable hits is dead-lettered once (its
   original bytes, the hits and reasons in ``error.detail``), and its other hits go on.
2. Event time, on both inputs: the header's ``ts`` (an approval carries its frame's header).
   Each input carries a watermark (``watermark_delay_s``), so the slower one holds it back.
   An approval is "in time" when its Kafka timestamp is within ``[ts, ts + 3 s]``
   (``approval_window_s``): a check of the approval record alone, since its header holds
   ``ts``. Pairing is then an aggregation, not a stream-stream join: frames and in-time
   approvals are summed per header (``et, machine, zone``), and when the watermark passes a
   header its group is settled: approved when it has a frame and an approval, "unapproved"
   (filtered) when it has no approval, "late approvals" when it has approvals but no frame.
   Approvals outside the window are late approvals as they arrive. Measured against the
   full outer stream-stream join it replaces (docs/benchmarks.md): 27k instead of 17.8k
   frames/s, the join's RocksDB state lookups and key-index bookkeeping being most of the
   difference.
3. Each frame's hit statistics (count, impact sum and max, counts per impact type and
   direction) are computed from its decodable hits before the pairing (:func:`frame_stats`:
   no explode; the pairing state holds a few integers per header), and approved headers are
   summed per machine in ``session_window(et, session_gap_s)`` (30 s).

Output mode is **append**: a session is written once, when the watermark passes its end (last
frame + gap + watermark delay after the newest event), never updated. So a session is
emitted about 40 s (event time) after its last frame by default, and sessions still open when
an ``--available-now`` run ends stay in the state store (RocksDB, changelog checkpointing)
and continue in the next run.

Limits: an approval delivered twice (an upstream replay) approves its frame once and is
counted as a duplicate approval; two frames with the same header are one header, approved
together. The approval's body is not read (it is the frame's, byte for byte). Frames or
approvals later than the watermark are dropped by Spark, uncounted.

Counts (observed metrics in each batch's progress, :func:`batch_counts`): frames in = frames
dead-lettered + approved + unapproved (+ frames whose header the watermark has not passed);
approvals in = approvals dead-lettered + approved + late + duplicate approvals (+ waiting);
hits of approved frames = hits decoded + hits undecodable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import hits as codec
from streamscale.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

NAME: Final = "game-sessions"

KEY_SCHEMA: Final = "ts BIGINT, machine STRING, zone STRING, _corrupt STRING"
BODY_SCHEMA: Final = "game STRING, hits ARRAY<STRING>, _corrupt STRING"
KEY_FIELDS: Final = {
    "ts": "epoch milliseconds",
    "machine": "a 6-digit string",
    "zone": "EU|US|ZG|AU",
}
BODY_FIELDS: Final = {"game": "a game name", "hits": "a list of hit strings"}

CHECKED_DDL: Final = "ARRAY<STRUCT<hit: STRING, i: INT, reason: STRING>>"
OBSERVATIONS: Final = ("frames_dlq", "approvals_dlq", "hits_dlq", "join", "approvals_late")


@dataclass(frozen=True)
class GameTopics:
    """The topics of the pipeline (defaults: the catalog of :mod:`.topics`)."""

    requests: str = "GAME-FRAME-RQ"
    approvals: str = "GAME-FRAME-RS"
    output: str = "SESSIONS"
    dlq: str = dl.dlq_topic(NAME)


def _in(expr: str, values: tuple[str, ...]) -> str:
    return f"{expr} IN ({', '.join(dl.sql_str(v) for v in values)})"


def _header_checks() -> tuple[str, str]:
    """(error, detail) SQL of a frame key parsed into ``k``."""
    text = "CAST(key AS STRING)"
    error = dl.json_error_sql(text, "k", KEY_FIELDS, null_error=dl.NULL_KEY)
    detail = dl.json_detail_sql(text, "k", KEY_FIELDS, "frame key")
    invalid = (
        f"k.ts < 0 OR NOT (k.machine RLIKE '^[0-9]{{{codec.MACHINE_ID_DIGITS}}}$') "
        f"OR NOT {_in('k.zone', codec.ZONES)}"
    )
    return (
        f"CASE WHEN ({error}) IS NOT NULL THEN ({error}) "
        f"WHEN {invalid} THEN '{dl.INVALID_VALUE}' END",
        f"CASE WHEN ({error}) IS NOT NULL THEN ({detail}) "
        f"WHEN {invalid} THEN 'frame key: ts negative, machine not 6 digits or unknown zone' END",
    )


def _header_fields() -> list[Column]:
    """The frame header parsed into ``k``, as columns ``ts, machine, zone``."""
    from pyspark.sql import functions as F

    return [F.col(f"k.{name}").alias(name) for name in ("ts", "machine", "zone")]


def parse_requests(df: DataFrame) -> DataFrame:
    """Frame records → header, body, checked hits, ``error``/``detail`` (NULL: usable)."""
    from pyspark.sql import functions as F

    key_error, key_detail = _header_checks()
    text = "CAST(value AS STRING)"
    body_error = dl.json_error_sql(text, "b", BODY_FIELDS)
    body_detail = dl.json_detail_sql(text, "b", BODY_FIELDS, "frame body")
    lo, hi = codec.HITS_PER_FRAME_MIN, codec.HITS_PER_FRAME_MAX
    body_invalid = f"NOT {_in('b.game', codec.GAMES)} OR size(b.hits) NOT BETWEEN {lo} AND {hi}"
    error = (
        f"CASE WHEN ({key_error}) IS NOT NULL THEN ({key_error}) "
        f"WHEN ({body_error}) IS NOT NULL THEN ({body_error}) "
        f"WHEN {body_invalid} THEN '{dl.INVALID_VALUE}' END"
    )
    detail = (
        f"CASE WHEN ({key_error}) IS NOT NULL THEN ({key_detail}) "
        f"WHEN ({body_error}) IS NOT NULL THEN ({body_detail}) "
        f"WHEN {body_invalid} THEN 'frame body: unknown game or not {lo}-{hi} hits' END"
    )
    # Fast path: one (code-generated) regex validates the whole comma-joined list; only a
    # frame that fails it checks its hits one by one (a lambda, interpreted: 5x slower).
    joined = "concat_ws(',', b.hits)"
    all_valid = (
        f"(length({joined}) = size(b.hits) * {codec.HIT_HEX_LENGTH + 1} - 1 "
        f"AND {joined} RLIKE {dl.sql_str(hits_regex())})"
    )
    checked = (
        f"CASE WHEN {all_valid} THEN NULL ELSE "
        "transform(b.hits, (h, i) -> named_struct('hit', h, 'i', i, "
        f"'reason', {codec.sql_hit_error('h')})) END"
    )
    parsed = df.select(
        "*",
        F.from_json(F.expr("CAST(key AS STRING)"), KEY_SCHEMA).alias("k"),
        F.from_json(F.expr(text), BODY_SCHEMA).alias("b"),
    )
    return (
        parsed.select(
            *dl.SOURCE_COLUMNS,
            "timestamp",
            *_header_fields(),
            F.col("b.game").alias("game"),
            F.col("b.hits").alias("b_hits"),
            F.expr(checked).alias("checked"),
            F.expr(error).alias("error"),
            F.expr(detail).alias("detail"),
        )
        .select(
            "*",
            F.expr(
                "CASE WHEN checked IS NULL THEN b_hits "
                "ELSE transform(filter(checked, x -> x.reason IS NULL), x -> x.hit) END"
            ).alias("good"),
            F.expr(
                f"CASE WHEN checked IS NULL THEN CAST(array() AS {CHECKED_DDL}) "
                "ELSE filter(checked, x -> x.reason IS NOT NULL) END"
            ).alias("bad"),
        )
        .drop("b_hits")
    )


def parse_approvals(df: DataFrame) -> DataFrame:
    """Approval records → header, approval time, ``error``/``detail`` (the body is not read:
    it is byte-identical to the frame's)."""
    from pyspark.sql import functions as F

    key_error, key_detail = _header_checks()
    parsed = df.select("*", F.from_json(F.expr("CAST(key AS STRING)"), KEY_SCHEMA).alias("k"))
    return parsed.select(
        *dl.SOURCE_COLUMNS,
        "timestamp",
        *_header_fields(),
        F.expr(key_error).alias("error"),
        F.expr(key_detail).alias("detail"),
    )


def _counts_by_error(name: str, df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.observe(
        name,
        F.count(F.lit(1)).alias("records"),
        *(F.count(F.when(F.col("error") == e, 1)).alias(e) for e in dl.ERRORS),
    )


def _shared(df: DataFrame, *keys: str) -> DataFrame:
    """``df`` hash-partitioned by ``keys``, behind an optimizer barrier, for several branches.

    A source read by several branches of a streaming plan is read once per branch; a shuffle
    that the branches share is computed once (ReusedExchange). They share it only if the
    optimizer leaves the subtree below it identical: the guard is a non-deterministic filter
    (so branch filters are not pushed below it) that references every column (so column
    pruning gives every branch the same columns). Its second term is never evaluated.
    """
    from pyspark.sql import functions as F

    guard = (F.spark_partition_id() >= 0) | (F.xxhash64(*df.columns) == 0)
    return df.repartition(*keys).where(guard)


def hits_regex() -> str:
    """Java regex of a comma-joined list of valid hits (any case), from the codec's layout
    and code tables: exactly the hits :func:`.hits.decode_hit` accepts."""
    fields = []
    for _, _, width, table in sorted(codec.HIT_LAYOUT, key=lambda f: f[1]):
        if table is None:  # the impact value itself
            codes = [f"{v:0{width}X}" for v in range(codec.IMPACT_MIN, codec.IMPACT_MAX + 1)]
        else:
            codes = [f"{code:0{width}X}" for code in table.values()]
        fields.append("(?:" + "|".join(codes) + ")")
    hit = "".join(fields)
    return f"(?i)^{hit}(?:,{hit})*$"


def frame_stats() -> dict[str, str]:
    """SQL of one frame's hit statistics over its decodable hits ``good``: what a session
    sums, computed before the pairing so that its state carries a few integers instead of
    the hit strings. Unrolled over the at most 5 fixed-width hits of the comma-joined list
    ``hits_text`` (no explode, no lambda: all code-generated)."""
    step = codec.HIT_HEX_LENGTH + 1
    layout = {name: (start, width, table) for name, start, width, table in codec.HIT_LAYOUT}
    slots = range(codec.HITS_PER_FRAME_MAX)

    def field(name: str, i: int) -> str:
        start, width, _ = layout[name]
        return f"upper(substring(hits_text, {start + i * step}, {width}))"

    impacts = [
        f"CASE WHEN n_hits > {i} THEN TRY_CAST(conv({field('impact', i)}, 16, 10) AS INT) END"
        for i in slots
    ]
    stats = {
        "impact_sum": " + ".join(f"coalesce({x}, 0)" for x in impacts),
        "impact_max": f"greatest({', '.join(impacts)})",
    }
    for prefix, name in (("type", "impactType"), ("dir", "direction")):
        _, width, table = layout[name]
        assert table is not None
        for value, code in table.items():
            hexed = f"'{code:0{width}X}'"
            stats[f"{prefix}_{value}"] = " + ".join(
                f"(CASE WHEN n_hits > {i} AND {field(name, i)} = {hexed} THEN 1 ELSE 0 END)"
                for i in slots
            )
    return stats


def session_rows(frames: DataFrame, gap: str, output_topic: str) -> DataFrame:
    """Approved frames with :func:`frame_stats` → one sink row per closed session
    (``key, value, topic, headers``)."""
    from pyspark.sql import functions as F

    sessions = frames.groupBy(F.session_window("et", gap), "machine").agg(
        F.max_by("zone", "ts").alias("zone"),
        F.max_by("game", "ts").alias("game"),
        F.min("ts").alias("firstTs"),
        F.max("ts").alias("lastTs"),
        F.sum("frames").alias("frames"),
        F.sum("n_hits").alias("hits"),
        F.sum("impact_sum").alias("totalImpact"),
        F.max("impact_max").alias("maxImpact"),
        F.struct(*(F.sum(f"type_{t}").alias(t) for t in codec.IMPACT_TYPE_CODES)).alias(
            "impactTypes"
        ),
        F.struct(*(F.sum(f"dir_{d}").alias(d) for d in codec.DIRECTION_CODES)).alias("directions"),
    )
    value = F.to_json(
        F.struct(
            "machine",
            "zone",
            "game",
            F.expr("unix_millis(session_window.start)").alias("start"),
            F.expr("unix_millis(session_window.end)").alias("end"),
            "firstTs",
            "lastTs",
            "frames",
            "hits",
            "totalImpact",
            "maxImpact",
            "impactTypes",
            "directions",
        )
    )
    return sessions.select(
        F.col("machine").cast("binary").alias("key"),
        value.alias("value"),
        F.lit(output_topic).alias("topic"),
        dl.no_headers().alias("headers"),
    )


class GameSessions:
    """The game-sessions query: build with the settings, :meth:`start`."""

    name = NAME

    def __init__(
        self, settings: Settings, checkpoint: str, topics: GameTopics | None = None
    ) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.topics = topics or GameTopics()

    def _source(self, spark: SparkSession, topic: str) -> DataFrame:
        return (
            spark.readStream.format("streamscale-kafka")
            .options(**self.settings.source_options())
            .option("subscribe", topic)
            .option("startingOffsets", self.settings.starting_offsets)
            .option("queryName", self.name)
            .load()
        )

    def rows(self, spark: SparkSession) -> DataFrame:
        """The sink rows: sessions and dead letters, one streaming DataFrame."""
        from pyspark.sql import functions as F

        s = self.settings
        delay = f"{int(s.watermark_delay_s * 1000)} milliseconds"
        window = f"{int(s.approval_window_s * 1000)} milliseconds"
        gap = f"{int(s.session_gap_s * 1000)} milliseconds"
        dlq = self.topics.dlq

        # Each input feeds two or three branches (dead letters, the pairing): partitioned once
        # by the header and read from Kafka once (see _shared). Event time, on both sides: the
        # header's ts (a record's Kafka timestamp if its key is unusable); one watermark per
        # input, so the slower input holds the watermark back.
        # What crosses that shuffle is kept small: a frame's statistics instead of its hit
        # strings, and the original bytes only of records that will be dead-lettered.
        event_time = F.coalesce(F.timestamp_millis("ts"), F.col("timestamp"))

        def shared_input(df: DataFrame, lettered: Column) -> DataFrame:
            kept = df.select(
                F.when(lettered, F.col("key")).alias("key"),
                F.when(lettered, F.col("value")).alias("value"),
                *(c for c in df.columns if c not in ("key", "value")),
            )
            watermarked = kept.withColumn("et", event_time).withWatermark("et", delay)
            return _shared(watermarked, "ts", "machine", "zone")

        stats = frame_stats()
        parsed = (
            parse_requests(self._source(spark, self.topics.requests))
            .select(
                "*", F.size("good").alias("n_hits"), F.concat_ws(",", "good").alias("hits_text")
            )
            .select("*", *(F.expr(sql).alias(name) for name, sql in stats.items()))
            .drop("good", "hits_text")
        )
        requests = shared_input(parsed, F.col("error").isNotNull() | (F.size("bad") > 0))
        approvals = shared_input(
            parse_approvals(self._source(spark, self.topics.approvals)),
            F.col("error").isNotNull(),
        )

        bad_frames = _counts_by_error("frames_dlq", requests.where("error IS NOT NULL"))
        bad_approvals = _counts_by_error("approvals_dlq", approvals.where("error IS NOT NULL"))
        bad_hits = (
            requests.where("error IS NULL AND size(bad) > 0")
            .withColumn("error", F.lit(dl.UNDECODABLE_HIT))
            .withColumn(
                "detail",
                F.expr(
                    "concat('undecodable hit(s): ', concat_ws(', ', transform(bad, "
                    "x -> concat('hit ', x.i, ' ', coalesce(x.hit, 'null'), ' (', x.reason, ')'))))"
                ),
            )
            .observe(
                "hits_dlq",
                F.count(F.lit(1)).alias("frames"),
                F.sum(F.size("bad")).alias("hits"),
            )
        )

        frames = requests.where("error IS NULL").select(
            "ts",
            "machine",
            "zone",
            "game",
            "et",
            F.size("bad").alias("n_bad"),
            "n_hits",
            *stats,
            F.lit(1).alias("frames"),
            F.lit(0).alias("approvals"),
        )
        # An approval carries its frame's header, so "approved within the window" is a check
        # of the approval record alone; pairing is then a sum per header.
        in_time = f"timestamp BETWEEN et AND et + INTERVAL {window}"
        oks = (
            approvals.where("error IS NULL")
            .observe("approvals_late", F.count(F.when(~F.expr(in_time), 1)).alias("records"))
            .where(in_time)
            .select(
                "ts", "machine", "zone", "et", F.lit(0).alias("frames"), F.lit(1).alias("approvals")
            )
        )
        summed = ["frames", "approvals", "n_bad", "n_hits", *stats]
        pairs = (
            frames.unionByName(oks, allowMissingColumns=True)
            .groupBy("et", "machine", "zone")
            .agg(
                F.max("ts").alias("ts"),
                F.max("game").alias("game"),
                *(
                    (F.max(c) if c == "impact_max" else F.coalesce(F.sum(c), F.lit(0))).alias(c)
                    for c in summed
                ),
            )
        )
        paired = (F.col("frames") > 0) & (F.col("approvals") > 0)

        def total(when: Column, value: Column) -> Column:
            return F.coalesce(F.sum(F.when(when, value)), F.lit(0))

        observed = pairs.observe(
            "join",
            total(paired, F.col("frames")).alias("approved"),
            total(F.col("approvals") == 0, F.col("frames")).alias("unapproved"),
            total(F.col("frames") == 0, F.col("approvals")).alias("late_approvals"),
            total(paired & (F.col("approvals") > 1), F.col("approvals") - 1).alias(
                "duplicate_approvals"
            ),
            total(paired, F.col("n_hits")).alias("hits"),
            total(paired, F.col("n_bad")).alias("hits_undecodable"),
        )
        approved = observed.where(paired).drop("approvals", "n_bad")
        return (
            session_rows(approved, gap, self.topics.output)
            .unionByName(dl.dead_letters(bad_frames, dlq))
            .unionByName(dl.dead_letters(bad_approvals, dlq))
            .unionByName(dl.dead_letters(bad_hits, dlq))
        )

    def start(self, spark: SparkSession, trigger: Mapping[str, Any]) -> StreamingQuery:
        """Start the query (``trigger`` as for ``DataStreamWriter.trigger``)."""
        return (
            self.rows(spark)
            .writeStream.queryName(self.name)
            .format("streamscale-kafka")
            .options(**self.settings.source_options())
            .outputMode("append")
            .option("checkpointLocation", self.checkpoint)
            .trigger(**trigger)
            .start()
        )

    def batch_counts(self, progress: Any) -> dict[str, int]:
        """The pipeline's counts in ``progress`` (see :func:`batch_counts`)."""
        return batch_counts(progress)


def batch_counts(progress: Any) -> dict[str, int]:
    """The pipeline's counts in one progress (``StreamingQueryProgress``), flattened:
    ``frames_dlq.records``, ``join.approved``, ``hits_dlq.hits``... (missing ones are 0)."""
    out: dict[str, int] = {}
    if isinstance(progress, Mapping):
        observed = progress.get("observedMetrics") or {}
    else:
        observed = getattr(progress, "observedMetrics", None) or {}
    for name in OBSERVATIONS:
        row = observed.get(name)
        if row is None:
            continue
        fields = row if isinstance(row, Mapping) else row.asDict()
        for key, value in fields.items():
            out[f"{name}.{key}"] = int(value or 0)
    # Approvals outside the window are counted as they arrive, approvals whose frame never
    # came when the watermark closes their header: both are late approvals.
    out_of_window = out.pop("approvals_late.records", 0)
    if out_of_window or "join.late_approvals" in out:
        out["join.late_approvals"] = out.get("join.late_approvals", 0) + out_of_window
    return out
