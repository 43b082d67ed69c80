"""One frozen, typed settings model for every streamscale process.

Values come from keyword arguments, then environment variables prefixed ``STREAMSCALE_``
(``STREAMSCALE_BOOTSTRAP_SERVERS``...), then an optional ``.env``-style config file. Kafka client
keys and Spark keys are emitted by :meth:`Settings.as_dict` so that one place decides them.
Validation happens at construction with messages that say what to change: a
:class:`SettingsError` (a ``streamscale.Error`` and a ``ValueError``) naming the first setting
at fault, in one line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamscale.errors import ConfigError

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
KafkaSource = Literal["kafka", "streamscale-kafka"]
"""A Kafka reader of Spark: its own connector, or the project's Python source."""

_LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


LOCALITY_WAIT = "spark.locality.wait"
"""Spark's wait for a task's preferred executor: 0 s in the project's sessions (see
:meth:`Settings.spark_conf`); ``streamscale.attach`` warns when a user's session waits."""
ROCKSDB_ROWS_KEY = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
"""Whether RocksDB counts its rows (Spark's default true): false in the project's sessions
(:meth:`Settings.spark_conf`); ``/metrics`` then omits RocksDB operators' row counts."""
LOCALITY_WAIT_PROCESS = "spark.locality.wait.process"
"""Spark's wait for a task's preferred *executor* (process locality); node and rack stay 0 s."""
STATE_LOCALITY_WAIT = "1s"
"""How long a task waits for the executor its state partition (or Kafka consumer) is on,
before running elsewhere: above a steady batch's imbalance between executors (without it, a
free executor takes a busy one's state partition and both reload it back and forth, see
docs/benchmarks.md), and short next to Spark's 3 s default. The autoscaler's actuator sets
it in the running SparkContext once a stateful query runs, and raises it to the time of
the query's last stateful stage when that is longer (a busy machine), up to
``STATE_LOCALITY_WAIT_CAP_S``."""

STATE_LOCALITY_WAIT_CAP_S = 10.0
"""The longest process locality wait the actuator sets: what a stage waits at most for the
partitions of an executor that was lost."""


REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas"
"""``spark.redaction.regex`` of the project's sessions: Spark's default, and the JAAS line
(``kafka.sasl.jaas.config`` carries the SASL password) by its key, in the environment page,
the event log and the logs Spark writes of its configuration."""
OPTIONS_REDACTION_REGEX = r"(?i)url|jaas|password|secret|token"
"""``spark.sql.redaction.options.regex``: data source options redacted in plans (``explain``,
the SQL tab) and in their string forms: Spark's default (``url``) and the credentials'."""


class SettingsError(ConfigError):
    """Settings that do not validate: the first problem, naming its setting, in one line."""


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg", exc)).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


class Settings(BaseSettings):
    """Connection, pipeline and Spark settings (env prefix ``STREAMSCALE_``)."""

    model_config = SettingsConfigDict(
        env_prefix="STREAMSCALE_",
        frozen=True,
        extra="forbid",
        env_file=None,
    )

    if not TYPE_CHECKING:  # mypy keeps the typed constructor the pydantic plugin makes

        def __init__(self, **values: Any) -> None:
            try:
                super().__init__(**values)
            except ValidationError as exc:
                raise SettingsError(_first_problem(exc)) from exc

    # Kafka connection
    bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers, comma-separated host:port"
    )
    security_protocol: SecurityProtocol = Field("PLAINTEXT", description="Kafka security.protocol")
    sasl_mechanism: SaslMechanism | None = Field(None, description="Kafka sasl.mechanism")
    sasl_username: str | None = Field(None, description="SASL username")
    sasl_password: SecretStr | None = Field(None, description="SASL password (secret)")
    sasl_password_file: Path | None = Field(
        None,
        description="File holding the SASL password (read at start when "
        "STREAMSCALE_SASL_PASSWORD is unset; `broker start --secure` writes one, mode 0600)",
    )
    ssl_ca_location: str | None = Field(None, description="CA certificate file for SSL")
    request_timeout_s: float = Field(30.0, gt=0, description="Kafka admin/metadata timeout")
    kafka_source: Literal["auto", "kafka", "streamscale-kafka"] = Field(
        "auto",
        description="How pipelines read Kafka: kafka (Spark's connector), streamscale-kafka "
        "(the project's Python source) or auto (each pipeline's default, the one measured "
        "faster end to end for it)",
    )

    delivery: Literal["at-least-once", "exactly-once"] = Field(
        "at-least-once",
        description="Output delivery of the pipelines: at-least-once (a replayed micro-batch "
        "may repeat output) or exactly-once (Kafka transactions with stable transactional "
        "ids and a marker per batch; readers must set isolation.level=read_committed)",
    )

    # Topics
    replication_factor: int | None = Field(
        None, ge=1, description="Topic replication factor (default: min(3, brokers))"
    )
    retention_ms: int = Field(
        7 * 24 * 3600 * 1000, ge=-1, description="retention.ms for stream topics"
    )

    # Spark and pipelines
    spark_master: str = Field(
        default_factory=lambda: f"local[{2 * (os.cpu_count() or 1)}]",
        description="Spark master URL (default: local mode, two task slots per core, since "
        "tasks spend much of their time waiting on Kafka and on Python workers)",
    )
    checkpoint_dir: Path = Field(
        Path(".streamscale/checkpoints"), description="Checkpoint root directory"
    )
    trigger_interval_s: float = Field(
        1.0, ge=0, description="Micro-batch trigger interval (seconds)"
    )
    max_offsets_per_trigger: int | None = Field(
        None,
        gt=0,
        description="Records per micro-batch of each stream input, all partitions (the "
        "enrichment's referential, a table, is read to its end in every batch)",
    )
    min_partitions: int | None = Field(None, gt=0, description="Minimum Spark input partitions")
    shuffle_partitions: int = Field(4, gt=0, description="spark.sql.shuffle.partitions")
    state_store: Literal["rocksdb", "hdfs"] = Field("rocksdb", description="State store provider")
    starting_offsets: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where a pipeline's stream inputs start on its first run (later runs "
        "resume from the checkpoint); tables such as the referential are always read in full",
    )
    session_gap_s: float = Field(
        30.0, gt=0, description="Game sessions: inactivity gap that closes a session (seconds)"
    )
    approval_window_s: float = Field(
        3.0, gt=0, description="Game sessions: an approval joins its frame within this (seconds)"
    )
    watermark_delay_s: float = Field(
        10.0,
        ge=0,
        description="Event-time lateness tolerated (seconds): game sessions count rows later "
        "than this as late and drop their state; the enrichment keeps referential versions "
        "pending until the newest purchase is this far past them (its fold point)",
    )
    driver_host: str | None = Field(
        None,
        description="Address executors reach the driver at (spark.driver.host; default: "
        "127.0.0.1 in local mode and for a master on loopback, else this host's address on "
        "the route to the master)",
    )
    driver_bind_address: str | None = Field(
        None,
        description="Address the driver listens on (spark.driver.bindAddress; default: the "
        "driver host; 0.0.0.0 behind NAT, where the driver host is not one of this host's)",
    )
    driver_memory: str = Field("1g", description="spark.driver.memory")
    executor_memory: str = Field("1g", description="spark.executor.memory")

    # Observability
    metrics_host: str = Field("127.0.0.1", description="/metrics bind address")
    metrics_port: int = Field(
        9464, ge=-1, le=65535, description="/metrics port (0: a free port, -1: no endpoint)"
    )

    @model_validator(mode="before")
    @classmethod
    def _read_password_file(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        given = values.get("sasl_password_file")
        if given is None or values.get("sasl_password") is not None:
            return values
        path = Path(given)
        try:
            text = path.read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(
                f"sasl_password_file {path} cannot be read ({exc.strerror}): "
                "fix STREAMSCALE_SASL_PASSWORD_FILE"
            ) from None
        return {**values, "sasl_password": SecretStr(text)}

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        servers = [s.strip() for s in value.split(",") if s.strip()]
        if not servers:
            raise ConfigError(
                "bootstrap_servers is empty: set STREAMSCALE_BOOTSTRAP_SERVERS=host:port"
            )
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(
                    f"bootstrap server {server!r} is not host:port: "
                    "set STREAMSCALE_BOOTSTRAP_SERVERS=host:port[,host:port]"
                )
        return ",".join(servers)

    @field_validator("driver_host", "driver_bind_address", "metrics_host")
    @classmethod
    def _check_host(cls, value: str | None, info: ValidationInfo) -> str | None:
        from streamscale.network import check_host

        name = f"STREAMSCALE_{str(info.field_name).upper()}"
        return None if value is None else check_host(value, name)

    @model_validator(mode="after")
    def _check_cross_fields(self) -> Settings:
        if self.delivery == "exactly-once" and self.min_partitions is not None:
            raise ConfigError(
                "delivery=exactly-once cannot be exact with min_partitions (its splits of a "
                "replayed batch may differ): unset STREAMSCALE_MIN_PARTITIONS"
            )
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism is None:
                raise ConfigError(
                    f"security_protocol={self.security_protocol} needs a mechanism: "
                    "set STREAMSCALE_SASL_MECHANISM (PLAIN, SCRAM-SHA-256, ...)"
                )
            needs_password = self.sasl_mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
            if needs_password and (self.sasl_username is None or self.sasl_password is None):
                raise ConfigError(
                    f"sasl_mechanism={self.sasl_mechanism} needs credentials: "
                    "set STREAMSCALE_SASL_USERNAME and STREAMSCALE_SASL_PASSWORD"
                )
        elif self.sasl_username is not None or self.sasl_password is not None:
            raise ConfigError(
                "SASL credentials are set but security_protocol is "
                f"{self.security_protocol}: set STREAMSCALE_SECURITY_PROTOCOL=SASL_SSL "
                "or unset the credentials"
            )
        return self

    def kafka_config(self) -> dict[str, str]:
        """librdkafka client keys (secrets revealed: only for handing to the client)."""
        conf: dict[str, str] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf

    def source_options(self) -> dict[str, str]:
        """Options of the ``streamscale-kafka`` source and sink (``kafka.*`` plus our own)."""
        opts = {f"kafka.{k}": v for k, v in self.kafka_config().items()}
        opts.update(self._read_limits())
        return opts

    def sink_options(self, role: str) -> dict[str, str]:
        """Options of the pipelines' writer (:func:`streamscale.kafka.sink.write_rows`): the
        connection, :attr:`delivery`, and ``role``, the writing stage (its transactional ids
        with exactly-once delivery)."""
        return {
            **self.source_options(),
            "delivery": self.delivery,
            "transactionalRole": role,
        }

    def java_client_config(self) -> dict[str, str]:
        """The connection as the Java client's keys: Spark's connector (:meth:`kafka_options`),
        the JVM writer, and Kafka's own tools (``--command-config``, written by
        :func:`streamscale.kafka.security.write_client_properties`); secrets revealed, only for
        handing to the client.

        Credentials become a ``sasl.jaas.config`` for PLAIN and SCRAM; OAUTHBEARER and GSSAPI
        need a JAAS configuration of the JVM's own (``java.security.auth.login.config``). The
        CA file is read as a PEM trust store.
        """
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
            module = _LOGIN_MODULES.get(self.sasl_mechanism)
            if module and self.sasl_username is not None and self.sasl_password is not None:
                conf["sasl.jaas.config"] = jaas_config(
                    module, self.sasl_username, self.sasl_password.get_secret_value()
                )
        if self.ssl_ca_location:
            conf["ssl.truststore.type"] = "PEM"
            conf["ssl.truststore.location"] = self.ssl_ca_location
        return conf

    def kafka_options(self) -> dict[str, str]:
        """Options of Spark's connector (``format("kafka")``): :meth:`java_client_config`
        prefixed ``kafka.``, and the read limits (secrets revealed: only for the client)."""
        opts = {f"kafka.{k}": v for k, v in self.java_client_config().items()}
        opts.update(self._read_limits())
        return opts

    def reader_options(self, source: KafkaSource) -> dict[str, str]:
        """The connection and read-limit options of ``source``."""
        return self.kafka_options() if source == "kafka" else self.source_options()

    def source_for(self, default: KafkaSource) -> KafkaSource:
        """The source a pipeline reads with: :attr:`kafka_source`, or for ``auto`` the
        pipeline's own ``default``."""
        return default if self.kafka_source == "auto" else self.kafka_source

    def _read_limits(self) -> dict[str, str]:
        opts = {}
        if self.max_offsets_per_trigger is not None:
            opts["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        if self.min_partitions is not None:
            opts["minPartitions"] = str(self.min_partitions)
        return opts

    def spark_conf(self) -> dict[str, str]:
        """Spark configuration keys this project sets on every session."""
        conf = {
            "spark.master": self.spark_master,
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.driver.memory": self.driver_memory,
            "spark.executor.memory": self.executor_memory,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.redaction.regex": REDACTION_REGEX,
            "spark.sql.redaction.options.regex": OPTIONS_REDACTION_REGEX,
            # A Kafka partition's task prefers the executor that holds its cached consumer;
            # when that executor is busy, or gone (an executor removed while it registered
            # leaves its block manager behind), Spark's default waits 3 s before running the
            # task elsewhere, in every micro-batch. Measured: 20,000-record batches of the
            # demo took 4-6 s instead of about 1 s. A task that moves only reopens a consumer.
            LOCALITY_WAIT: "0s",
        }
        if self.state_store == "rocksdb":
            conf["spark.sql.streaming.stateStore.providerClass"] = (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            )
            # Counting rows costs a RocksDB read before every write and delete; the count
            # (numRowsTotal in progress, then always 0) drives no decision, and /metrics
            # omits streamscale_state_rows for RocksDB operators of such a session.
            conf[ROCKSDB_ROWS_KEY] = "false"
        return conf

    def as_dict(self, *, reveal_secrets: bool = False) -> dict[str, Any]:
        """Kafka (``kafka.*``) and Spark (``spark.*``) keys in one mapping.

        Secrets are masked unless ``reveal_secrets``: the result is safe to log by default.
        """
        out: dict[str, Any] = {f"kafka.{k}": v for k, v in self.kafka_config().items()}
        if not reveal_secrets and "kafka.sasl.password" in out:
            out["kafka.sasl.password"] = "**********"
        out.update(self.spark_conf())
        return out


def jaas_config(module: str, username: str, password: str) -> str:
    """A one-line JAAS configuration of ``module`` with the credentials quoted and escaped as
    Kafka's parser (a ``StreamTokenizer``) reads them back."""

    def quoted(value: str) -> str:
        for char, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
            value = value.replace(char, escaped)
        return f'"{value}"'

    return f"{module} required username={quoted(username)} password={quoted(password)};"


_JAAS_VALUE = r'"((?:[^"\\]|\\.)*)"'


def jaas_credentials(line: str) -> tuple[str, str] | None:
    """The ``(username, password)`` of a JAAS line as :func:`jaas_config` writes it (and as
    users write it for PLAIN and SCRAM), None when it holds no such pair."""
    import re

    found = {}
    for name in ("username", "password"):
        match = re.search(rf"\b{name}\s*=\s*{_JAAS_VALUE}", line)
        if match is None:
            return None
        found[name] = re.sub(
            r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), match.group(1)
        )
    return found["username"], found["password"]


def librdkafka_from_java(java: Mapping[str, str]) -> dict[str, str]:
    """librdkafka keys of a Java client's connection (Spark's connector's ``kafka.*`` options
    without the prefix): the keys both take as they are, the JAAS line's PLAIN or SCRAM
    credentials, and a PEM trust store as the CA file (the inverse of
    :meth:`Settings.java_client_config`)."""
    out = {k: java[k] for k in JAVA_AND_LIBRDKAFKA_KEYS if k in java}
    credentials = jaas_credentials(java.get("sasl.jaas.config", ""))
    if credentials is not None:
        out["sasl.username"], out["sasl.password"] = credentials
    if java.get("ssl.truststore.type", "").upper() == "PEM" and "ssl.truststore.location" in java:
        out["ssl.ca.location"] = java["ssl.truststore.location"]
    return out


JAVA_AND_LIBRDKAFKA_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.kerberos.service.name",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "client.id",
)
"""Keys of Kafka's Java client that librdkafka takes as they are."""


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Settings from the non-None ``overrides`` (CLI options), then the environment, then
    ``config``: a ``.env``-style file of ``STREAMSCALE_NAME=value`` lines."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if config is None:
        return Settings(**given)
    if not config.is_file():
        raise ConfigError(f"config file {config} does not exist")
    return Settings(_env_file=config, **given)  # type: ignore[call-arg]


def env_help() -> str:
    """One line per setting: its env var, default and description (for ``--help``). A
    default computed on this machine (the Spark master's slots) is shown as computed."""
    lines = []
    for name, field in Settings.model_fields.items():
        value = field.get_default(call_default_factory=True)
        default = value if value is not None else "unset"
        lines.append(f"STREAMSCALE_{name.upper()}  (default {default}): {field.description}")
    return "\n".join(lines)
