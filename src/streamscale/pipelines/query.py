"""What both seed pipelines share: a streaming query whose micro-batches run in
``foreachBatch``, and their counts looked up by the batch id of a progress event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


class ForeachBatchQuery:
    """Base of a pipeline: subclasses give :meth:`stream`, :meth:`process_batch` and
    :meth:`counts_of`; this starts the query and answers :meth:`batch_counts`."""

    name: str
    checkpoint: str

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
            .foreachBatch(self.process_batch)
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
