"""A secured cluster's pure parts: the pipeline principal's ACLs, the refusals' one lines, the
secured node's listeners, the client files, and the connection both ways (Java, librdkafka)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.errors import (
    AuthenticationError,
    AuthorizationError,
    CertificateError,
    KafkaRequestError,
)
from streamscale.kafka import security
from streamscale.kafka.acls import Grant, grant_command, pipeline_grants
from streamscale.kafka.client import first_error_line
from streamscale.kafka.groups import connection
from streamscale.kafka.refusals import explain, refusal
from streamscale.pipelines.topics import topic_access
from streamscale.settings import (
    OPTIONS_REDACTION_REGEX,
    REDACTION_REGEX,
    Settings,
    SettingsError,
    jaas_config,
    jaas_credentials,
    librdkafka_from_java,
)

SECURED = {
    "bootstrap_servers": "b1:9093,b2:9093",
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "pipeline",
    "sasl_password": "s3cr3t-p4ss",
    "ssl_ca_location": "/etc/kafka/ca.pem",
}


def test_the_pipeline_principal_gets_its_topics_groups_and_ids_only() -> None:
    reads, writes = topic_access()
    assert reads == ["GAME-FRAME-RQ", "GAME-FRAME-RS", "achats", "referentiel"]
    assert writes == ["SESSIONS", "achats-enrichis", "enrichment-dlq", "game-sessions-dlq"]
    grants = pipeline_grants("pipeline", reads, writes)
    by = {(g.resource, g.name, g.operation) for g in grants}
    assert ("topic", "achats", "READ") in by and ("topic", "achats", "WRITE") not in by
    assert ("topic", "achats-enrichis", "WRITE") in by
    assert ("topic", "achats-enrichis", "READ") not in by
    assert ("topic", "streamscale-txn-markers", "READ") in by  # the writers read markers back
    assert ("group", "streamscale-", "READ") in by
    assert ("transactional_id", "streamscale-", "WRITE") in by
    assert ("cluster", "kafka-cluster", "IDEMPOTENT_WRITE") in by
    assert not {g.operation for g in grants} - {"READ", "WRITE", "DESCRIBE", "IDEMPOTENT_WRITE"}
    assert all(g.principal == "User:pipeline" for g in grants)
    assert grants == sorted(set(grants))


@pytest.mark.parametrize(
    ("grant", "command"),
    [
        (
            Grant("User:p", "topic", "achats", "literal", "READ"),
            "--add --allow-principal User:p --operation READ --topic achats",
        ),
        (
            Grant("User:p", "group", "streamscale-", "prefixed", "READ"),
            "--add --allow-principal User:p --operation READ --group streamscale- "
            "--resource-pattern-type prefixed",
        ),
        (
            Grant("User:p", "cluster", "kafka-cluster", "literal", "IDEMPOTENT_WRITE"),
            "--add --allow-principal User:p --operation IDEMPOTENT_WRITE --cluster",
        ),
    ],
)
def test_grant_command(grant: Grant, command: str) -> None:
    assert grant_command(grant) == command


JAVA_TRACE = """org.apache.spark.SparkException: Job aborted due to stage failure
Caused by: org.apache.kafka.common.errors.{error}
\tat org.apache.spark.sql.kafka010.KafkaDataConsumer.fetch(KafkaDataConsumer.scala:1)"""


@pytest.mark.parametrize(
    ("text", "kind", "line"),
    [
        (
            JAVA_TRACE.format(
                error="SaslAuthenticationException: Authentication failed during authentication "
                "due to invalid credentials with SASL mechanism SCRAM-SHA-512"
            ),
            AuthenticationError,
            "SASL authentication failed for user pipeline: check STREAMSCALE_SASL_USERNAME",
        ),
        (
            "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
            AuthenticationError,
            "SASL authentication failed for user pipeline",
        ),
        (
            "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
            "broker certificate could not be verified",
            CertificateError,
            "TLS handshake failed: the broker's certificate is not signed by a CA the client "
            "trusts: set STREAMSCALE_SSL_CA_LOCATION",
        ),
        (
            "javax.net.ssl.SSLHandshakeException: PKIX path building failed: unable to find "
            "valid certification path to requested target",
            CertificateError,
            "is not signed by a CA the client trusts",
        ),
        (
            "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
            "certificate has expired",
            CertificateError,
            "TLS handshake failed: the broker's certificate has expired",
        ),
        (
            "java.security.cert.CertificateExpiredException: NotAfter: Sat Nov 01 2026",
            CertificateError,
            "has expired",
        ),
        (
            JAVA_TRACE.format(
                error="TopicAuthorizationException: Not authorized to access topics: [achats]"
            ),
            AuthorizationError,
            "TOPIC_AUTHORIZATION_FAILED on achats: grant READ and DESCRIBE on it to "
            "User:pipeline (kafka-acls --add --allow-principal User:pipeline --operation READ "
            "--topic achats)",
        ),
        (
            "DeliveryError: 3 record(s) not delivered to h:1: achats-enrichis[0]: Broker: Topic "
            "authorization failed; achats-enrichis[1]: Broker: Topic authorization failed",
            AuthorizationError,
            "TOPIC_AUTHORIZATION_FAILED on achats-enrichis: grant WRITE and DESCRIBE on it",
        ),
        (
            "org.apache.kafka.common.errors.GroupAuthorizationException: Not authorized to "
            "access group: streamscale-enrichment",
            AuthorizationError,
            "GROUP_AUTHORIZATION_FAILED on group streamscale-enrichment: grant READ",
        ),
        (
            "streamscale-q-out-0: cannot start a transaction: KafkaError{code="
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED,val=53}",
            AuthorizationError,
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED on the exactly-once writer's ids "
            "(streamscale-*): grant WRITE and DESCRIBE",
        ),
        (
            "ClusterAuthorizationException: Cluster authorization failed.",
            AuthorizationError,
            "grant IDEMPOTENT_WRITE on the cluster to User:pipeline",
        ),
    ],
)
def test_each_refusal_is_one_line_saying_what_to_fix(
    text: str, kind: type[KafkaRequestError], line: str
) -> None:
    found = refusal(text, user="pipeline")
    assert isinstance(found, kind)
    assert line in str(found)
    assert "\n" not in str(found)
    assert first_error_line(text, "pipeline") == str(found)


@pytest.mark.parametrize(
    "text",
    ["Local: Broker transport failure", "NOT_ENOUGH_REPLICAS", "Unknown topic or partition", ""],
)
def test_other_errors_are_not_refusals(text: str) -> None:
    assert explain(text, user="p") is None


def test_a_topic_refusal_without_a_name_takes_the_requests_topics() -> None:
    line = explain("KafkaError{code=TOPIC_AUTHORIZATION_FAILED}", user="u", topics=["achats"])
    assert line is not None and line.startswith("TOPIC_AUTHORIZATION_FAILED on achats: grant")


def test_the_password_file_is_read_and_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "pipeline.password"
    secret.write_text("from-the-file\n")
    values = {k: v for k, v in SECURED.items() if k != "sasl_password"}
    settings = Settings(**values, sasl_password_file=secret)
    assert settings.sasl_password is not None
    assert settings.sasl_password.get_secret_value() == "from-the-file"
    assert "from-the-file" not in repr(settings) and "from-the-file" not in str(settings)
    assert "from-the-file" not in str(settings.as_dict())
    # the variable wins over the file
    given = Settings(**SECURED, sasl_password_file=secret)
    assert given.sasl_password is not None
    assert given.sasl_password.get_secret_value() == "s3cr3t-p4ss"


def test_a_missing_password_file_says_which_setting(tmp_path: Path) -> None:
    values = {k: v for k, v in SECURED.items() if k != "sasl_password"}
    with pytest.raises(SettingsError, match="STREAMSCALE_SASL_PASSWORD_FILE"):
        Settings(**values, sasl_password_file=tmp_path / "none")


def test_java_and_librdkafka_connections_are_one_and_the_same() -> None:
    settings = Settings(**SECURED)
    java = settings.java_client_config()
    assert java["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.scram.ScramLoginModule required"
    )
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == (
        "PEM",
        "/etc/kafka/ca.pem",
    )
    assert librdkafka_from_java(java) == settings.kafka_config()
    options = settings.kafka_options()
    assert {k.removeprefix("kafka."): v for k, v in options.items()} == java
    # a group commit of Spark's connector source on another cluster takes its credentials
    other = {f"kafka.{k}": v for k, v in java.items()}
    conf = connection(other, librdkafka_keys=False, fallback={"bootstrap.servers": "x:1"})
    assert conf == settings.kafka_config()


@given(
    st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s),
    st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s),
)
def test_jaas_credentials_read_back_what_jaas_config_writes(user: str, password: str) -> None:
    line = jaas_config("org.example.Module", user, password)
    assert jaas_credentials(line) == (user, password)


def test_the_redaction_covers_the_options_the_project_sets() -> None:
    import re

    conf = Settings(**SECURED).spark_conf()
    assert conf["spark.redaction.regex"] == REDACTION_REGEX
    assert conf["spark.sql.redaction.options.regex"] == OPTIONS_REDACTION_REGEX
    secret_keys = [k for k, v in Settings(**SECURED).kafka_options().items() if "s3cr3t-p4ss" in v]
    assert secret_keys == ["kafka.sasl.jaas.config"]
    for key in [*secret_keys, "kafka.ssl.truststore.password", "kafka.sasl.password"]:
        assert re.search(REDACTION_REGEX, key) and re.search(OPTIONS_REDACTION_REGEX, key)


def test_a_secured_node_listens_with_sasl_ssl_and_authorizes() -> None:
    where = security.Files(Path("/data/security"))
    props = security.server_overrides("127.0.0.1", 9093, 9094, where, "adm1n", "st0re")
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["authorizer.class.name"] == security.AUTHORIZER
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin;User:CN=streamscale-broker"
    assert (
        'username="admin" password="adm1n"'
        in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    )
    assert props["ssl.truststore.location"] == "/data/security/ca.pem"


def test_client_files_refer_to_the_password_file(tmp_path: Path) -> None:
    where = security.Files(tmp_path)
    env = security.client_env("h:1", "pipeline", where)
    assert f"STREAMSCALE_SASL_PASSWORD_FILE={tmp_path / 'pipeline.password'}\n" in env
    assert "STREAMSCALE_SASL_PASSWORD=" not in env
    props = security.client_properties(Settings(**SECURED))
    assert "security.protocol=SASL_SSL\n" in props and "bootstrap.servers" not in props
    path = tmp_path / "client.properties"
    security.write_client_properties(Settings(**SECURED), path)
    assert path.stat().st_mode & 0o777 == 0o600
    scram = security.scram_arguments({"a": "pw"})
    assert scram == ["--add-scram", "SCRAM-SHA-512=[name=a,password=pw]"]
