"""The PySpark data source ``streamscale-kafka``: the reader and the writer under one name."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from streamscale.kafka.options import parse_sink, parse_source
from streamscale.kafka.sink import KafkaStreamWriter
from streamscale.kafka.source import KafkaStreamReader, source_schema

NAME = "streamscale-kafka"


class KafkaDataSource(DataSource):  # type: ignore[misc]
    """Kafka for Structured Streaming without a JVM connector jar."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return source_schema(include)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(parse_source(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        options = parse_sink(self.options, schema.fieldNames())
        if options.delivery == "exactly-once":
            from streamscale.kafka.transactions import NotExactError

            # A sink task's partition is its input's: a Kafka scan's partitions may come in
            # another order when a batch is replayed after a restart.
            raise NotExactError(
                "the streamscale-kafka sink writes at-least-once: for exactly-once use "
                "foreachBatch(streamscale.kafka.exactly_once.ExactlyOnceWriter(options))"
            )
        return KafkaStreamWriter(options)
