"""Kafka in and out of PySpark: the ``streamscale-kafka`` source and sink, admin, broker."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``streamscale-kafka`` data source (reader and writer) on ``spark``."""
    from streamscale.kafka.datasource import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
