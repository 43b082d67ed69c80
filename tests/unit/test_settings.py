"""The settings model: env prefix, cross-field checks with actionable messages, secret masking."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streamscale.settings import Settings, env_help, load_settings


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
    with pytest.raises(ValidationError, match=message):
        Settings(**kwargs)  # type: ignore[arg-type]


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
