"""The embedded Apache Kafka broker's life cycle, topics apply, and true end offsets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cli_process import cli
from confluent_kafka import Producer

from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import (
    KafkaAdmin,
    KafkaRequestError,
    TopicSpec,
    UnknownTopicError,
    UnreachableError,
)
from streamscale.kafka.client import producer_config
from streamscale.kafka.offsets import TopicPartition
from streamscale.processes import pid_alive
from streamscale.settings import Settings

pytestmark = pytest.mark.integration


def test_broker_cli_start_status_stop(tmp_path: Path) -> None:
    data = str(tmp_path / "b")
    started = cli("broker", "start", "--data-dir", data)
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    assert bootstrap.startswith("127.0.0.1:")
    try:
        status = cli("broker", "status", "--data-dir", data)
        assert status.returncode == 0 and bootstrap in status.stdout
        pid = int(status.stdout.split("pid=")[1].split()[0])
        assert pid_alive(pid)
        again = cli("broker", "start", "--data-dir", data)
        assert again.returncode == 1 and "already running" in again.stderr

        env = {"STREAMSCALE_BOOTSTRAP_SERVERS": bootstrap}
        applied = cli("topics", "apply", "--pipeline", "enrichment", env=env)
        assert applied.returncode == 0, applied.stderr
        assert "created  achats" in applied.stdout and "created  referentiel" in applied.stdout
        assert "replication factor 1" in applied.stderr  # one broker: said, not hidden
        drift = cli("topics", "apply", "--pipeline", "enrichment", "--partitions", "6", env=env)
        assert "drift    achats: 4 partitions, spec says 6" in drift.stdout
    finally:
        stopped = cli("broker", "stop", "--data-dir", data)
    assert "broker stopped" in stopped.stdout
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)
    assert cli("broker", "status", "--data-dir", data).returncode == 1


def test_taken_port_is_refused_before_start(broker: embedded.Broker, tmp_path: Path) -> None:
    with pytest.raises(embedded.BrokerError, match=f"port {broker.port} on 127.0.0.1 is taken"):
        embedded.start(broker.port, tmp_path)


def test_restart_keeps_data_and_ports(tmp_path: Path) -> None:
    data = tmp_path / "kept"
    with embedded.embedded_broker(data) as first:
        conf = {"bootstrap.servers": first.bootstrap}
        admin = KafkaAdmin(conf, timeout_s=10)
        admin.apply([TopicSpec("kept", 2)])
        admin.close()
        producer = Producer(producer_config(conf))
        for i in range(1000):
            producer.produce("kept", b"v%d" % i, b"%d" % i)
        assert producer.flush(10) == 0
    with embedded.embedded_broker(data) as second:
        assert second.bootstrap == first.bootstrap
        admin = KafkaAdmin({"bootstrap.servers": second.bootstrap}, timeout_s=10)
        try:
            assert len(admin.read_all("kept")) == 1000
        finally:
            admin.close()
    with pytest.raises(embedded.BrokerError, match="holds a 1-node cluster"):
        embedded.start(None, data, nodes=3)


def test_data_dir_held_by_another_process_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "held"
    with embedded.embedded_broker(data) as running:
        (data / "kafka-1.json").rename(data / "hidden.json")  # forget its PID: a stranger now
        try:
            with pytest.raises(embedded.BrokerError, match="is taken|in use by another process"):
                embedded.start(None, data)
        finally:
            (data / "hidden.json").rename(data / "kafka-1.json")
        assert embedded.status(data) == running


def test_end_offsets_are_true_on_a_batching_producer(
    settings: Settings, topic_factory: object
) -> None:
    """The stand-in broker's defect (ListOffsets behind the true end when producers batch)
    must never come back: ListOffsets gives the true end on Apache Kafka."""
    topic = topic_factory(partitions=2)  # type: ignore[operator]
    producer = Producer(producer_config(settings.kafka_config(), **{"linger.ms": 100}))
    for i in range(5000):
        producer.produce(topic, b"v", b"%d" % i)
    assert producer.flush(10) == 0
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    admin = KafkaAdmin(settings.kafka_config())
    try:
        assert sum(admin.end_offsets(tps).values()) == 5000
        assert admin.earliest(tps) == {tp: 0 for tp in tps}
    finally:
        admin.close()


def test_replication_factor_above_the_brokers_is_refused_clearly(settings: Settings) -> None:
    admin = KafkaAdmin(settings.kafka_config())
    name = f"rf3-{time.monotonic_ns()}"
    try:
        with pytest.raises(
            KafkaRequestError, match=f"cannot create topic {name}.*replication factor"
        ):
            admin.apply([TopicSpec(name, 1, replication_factor=3)])
    finally:
        admin.close()


def test_apply_creates_specs_with_configs_and_reports_config_drift(settings: Settings) -> None:
    admin = KafkaAdmin(settings.kafka_config())
    name = f"spec-{time.monotonic_ns()}"
    try:
        report = admin.apply([TopicSpec(name, 3, table=True)])
        assert report.created == [name]
        assert admin.topics()[name] == 3
        again = admin.apply([TopicSpec(name, 3, table=True)])
        assert again.unchanged == [name] and not again.drift
        changed = admin.apply([TopicSpec(name, 3, table=False, retention_ms=1000)])
        assert f"{name}: cleanup.policy=compact, spec says delete" in changed.drift
    finally:
        admin.close()


def test_admin_errors_name_servers_and_topics(settings: Settings) -> None:
    dead = KafkaAdmin({"bootstrap.servers": "127.0.0.1:1"}, timeout_s=2)
    with pytest.raises(UnreachableError, match="cannot reach Kafka at 127.0.0.1:1 within 2 s"):
        dead.topics()
    admin = KafkaAdmin(settings.kafka_config())
    with pytest.raises(UnknownTopicError, match="nope do not exist"):
        admin.partitions(["nope"])
    admin.close()
