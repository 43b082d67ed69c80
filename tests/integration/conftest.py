"""Session-scoped real components for integration tests: the embedded broker, a SparkSession,
and a factory of uniquely named topics. Everything started here is stopped by PID."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamscale.kafka import broker as embedded
from streamscale.settings import Settings, embedded_settings


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Broker]:
    data_dir = tmp_path_factory.mktemp("broker")
    with embedded.embedded_broker(data_dir) as running:
        yield running


@pytest.fixture(scope="session")
def settings(broker: embedded.Broker) -> Settings:
    return embedded_settings(broker.bootstrap)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from streamscale.spark import session

    warehouse = tmp_path_factory.mktemp("warehouse")
    spark = session(
        Settings(spark_master="local[2]", shuffle_partitions=2),
        app_name="streamscale-tests",
        extra_conf={"spark.sql.warehouse.dir": str(warehouse)},
    )
    yield spark
    spark.stop()


@pytest.fixture
def topic_factory(settings: Settings) -> Callable[..., str]:
    """Create a topic with a unique name: ``topic_factory(partitions=4, prefix="t")``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings.kafka_config())

    def create(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10
        )
        for future in futures.values():
            future.result(timeout=15)
        return name

    return create


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
