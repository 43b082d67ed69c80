"""A ``foreachBatch`` writer for users' own queries: each micro-batch to Kafka exactly once.

The same transactions as the pipelines' (:mod:`.transactions`: a stable transactional id per
query, role and task partition, a marker per batch), plus the checks of what cannot be made
exact, refused in one line (:class:`.transactions.NotExactError`). Readers of the output must
use ``isolation.level=read_committed``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from streamscale.kafka.transactions import BATCH_ID_PROPERTY, NotExactError
from streamscale.spark import stops_cleanly


def check_deterministic(df: Any, source_options: Mapping[str, str] | None = None) -> None:
    """Refuse (:class:`NotExactError`, one line) a micro-batch whose rows per partition may
    differ on a replay: non-deterministic expressions, a round-robin repartition without
    Spark's sort, ``minPartitions`` on the source."""
    options = {str(k).lower(): v for k, v in (source_options or {}).items()}
    if options.get("minpartitions"):
        raise NotExactError(
            "exactly-once output refuses minPartitions on the source (its splits change with "
            "the option and the executors): unset minPartitions"
        )
    execution = df._jdf.queryExecution()
    if not execution.optimizedPlan().deterministic():
        raise NotExactError(
            "exactly-once output needs a deterministic micro-batch: the DataFrame has a "
            "non-deterministic expression (rand, uuid, shuffle...): remove it or seed it per row"
        )
    conf = df.sparkSession.conf.get("spark.sql.execution.sortBeforeRepartition", "true")
    plan = execution.optimizedPlan().toString()
    if conf.lower() == "false" and "Repartition " in plan:
        raise NotExactError(
            "exactly-once output refuses repartition(n) without columns while "
            "spark.sql.execution.sortBeforeRepartition=false: repartition by columns"
        )


@dataclass(frozen=True)
class _WriteTask:
    """What each task of :class:`ExactlyOnceWriter` runs (pickled to the executors)."""

    sink_options: Mapping[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from streamscale.kafka.sink import write_rows

        count = write_rows(self.sink_options, batches)
        yield pa.RecordBatch.from_pydict({"records": [count]})


class ExactlyOnceWriter:
    """A ``foreachBatch`` function writing each micro-batch to Kafka exactly once::

        query = (df.select("key", "value")
                 .writeStream.foreachBatch(ExactlyOnceWriter({
                     "kafka.bootstrap.servers": "host:9092", "topic": "out"}))
                 .option("checkpointLocation", ...).start())

    Columns as the Kafka sink's (``value``, ``key``, ``topic``, ``partition``, ``headers``).
    ``role`` names this write within the query (two writers in one query need two roles).
    ``source_options``: the query's reader options, checked for what cannot be exact.
    ``units``: transactional ids per batch (the rows are hash-partitioned by every column
    into this many tasks); keep it fixed for a checkpoint.
    Readers of the output must use ``isolation.level=read_committed``.
    """

    def __init__(
        self,
        options: Mapping[str, str],
        role: str = "foreachBatch",
        source_options: Mapping[str, str] | None = None,
        units: int = 8,
    ) -> None:
        self.options = {**options, "delivery": "exactly-once", "transactionalRole": role}
        self.source_options = dict(source_options or {})
        check_deterministic_options(self.source_options)
        if units < 1:
            raise NotExactError(f"units must be at least 1, got {units}")
        self.units = units

    def __call__(self, df: Any, batch_id: int) -> None:
        stops_cleanly(self._write)(df, batch_id)

    def _write(self, df: Any, batch_id: int) -> None:
        check_deterministic(df, self.source_options)
        sc = df.sparkSession.sparkContext
        running = sc.getLocalProperty(BATCH_ID_PROPERTY)
        if running is None or int(running) != batch_id:
            raise NotExactError(
                f"ExactlyOnceWriter runs inside foreachBatch of a streaming query (batch "
                f"{batch_id}, running batch {running})"
            )
        # Hash-partitioned by every column into a fixed number of units: the same rows go to
        # the same unit on a replay (a scan's partitions, Kafka's included, may come in
        # another order after a restart).
        spread = df.repartition(self.units, *df.columns)
        spread.mapInArrow(_WriteTask(self.options), "records BIGINT").collect()


def check_deterministic_options(source_options: Mapping[str, str]) -> None:
    """The source-option part of :func:`check_deterministic`, checked at construction."""
    if any(str(k).lower() == "minpartitions" and v for k, v in source_options.items()):
        raise NotExactError(
            "exactly-once output refuses minPartitions on the source (its splits change with "
            "the option and the executors): unset minPartitions"
        )
