"""The settings model: env prefix, cross-field checks with actionable messages, secret masking."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import streamscale
from streamscale.settings import Settings, SettingsError, env_help, load_settings


def test_defaults_and_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCALE_BOOTSTRAP_SERVERS", "k1:9092, k2:9093")
    monkeypatch.setenv("STREAMSCALE_MAX_OFFSETS_PER_TRIGGER", "5000")
    settings = Settings()
    assert settings.bootstrap_servers == "k1:9092,k2:9093"
    assert settings.max_offsets_per_trigger == 5000
    assert settings.source_options()["maxOffsetsPerTrigger"] == "5000"


def test_overrides_win_over_env_and_none_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSCALE_SPARK_MASTER", "local[1]")
    settings = load_settings(spark_master=None, bootstrap_servers="h:1")
    assert (settings.spark_master, settings.bootstrap_servers) == ("local[1]", "h:1")


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.spark_master = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bootstrap_servers": ""}, "set STREAMSCALE_BOOTSTRAP_SERVERS"),
        ({"bootstrap_servers": "localhost"}, "is not host:port"),
        ({"security_protocol": "SASL_SSL"}, "set STREAMSCALE_SASL_MECHANISM"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
            "set STREAMSCALE_SASL_USERNAME and STREAMSCALE_SASL_PASSWORD",
        ),
        ({"sasl_username": "u", "sasl_password": "p"}, "set STREAMSCALE_SECURITY_PROTOCOL"),
        ({"metrics_port": 70000}, "less than or equal to 65535"),
        ({"no_such_setting": 1}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_settings_say_what_to_change(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message) as raised:
        Settings(**kwargs)  # type: ignore[arg-type]
    assert isinstance(raised.value, streamscale.Error)
    assert isinstance(raised.value, ValueError)
    assert "\n" not in str(raised.value)


def test_kafka_and_spark_keys_from_one_place_with_secrets_masked() -> None:
    settings = Settings(
        bootstrap_servers="k:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="app",
        sasl_password="s3cret",  # type: ignore[arg-type]
    )
    shown = settings.as_dict()
    assert shown["kafka.sasl.password"] == "**********"
    assert shown["kafka.security.protocol"] == "SASL_SSL"
    assert shown["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert "s3cret" not in repr(settings)
    assert settings.kafka_config()["sasl.password"] == "s3cret"
    assert settings.as_dict(reveal_secrets=True)["kafka.sasl.password"] == "s3cret"


def test_env_help_lists_every_setting() -> None:
    text = env_help()
    for name in Settings.model_fields:
        assert f"STREAMSCALE_{name.upper()}" in text


def test_env_help_shows_what_each_default_really_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    text = env_help()
    assert "PydanticUndefined" not in text
    assert "STREAMSCALE_SPARK_MASTER  (default local[6])" in text


def test_default_master_has_two_task_slots_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMSCALE_SPARK_MASTER", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    assert Settings().spark_master == "local[6]"


def test_rocksdb_state_store_does_not_count_rows() -> None:
    conf = Settings(state_store="rocksdb").spark_conf()
    assert conf["spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"] == "false"
    assert "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows" not in (
        Settings(state_store="hdfs").spark_conf()
    )


PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"bootstrap_servers": "k:9092"},
            {"kafka.bootstrap.servers": "k:9092", "kafka.security.protocol": "PLAINTEXT"},
        ),
        (
            {"bootstrap_servers": "k:9092", "max_offsets_per_trigger": 500, "min_partitions": 8},
            {
                "kafka.bootstrap.servers": "k:9092",
                "kafka.security.protocol": "PLAINTEXT",
                "maxOffsetsPerTrigger": "500",
                "minPartitions": "8",
            },
        ),
        (
            {
                "bootstrap_servers": "k:9093",
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "app",
                "sasl_password": "s3cret",
            },
            {
                "kafka.bootstrap.servers": "k:9093",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": f'{PLAIN_JAAS} username="app" password="s3cret";',
            },
        ),
        (
            {
                "bootstrap_servers": "k:9093",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "app",
                "sasl_password": 'p"a\\ss',
                "ssl_ca_location": "/etc/ca.pem",
            },
            {
                "kafka.bootstrap.servers": "k:9093",
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                # quotes and backslashes escaped as the JAAS parser reads them
                "kafka.sasl.jaas.config": f'{SCRAM_JAAS} username="app" password="p\\"a\\\\ss";',
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": "/etc/ca.pem",
            },
        ),
        (
            {
                "bootstrap_servers": "k:9093",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_username": "a",
                "sasl_password": "b",
            },
            {
                "kafka.bootstrap.servers": "k:9093",
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": f'{SCRAM_JAAS} username="a" password="b";',
            },
        ),
        (
            {"bootstrap_servers": "k:9093", "security_protocol": "SSL", "ssl_ca_location": "ca"},
            {
                "kafka.bootstrap.servers": "k:9093",
                "kafka.security.protocol": "SSL",
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": "ca",
            },
        ),
        (
            # the JVM's own JAAS configuration provides OAUTHBEARER's login
            {
                "bootstrap_servers": "k:9093",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
            },
            {
                "kafka.bootstrap.servers": "k:9093",
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "OAUTHBEARER",
            },
        ),
    ],
)
def test_spark_connector_options_from_the_connection_settings(
    kwargs: dict[str, object], expected: dict[str, str]
) -> None:
    settings = Settings(**kwargs)  # type: ignore[arg-type]
    assert settings.kafka_options() == expected
    assert settings.reader_options("kafka") == expected
    assert settings.reader_options("streamscale-kafka") == settings.source_options()


@pytest.mark.parametrize(
    ("choice", "default", "expected"),
    [
        ("auto", "kafka", "kafka"),
        ("auto", "streamscale-kafka", "streamscale-kafka"),
        ("kafka", "streamscale-kafka", "kafka"),
        ("streamscale-kafka", "kafka", "streamscale-kafka"),
    ],
)
def test_kafka_source_auto_is_the_pipeline_default(
    choice: str, default: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMSCALE_KAFKA_SOURCE", choice)
    assert Settings().source_for(default) == expected  # type: ignore[arg-type]


def test_kafka_source_refuses_an_unknown_reader() -> None:
    expected = "kafka_source: .*'auto', 'kafka' or 'streamscale-kafka'"
    with pytest.raises(SettingsError, match=expected):
        Settings(kafka_source="spark")  # type: ignore[arg-type]


def test_tasks_do_not_wait_for_their_preferred_executor() -> None:
    """A Kafka partition's preferred executor (its cached consumer) may be busy or gone."""
    assert Settings().spark_conf()["spark.locality.wait"] == "0s"
