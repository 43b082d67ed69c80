"""A three-node Apache Kafka cluster: topics as the seeds ask (RF 3, min ISR 2), for real."""

from __future__ import annotations

import json

import pytest
from cli_process import cli
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from streamscale.kafka import broker as embedded
from streamscale.kafka.client import producer_config
from streamscale.kafka.options import MARKER_TOPIC

pytestmark = pytest.mark.integration


def test_status_json_lists_three_answering_nodes(cluster3: embedded.Broker) -> None:
    shown = cli("broker", "status", "--json", "--data-dir", str(cluster3.data_dir))
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["bootstrap"] == cluster3.bootstrap
    assert [(n["node_id"], n["answers"]) for n in status["nodes"]] == [
        (1, True),
        (2, True),
        (3, True),
    ]
    # The running nodes' PIDs (a fault test may have restarted a node of this cluster).
    assert {n["pid"] for n in status["nodes"]} == {n.pid for n in embedded.nodes(cluster3.data_dir)}


def test_topics_apply_gives_rf3_and_min_isr_2_on_every_pipeline_topic(
    cluster3: embedded.Broker,
) -> None:
    env = {
        "STREAMSCALE_BOOTSTRAP_SERVERS": cluster3.bootstrap,
        "STREAMSCALE_DELIVERY": "exactly-once",
    }
    applied = cli("topics", "apply", env=env)
    assert applied.returncode == 0, applied.stderr
    assert "warning" not in applied.stderr  # three brokers: nothing reduced
    # created, or already there: the exactly-once fault tests on this cluster create the
    # marker topic from the same spec when they run first
    names = [
        line.split()[1]
        for line in applied.stdout.splitlines()
        if line.startswith(("created", "ok"))
    ]
    assert {"achats", "referentiel", "GAME-FRAME-RQ", "SESSIONS", MARKER_TOPIC} <= set(names)

    admin = AdminClient({"bootstrap.servers": cluster3.bootstrap})
    md = admin.list_topics(timeout=10)
    resources = [ConfigResource("topic", n) for n in names]
    configs = admin.describe_configs(resources)
    for name in names:
        replicas = {len(p.replicas) for p in md.topics[name].partitions.values()}
        assert replicas == {3}, name
        got = configs[ConfigResource("topic", name)].result(timeout=10)
        assert got["min.insync.replicas"].value == "2", name
    for table in ("referentiel", MARKER_TOPIC):
        got = configs[ConfigResource("topic", table)].result(timeout=10)
        assert got["cleanup.policy"].value == "compact", table

    again = cli("topics", "apply", env=env)
    assert again.returncode == 0 and "drift" not in again.stdout


def test_acks_all_producer_is_acknowledged_by_three_replicas(cluster3: embedded.Broker) -> None:
    env = {"STREAMSCALE_BOOTSTRAP_SERVERS": cluster3.bootstrap}
    assert cli("topics", "apply", "--pipeline", "enrichment", env=env).returncode == 0
    producer = Producer(producer_config({"bootstrap.servers": cluster3.bootstrap}))
    errors: list[KafkaException] = []
    for i in range(500):
        producer.produce(
            "achats", b'{"id":1,"price":2.5}', b"%d" % i, on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(30) == 0
    assert [e for e in errors if e is not None] == []
