"""The generators against the embedded broker: exact counts back, clear errors."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from streamscale.cli.main import app
from streamscale.generate import Record
from streamscale.generate.game_frames import GameFrames
from streamscale.generate.producer import GenerateError, produce
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.generate.referential import plan_for_products, referential_records
from streamscale.kafka import broker as embedded
from streamscale.kafka.client import DeliveryError
from streamscale.pipelines.hits import parse_header
from streamscale.processes import free_port
from streamscale.settings import Settings

pytestmark = pytest.mark.integration


def consume_all(settings: Settings, topic: str, partitions: int) -> list[Any]:
    """Every record of ``topic``, read to the true end offsets."""
    from streamscale.kafka.admin import KafkaAdmin

    admin = KafkaAdmin(settings.kafka_config())
    try:
        return admin.read_all(topic, partitions)
    finally:
        admin.close()


def test_purchases_burst_all_delivered(
    settings: Settings, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=3, prefix="achats")
    count = 5000
    stats = produce(
        settings,
        purchase_records(random.Random(1), count, topic, products=100),
        make_schedule("burst", rate=1, count=count),
        [topic],
        progress=False,
    )
    assert (stats.counted, stats.records) == (count, count)
    got = consume_all(settings, topic, 3)
    expected = {r[1]: r[2] for r in purchase_records(random.Random(1), count, topic, products=100)}
    assert len(got) == count
    assert {m.key().decode(): m.value().decode() for m in got} == expected


def test_referential_tombstones(settings: Settings, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2, prefix="referentiel")
    plan = plan_for_products(200, 0.1, 0.05)
    stats = produce(
        settings,
        referential_records(random.Random(2), plan, topic),
        make_schedule("steady", rate=5000, count=plan.total),
        [topic],
        progress=False,
    )
    assert stats.records == 230
    got = consume_all(settings, topic, 2)
    assert len(got) == 230
    assert sum(m.value() is None for m in got) == 10


def test_game_frames_paced_with_event_time(
    settings: Settings, topic_factory: Callable[..., str]
) -> None:
    rq = topic_factory(partitions=2, prefix="GAME-FRAME-RQ")
    rs = topic_factory(partitions=2, prefix="GAME-FRAME-RS")
    schedule = make_schedule("steady", rate=1000, count=600)
    start_ms = int(time.time() * 1000)
    frames = GameFrames(
        random.Random(3), schedule, start_ms=start_ms, request_topic=rq, approval_topic=rs
    )
    stats = produce(settings, frames.records(), schedule, [rq, rs], progress=False)
    assert stats.counted == 600
    assert stats.seconds >= 0.55  # paced: 600 frames at 1000/s
    assert stats.records == 600 + frames.stats.approvals
    requests = consume_all(settings, rq, 2)
    approvals = consume_all(settings, rs, 2)
    assert len(requests) == 600
    assert len(approvals) == frames.stats.approvals
    for msg in requests:
        assert msg.timestamp()[1] == parse_header(msg.key()).ts
    by_key = {m.key(): m for m in requests}
    for msg in approvals:
        request = by_key[msg.key()]
        assert msg.value() == request.value()
        assert 0 <= msg.timestamp()[1] - request.timestamp()[1] <= 2000


def test_missing_topic_is_a_clear_error(settings: Settings) -> None:
    with pytest.raises(GenerateError, match="topic 'no-such-topic-x1' does not exist"):
        produce(
            settings,
            iter([]),
            make_schedule("burst", rate=1, count=0),
            ["no-such-topic-x1"],
            progress=False,
        )


def test_cli_summary_and_errors(settings: Settings, topic_factory: Callable[..., str]) -> None:
    runner = CliRunner()
    topic = topic_factory(partitions=1, prefix="achats")
    base = ["generate", "purchases", "--bootstrap", settings.bootstrap_servers, "--seed", "5"]
    result = runner.invoke(app, [*base, "--topic", topic, "--count", "300", "--rate", "3000"])
    assert result.exit_code == 0, result.output
    assert "300 records to" in result.stdout
    assert "records/s achieved (seed 5)" in result.stdout
    assert len(consume_all(settings, topic, 1)) == 300

    result = runner.invoke(app, [*base, "--topic", "missing-topic-x2", "--count", "10"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: topic 'missing-topic-x2' does not exist on {settings.bootstrap_servers}: "
        "create it first (streamscale topics apply)"
    ]

    result = runner.invoke(app, [*base, "--topic", topic, "--profile", "burst", "--duration", "1"])
    assert result.exit_code == 1
    assert "give --count" in result.stderr


def test_cli_renames_of_a_published_referential(
    settings: Settings, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1, prefix="referentiel")
    base = ["generate", "referential", "--bootstrap", settings.bootstrap_servers, "--seed", "4"]
    result = CliRunner().invoke(
        app, [*base, "--topic", topic, "--renames-of", "1000", "--count", "200", "--rate", "2000"]
    )
    assert result.exit_code == 0, result.output
    assert "200 renames of products 1..1000 to" in result.stdout
    got = consume_all(settings, topic, 1)
    assert len(got) == 200
    assert all(1 <= int(m.key()) <= 1000 and m.value() for m in got)

    result = CliRunner().invoke(app, [*base, "--topic", topic, "--renames-of", "0", "--count", "1"])
    assert result.exit_code == 1
    assert "--renames-of must be >= 1" in result.stderr


def test_unreachable_broker_fails_fast_with_its_address() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    runner = CliRunner()
    started = time.monotonic()
    result = runner.invoke(
        app,
        ["generate", "game-frames", "--bootstrap", bootstrap, "--count", "10"],
        env={"STREAMSCALE_REQUEST_TIMEOUT_S": "3"},
    )
    assert time.monotonic() - started < 30
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: cannot reach Kafka at {bootstrap} within 3 s")


@pytest.mark.parametrize("timestamped", [False, True], ids=["batched", "one-by-one"])
def test_lost_broker_raises_delivery_error(tmp_path: Path, timestamped: bool) -> None:
    """Records that cannot be delivered are reported, whichever produce path they took."""
    from confluent_kafka.admin import AdminClient, NewTopic

    data_dir = tmp_path / f"broker-{timestamped}"
    with embedded.embedded_broker(data_dir) as private:
        settings = Settings(**{"bootstrap_servers": private.bootstrap})
        admin = AdminClient(settings.kafka_config())
        for future in admin.create_topics([NewTopic("lost", 1, 1)]).values():
            future.result(timeout=15)

        def records() -> Iterator[Record]:
            for i in range(2000):
                if i == 1000:
                    embedded.stop(data_dir, grace_s=0)  # the broker dies mid-run (SIGKILL)
                yield ("lost", str(i), "v", 1_767_225_600_000 + i if timestamped else 0, True)

        with pytest.raises(DeliveryError, match=r"not delivered|unacknowledged"):
            produce(
                settings,
                records(),
                make_schedule("burst", rate=1, count=2000),
                ["lost"],
                progress=False,
                overrides={"message.timeout.ms": 2000},
                flush_timeout_s=15,
            )


def test_game_frames_older_than_retention_are_refused(
    settings: Settings, topic_factory: Callable[..., str]
) -> None:
    """Replaying a day of January into topics that keep 7 days: the broker would delete the
    records at once, so the generator refuses in one line and writes nothing."""
    week = {"retention.ms": str(7 * 86_400_000)}
    requests = topic_factory(partitions=1, prefix="rq", config=week)
    approvals = topic_factory(partitions=1, prefix="rs", config=week)
    january = int(time.mktime((2026, 1, 15, 12, 0, 0, 0, 0, 0)) * 1000)
    result = CliRunner().invoke(
        app,
        [
            *("generate", "game-frames", "--bootstrap", settings.bootstrap_servers),
            *("--topic", requests, "--approval-topic", approvals, "--count", "20"),
            *("--start-ms", str(january), "--no-progress"),
        ],
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: records stamped from 2026-01-15"), lines
    assert f"older than {requests} keeps records (retention.ms=604800000, 7 days)" in lines[0]
    assert consume_all(settings, requests, 1) == []
