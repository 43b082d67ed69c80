"""What both seed pipelines share: a streaming query whose micro-batches run in
``foreachBatch``, its Kafka reader (Spark's connector or the project's source), and their
counts looked up by the batch id of a progress event."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from streamscale.errors import LaunchError
from streamscale.settings import KafkaSource, Settings
from streamscale.spark import stops_cleanly

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


class OperatorMissingError(LaunchError):
    """The project's JVM operators are not built or not on the session's class path."""


def jvm_operator(spark: SparkSession, name: str) -> Any:
    """The class ``name`` of the project's JVM operators (``jvm/operators``) in ``spark``'s
    driver, through py4j."""
    from py4j.java_gateway import JavaClass

    found: Any = spark.sparkContext._jvm
    for part in name.split("."):
        found = getattr(found, part)
    if not isinstance(found, JavaClass):  # py4j found no such class: a JavaPackage
        raise OperatorMissingError(
            f"the JVM operator {name} is not on the Spark class path: run `make setup` "
            "(it compiles jvm/operators into jvm/lib/operators)"
        )
    return found


def read_kafka(
    spark: SparkSession,
    settings: Settings,
    source: KafkaSource,
    *,
    subscribe: str,
    starting: str,
    query_name: str,
    co_partitioned: bool = False,
) -> DataFrame:
    """A streaming DataFrame of the topics ``subscribe`` read by ``source``.

    Options only the project's source knows (``queryName``, ``coPartitioned``) go to it
    alone. Either way the processed offsets are committed to the group
    ``streamscale-<query_name>`` (:mod:`streamscale.kafka.groups`). ``co_partitioned`` is a
    wish: Spark's connector reads one topic-partition per task.
    """
    reader = (
        spark.readStream.format(source)
        .options(**settings.reader_options(source))
        .option("subscribe", subscribe)
        .option("startingOffsets", starting)
    )
    if source != "kafka":
        reader = reader.option("queryName", query_name)
        if co_partitioned:
            reader = reader.option("coPartitioned", "true")
    return reader.load()


STOP_WAIT_S = 300.0
"""Longest wait for the batch in flight to commit before a query is stopped."""


def stop_between_batches(
    query: StreamingQuery,
    wait_s: float = STOP_WAIT_S,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Stop ``query`` once no trigger is active, waiting at most ``wait_s`` seconds: the
    batch in flight commits rather than being interrupted and run again at the next start.
    (A batch may still start in the moment before the stop, Spark has no stop between
    batches of its own: :func:`~streamscale.spark.stops_cleanly` makes that stop clean.)
    """
    deadline = clock() + wait_s
    while query.isActive and clock() < deadline:
        if not query.status.get("isTriggerActive", False):
            break
        sleep(0.1)
    query.stop()


def progress_data(progress: Any) -> dict[str, Any]:
    """A ``StreamingQueryProgress`` (or its JSON data) as plain JSON data (PySpark's
    progress is a dict too, but holds ``Row`` objects: its ``json`` is plain)."""
    text = getattr(progress, "json", None)
    if isinstance(text, str):
        return dict(json.loads(text))
    return dict(progress)


class ForeachBatchQuery:
    """Base of a pipeline: subclasses give :meth:`stream`, :meth:`process_batch` and
    :meth:`counts_of`; this starts the query and answers :meth:`batch_counts`."""

    name: str
    checkpoint: str
    default_source: KafkaSource
    """The source ``auto`` picks for this pipeline (measured faster end to end)."""
    source: KafkaSource

    def stream(self, spark: SparkSession) -> DataFrame:
        raise NotImplementedError

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def counts_of(self, batch_id: int) -> dict[str, int]:
        """The counts of one processed batch (empty if unknown)."""
        raise NotImplementedError

    def start(self, spark: SparkSession, trigger: Mapping[str, Any]) -> StreamingQuery:
        """Start the query (``trigger`` as for ``DataStreamWriter.trigger``)."""
        return (
            self.stream(spark)
            .writeStream.queryName(self.name)
            .foreachBatch(stops_cleanly(self.process_batch))
            .option("checkpointLocation", self.checkpoint)
            .trigger(**trigger)
            .start()
        )

    def batch_counts(self, progress: Any) -> dict[str, int]:
        """The counts of the batch that ``progress`` (a ``StreamingQueryProgress`` or its
        JSON) reports."""
        batch_id = getattr(progress, "batchId", None)
        if batch_id is None and isinstance(progress, Mapping):
            batch_id = progress.get("batchId")
        return self.counts_of(int(batch_id)) if batch_id is not None else {}
