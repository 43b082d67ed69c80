"""Session-scoped real components for integration tests: the embedded Apache Kafka broker (one
node; three nodes where replication must be real), a SparkSession, and a factory of uniquely
named topics. Everything started here is stopped by PID."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamscale.kafka import broker as embedded
from streamscale.settings import Settings


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Broker]:
    data_dir = tmp_path_factory.mktemp("broker")
    with embedded.embedded_broker(data_dir) as running:
        yield running


@pytest.fixture(scope="session")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Broker]:
    """Three Kafka nodes forming one cluster (replication factor 3, min ISR 2 are real)."""
    data_dir = tmp_path_factory.mktemp("cluster3")
    with embedded.embedded_broker(data_dir, nodes=3) as running:
        yield running
        embedded.stop(data_dir, grace_s=0)  # its data is thrown away: no controlled shutdown


@pytest.fixture(scope="session")
def settings(broker: embedded.Broker) -> Settings:
    return Settings(bootstrap_servers=broker.bootstrap)


@pytest.fixture(scope="session")
def live_spark(
    tmp_path_factory: pytest.TempPathFactory, broker: embedded.Broker
) -> Iterator[Callable[[], Any]]:
    """The tests' shared SparkSession, made again if a module that needs a session of its own
    (settings a running session would ignore, such as a secured cluster's) stopped it."""
    from streamscale.spark import session, stop

    warehouse = tmp_path_factory.mktemp("warehouse")
    current: Any = None

    def live() -> Any:
        nonlocal current
        if not running(current):
            current = session(
                Settings(
                    bootstrap_servers=broker.bootstrap,
                    spark_master="local[2]",
                    shuffle_partitions=2,
                ),
                app_name="streamscale-tests",
                extra_conf={"spark.sql.warehouse.dir": str(warehouse)},
            )
        return current

    yield live
    if running(current):
        stop(current)


def running(spark: Any) -> bool:
    """Whether ``spark`` is a session whose SparkContext is not stopped."""
    return spark is not None and spark.sparkContext._jsc is not None


@pytest.fixture
def spark(live_spark: Callable[[], Any]) -> Any:
    return live_spark()


@pytest.fixture(scope="module")
def own_spark_session() -> Iterator[None]:
    """For a module whose code builds its own SparkSession (``session(settings)``, the
    pipeline runner): no session is active when it starts, and the ones it left are stopped
    when it ends; the shared ``spark`` is made again for the tests after it."""
    from pyspark.sql import SparkSession

    from streamscale.spark import stop

    def stop_active() -> None:
        active = SparkSession.getActiveSession()
        if running(active):
            stop(active)

    stop_active()
    yield
    stop_active()


@pytest.fixture
def topic_factory(settings: Settings) -> Iterator[Callable[..., str]]:
    """Create a topic with a unique name: ``topic_factory(partitions=4, prefix="t")``; it is
    usable (every partition has a leader) when the call returns."""
    from streamscale.kafka.admin import KafkaAdmin, TopicSpec

    admin = KafkaAdmin(settings.kafka_config(), timeout_s=15)

    def create(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        # No retention: tests produce records with fixed timestamps (2026-01-01), which a
        # time-based retention would delete while a test reads them.
        configs = {"retention.ms": "-1", **(config or {})}
        spec = TopicSpec(name, partitions, replication_factor=1, configs=configs)
        admin.apply([spec])
        return name

    yield create
    admin.close()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"
