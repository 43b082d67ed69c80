"""Spark's connector options as the Kafka client reads them: the JAAS line of SASL credentials."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscale.settings import Settings

pytestmark = pytest.mark.integration

credential = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    username=credential.filter(bool),
    password=credential,
)
def test_kafkas_jaas_parser_reads_back_the_credentials(
    spark: Any, mechanism: str, username: str, password: str
) -> None:
    options = Settings(
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username=username,
        sasl_password=password,  # type: ignore[arg-type]
    ).kafka_options()
    jvm = spark.sparkContext._jvm
    config = jvm.org.apache.kafka.common.security.JaasConfig(
        "KafkaClient", options["kafka.sasl.jaas.config"]
    )
    (entry,) = config.getAppConfigurationEntry("KafkaClient")
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    assert entry.getLoginModuleName() == f"org.apache.kafka.common.security.{module}"
    assert str(entry.getControlFlag()).endswith(": required")
    read = entry.getOptions()
    assert (read.get("username"), read.get("password")) == (username, password)
