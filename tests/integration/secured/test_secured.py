"""Every client of the project on a secured three-node cluster (SASL_SSL, SCRAM-SHA-512,
ACLs): ``topics apply`` and the generators as the admin; both pipelines through both readers
as the pipeline principal, exactly-once through the JVM writer; the group commits seen by
Kafka's own ``kafka-consumer-groups``; ``streamscale lag``; each refusal in one line; and no
secret in any file the run wrote.

Tests of this module run in order on the same topics (small record counts)."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from secured_io import files_under
from typer.testing import CliRunner

from streamscale.cli.main import app
from streamscale.errors import AuthenticationError, AuthorizationError, CertificateError
from streamscale.experiment import verify
from streamscale.kafka import broker as embedded
from streamscale.kafka import security
from streamscale.kafka.acls import GROUP_PREFIX, TRANSACTIONAL_PREFIX, Grant
from streamscale.kafka.admin import KafkaAdmin
from streamscale.pipelines import hits as codec
from streamscale.pipelines.runner import run as run_pipeline
from streamscale.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("own_spark_session")]

T0 = (int(time.time()) - 3600) * 1000  # an hour ago: within the topics' retention
PURCHASES = 600
PRODUCTS = 100
FRAMES = 300
LATE_MACHINE = "999999"
SEEN: list[str] = []
"""Error lines and outputs the tests saw: the secret search looks in them too."""


def cli(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    out = result.output
    SEEN.append(out)
    assert result.exit_code == 0, out
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secured-run")


@pytest.fixture(scope="module")
def loaded(admin_env: dict[str, str], admin_settings: Settings) -> dict[str, str]:
    """The catalog's topics made by ``topics apply`` and filled by the generators, as the
    admin (the pipeline principal may not create or write its inputs)."""
    env = {**admin_env, "STREAMSCALE_DELIVERY": "exactly-once"}
    out = cli(env, "topics", "apply", "--partitions", "2")
    assert "achats-enrichis" in out and "streamscale-txn-markers" in out
    gen = ("generate", "--seed", "7")
    quick = ("--rate", "5000", "--no-progress")
    cli(env, *gen[:1], "referential", *gen[1:], *quick, "--count", str(PRODUCTS))
    cli(
        env, *gen[:1], "purchases", *gen[1:], *quick, "--count", str(PURCHASES),
        "--products", str(PRODUCTS),
    )  # fmt: skip
    cli(
        env, *gen[:1], "game-frames", *gen[1:], "--rate", "1000", "--no-progress",
        "--count", str(FRAMES), "--start-ms", str(T0),
    )  # fmt: skip
    # One approved frame two minutes later moves the watermark past every session above.
    late = codec.header_json(codec.FrameHeader(T0 + 120_000, LATE_MACHINE, "EU"))  # type: ignore[arg-type]
    hit = codec.encode_hit(codec.Hit(100, "X", "UP", "Direct", "Pro", "NeonBrawl"))  # type: ignore[arg-type]
    body = codec.body_json(codec.FrameBody("NeonBrawl", (hit,)))
    from confluent_kafka import Producer

    from streamscale.kafka.client import producer_config

    producer = Producer(producer_config(admin_settings.kafka_config()))
    producer.produce("GAME-FRAME-RQ", body, late, timestamp=T0 + 120_000)
    producer.produce("GAME-FRAME-RS", body, late, timestamp=T0 + 120_100)
    assert producer.flush(60) == 0
    return env


def pipeline_settings(secured: embedded.Broker, workdir: Path, **more: Any) -> Settings:
    return secured.client_settings(
        security.PIPELINE,
        spark_master="local[2]",
        shuffle_partitions=2,
        metrics_port=-1,
        checkpoint_dir=workdir / "checkpoints",
        **more,
    )


def run(settings: Settings, name: str, checkpoint: Path) -> dict[str, int]:
    lines: list[str] = []
    try:
        return run_pipeline(
            name, settings, available_now=True, checkpoint=str(checkpoint), echo=lines.append
        )
    finally:
        SEEN.extend(lines)


def refusal_line(settings: Settings, checkpoint: Path) -> str:
    """The one line an enrichment run from ``checkpoint`` is refused with."""
    with pytest.raises(AuthorizationError) as raised:
        run(settings, "enrichment", checkpoint)
    line = str(raised.value)
    SEEN.append(line)
    assert "\n" not in line
    return line


def resume_after_the_grant(settings: Settings, checkpoint: Path) -> None:
    """Run the enrichment again from ``checkpoint`` once a grant is made. ACLs reach every
    node through the metadata log: a run refused meanwhile commits nothing, and the next one
    resumes from the same checkpoint."""
    deadline = time.monotonic() + 60
    while True:
        try:
            run(settings, "enrichment", checkpoint)
            return
        except AuthorizationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def enrichment_reconciles(admin: Settings, exactly_once: bool) -> verify.Reconciliation:
    kafka = KafkaAdmin(admin.kafka_config())
    try:
        iso = "read_committed" if exactly_once else None
        return verify.reconcile_topics(kafka, "achats", "achats-enrichis", "enrichment-dlq", iso)
    finally:
        kafka.close()


def records(admin: Settings, topic: str) -> list[verify.KafkaRecord]:
    kafka = KafkaAdmin(admin.kafka_config())
    try:
        return [(m.key(), m.value(), m.timestamp()[1]) for m in kafka.read_all(topic)]
    finally:
        kafka.close()


def sessions_verify(admin: Settings) -> verify.Verification:
    frames = verify.approved_frames(
        records(admin, "GAME-FRAME-RQ"), records(admin, "GAME-FRAME-RS"), 3000
    )
    expected = verify.expected_sessions(frames, 30_000, exclude_machines=[LATE_MACHINE])
    actual = verify.actual_sessions(records(admin, "SESSIONS"))
    return verify.compare_sessions(expected, actual, only_closed_before=T0 + 110_000)


def test_the_pipeline_principal_reads_no_topic_it_is_not_granted(
    secured: embedded.Broker, loaded: dict[str, str]
) -> None:
    admin = KafkaAdmin(secured.client_settings(security.PIPELINE).kafka_config())
    try:
        visible = set(admin.topics())
    finally:
        admin.close()
    assert "achats" in visible and "SESSIONS" in visible
    assert "__consumer_offsets" not in visible


def test_a_transactional_id_it_may_not_use_stops_the_exactly_once_query_in_one_line_and_it_resumes(
    secured: embedded.Broker, loaded: dict[str, str], admin_settings: Settings, workdir: Path
) -> None:
    ids = Grant("User:pipeline", "transactional_id", TRANSACTIONAL_PREFIX, "prefixed", "WRITE")
    conf = admin_settings.kafka_config()
    security.apply_grants(conf, [ids], revoke=True)
    checkpoint = workdir / "enrichment-txn-acl"
    settings = pipeline_settings(
        secured, workdir, kafka_source="streamscale-kafka", delivery="exactly-once"
    )
    try:
        line = refusal_line(settings, checkpoint)
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in line and "grant WRITE" in line, line
        # Refused before any transaction began: nothing of the refused run is committed.
        refused = enrichment_reconciles(admin_settings, exactly_once=True)
        assert refused.unexpected == 0, refused
    finally:
        security.apply_grants(conf, [ids])
    resume_after_the_grant(settings, checkpoint)
    # The module's first enrichment output: exactly once through the JVM writer.
    found = enrichment_reconciles(admin_settings, exactly_once=True)
    assert found.records_in == PURCHASES
    assert (found.lost, found.duplicated, found.unexpected) == (0, 0, 0), found


def test_a_missing_write_acl_stops_the_query_in_one_line_and_it_resumes_after_the_grant(
    secured: embedded.Broker, loaded: dict[str, str], admin_settings: Settings, workdir: Path
) -> None:
    write = Grant("User:pipeline", "topic", "achats-enrichis", "literal", "WRITE")
    conf = admin_settings.kafka_config()
    security.apply_grants(conf, [write], revoke=True)
    checkpoint = workdir / "enrichment-acl"
    settings = pipeline_settings(secured, workdir, kafka_source="kafka")
    try:
        line = refusal_line(settings, checkpoint)
        assert "TOPIC_AUTHORIZATION_FAILED on achats-enrichis: grant WRITE" in line, line
    finally:
        security.apply_grants(conf, [write])
    resume_after_the_grant(settings, checkpoint)
    found = enrichment_reconciles(admin_settings, exactly_once=False)
    assert (found.lost, found.unexpected) == (0, 0), found
    assert found.out + found.dead_lettered >= 2 * PURCHASES  # the exactly-once run's, then this


@pytest.mark.parametrize("source", ["kafka", "streamscale-kafka"])
def test_game_sessions_reconcile_through_each_reader(
    secured: embedded.Broker,
    loaded: dict[str, str],
    admin_settings: Settings,
    workdir: Path,
    source: str,
) -> None:
    settings = pipeline_settings(secured, workdir, kafka_source=source)
    run(settings, "game-sessions", workdir / f"sessions-{source}")
    found = sessions_verify(admin_settings)
    assert found.checked > 0
    assert not (found.missing or found.different or found.unexpected), found


def test_group_commits_are_seen_by_kafka_consumer_groups_and_streamscale_lag(
    secured: embedded.Broker, loaded: dict[str, str], pipeline_env: dict[str, str], workdir: Path
) -> None:
    where = security.files(secured.data_dir)
    config = str(where.properties(security.PIPELINE))
    base = ["--bootstrap-server", secured.bootstrap, "--command-config", config]
    groups = embedded.run_tool(embedded.CONSUMER_GROUPS_TOOL, [*base, "--list"]).split()
    ours = [g for g in groups if g.startswith("streamscale-")]
    assert ours, groups
    described = embedded.run_tool(
        embedded.CONSUMER_GROUPS_TOOL, [*base, "--describe", "--offsets", "--all-groups"]
    )
    SEEN.append(described)
    rows = [line.split() for line in described.splitlines() if " achats " in f" {line} "]
    assert rows, described
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: caught up everywhere
    assert all(row[5] == "0" for row in rows), described
    out = cli(pipeline_env, "lag", "--checkpoint", str(workdir / "enrichment-acl"))
    assert "achats" in out and "last committed batch" in out


def test_metrics_serve_the_lag_of_a_query_on_the_secured_cluster(
    secured: embedded.Broker, loaded: dict[str, str], workdir: Path
) -> None:
    """/metrics (what the autoscaler and Prometheus read) has the lag of a running connector
    query on the secured cluster, by partition, down to 0 once it caught up."""
    from urllib.request import urlopen

    from streamscale.lag import start_monitor
    from streamscale.spark import session

    settings = pipeline_settings(secured, workdir)
    spark = session(settings)
    monitor = start_monitor(spark, port=0)
    assert monitor.server is not None
    reader = spark.readStream.format("kafka").options(**settings.kafka_options())
    df = reader.option("subscribe", "achats").option("startingOffsets", "earliest")
    query = (
        df.option("maxOffsetsPerTrigger", "200").load().writeStream.format("noop")
        .queryName("secured-lag").trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(workdir / "lag-checkpoint")).start()
    )  # fmt: skip
    rows: list[str] = []
    text = ""
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and query.isActive:
            text = urlopen(monitor.server.url, timeout=10).read().decode()
            rows = [
                line for line in text.splitlines()
                if line.startswith("kafka_consumergroup_group_lag{") and 'topic="achats"' in line
            ]  # fmt: skip
            if len(rows) == 2 and all(float(r.rsplit(" ", 1)[1]) == 0 for r in rows):
                break
            time.sleep(0.5)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
        monitor.stop()
    SEEN.append(text)
    assert len(rows) == 2, text  # both partitions
    assert all(float(line.rsplit(" ", 1)[1]) == 0 for line in rows), rows


def test_a_wrong_password_is_refused_in_one_line(
    secured: embedded.Broker, tmp_path: Path, pipeline_env: dict[str, str]
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    result = CliRunner().invoke(
        app,
        ["topics", "apply"],
        env={
            **pipeline_env,
            "STREAMSCALE_SASL_PASSWORD_FILE": str(wrong),
            "STREAMSCALE_REQUEST_TIMEOUT_S": "5",
        },
    )
    SEEN.append(result.output)
    assert result.exit_code != 0
    assert "SASL authentication failed for user pipeline" in result.output, result.output
    settings = secured.client_settings(security.PIPELINE).model_copy(update={"sasl_password": None})
    bad = Settings(**{**_connection(settings), "sasl_password": "not-the-password"})
    admin = KafkaAdmin(bad.kafka_config(), timeout_s=5)
    with pytest.raises(AuthenticationError, match="SASL authentication failed for user pipeline"):
        admin.topics()
    admin.close()


def _connection(settings: Settings) -> dict[str, Any]:
    keys = ("bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username")
    return {k: getattr(settings, k) for k in (*keys, "ssl_ca_location")}


def test_an_untrusted_ca_is_refused_in_one_line(secured: embedded.Broker, tmp_path: Path) -> None:
    other = security.Files(tmp_path)
    security.make_ca(other, name="CN=another-ca")
    good = secured.client_settings(security.PIPELINE)
    settings = Settings(
        **{**_connection(good), "ssl_ca_location": str(other.ca_pem)},
        sasl_password=good.sasl_password,
    )
    admin = KafkaAdmin(settings.kafka_config(), timeout_s=5)
    with pytest.raises(CertificateError, match="not signed by a CA the client trusts") as raised:
        admin.topics()
    admin.close()
    SEEN.append(str(raised.value))


def test_a_group_it_may_not_use_is_warned_in_one_line_and_caught_up_after_the_grant(
    secured: embedded.Broker,
    loaded: dict[str, str],
    admin_settings: Settings,
    workdir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The checkpoint is the truth and the group its mirror: a refused group commit is a
    warning in the refusal's one line, the query goes on, and once READ on the group is
    granted the next batch's commit brings the group to the processed offsets."""
    groups = Grant("User:pipeline", "group", GROUP_PREFIX, "prefixed", "READ")
    seeds = itertools.count(1000)
    conf = admin_settings.kafka_config()
    checkpoint = workdir / "enrichment-group-acl"
    settings = pipeline_settings(secured, workdir, kafka_source="kafka")
    security.apply_grants(conf, [groups], revoke=True)
    try:
        with caplog.at_level(logging.WARNING, logger="streamscale.kafka.commits"):
            deadline = time.monotonic() + 60
            while not any("GROUP_AUTHORIZATION_FAILED" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
                # The revocation reaches every node through the metadata log: until it has,
                # a run's commits may still pass; each run here reads the next purchases.
                cli(loaded, "generate", "purchases", "--seed", str(next(seeds)),
                    "--rate", "5000", "--no-progress", "--count", "50",
                    "--products", str(PRODUCTS))  # fmt: skip
                run(settings, "enrichment", checkpoint)
        (line,) = {
            r.getMessage().split(": ", 1)[1]
            for r in caplog.records
            if "GROUP_AUTHORIZATION_FAILED" in r.getMessage()
        }
        SEEN.append(line)
        assert line.startswith("GROUP_AUTHORIZATION_FAILED on group streamscale-"), line
        assert "grant READ" in line, line
    finally:
        security.apply_grants(conf, [groups])
    kafka = KafkaAdmin(conf)
    try:
        tps = kafka.partitions(["achats"])
        deadline = time.monotonic() + 90
        while True:
            cli(loaded, "generate", "purchases", "--seed", str(next(seeds)), "--rate", "5000",
                "--no-progress", "--count", "50", "--products", str(PRODUCTS))  # fmt: skip
            run(settings, "enrichment", checkpoint)
            if kafka.committed("streamscale-enrichment", tps) == kafka.end_offsets(tps):
                break
            assert time.monotonic() < deadline, "the group never caught up after the grant"
    finally:
        kafka.close()
    found = enrichment_reconciles(admin_settings, exactly_once=False)
    assert (found.lost, found.unexpected) == (0, 0), found


def test_no_secret_in_any_file_the_secured_run_wrote(
    secured: embedded.Broker, secret_bytes: list[bytes], workdir: Path
) -> None:
    from streamscale.spark import DEFAULT_LOG_FILE

    help_text = CliRunner().invoke(app, ["--help"]).output
    SEEN.append(help_text)
    for sub in (["broker", "start", "--help"], ["run", "--help"]):
        SEEN.append(CliRunner().invoke(app, sub).output)
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is not None:  # the session's configuration as the UI's environment page shows it
        SEEN.append(str(spark.sparkContext._jsc.sc().conf().toDebugString()))
    skipped = {security.files(secured.data_dir).folder}
    nodes = [embedded.node_dir(secured.data_dir, n.node_id) for n in secured.nodes]
    searched = 0
    leaks: list[str] = []
    for path in files_under(secured.data_dir, workdir, DEFAULT_LOG_FILE.absolute().parent):
        if path.parent in skipped or (path.name == "server.properties" and path.parent in nodes):
            continue  # the secrets' own files, mode 0600 (checked below)
        data = path.read_bytes()
        searched += 1
        leaks += [str(path) for secret in secret_bytes if secret in data]
    assert searched > 10
    for text in SEEN:
        leaks += [text[:200] for secret in secret_bytes if secret.decode() in text]
    assert not leaks, leaks
    for folder in (*skipped, *nodes):
        for path in folder.iterdir():
            if path.is_file() and path.name != "ca.pem" and _holds_secret(path, secret_bytes):
                assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"


def _holds_secret(path: Path, secret_bytes: list[bytes]) -> bool:
    data = path.read_bytes()
    return any(s in data for s in secret_bytes) or path.suffix in (".password", ".p12")
