"""The certificate refusals against a real TLS endpoint (no broker needed): a broker
certificate that expired, signed by the CA the client trusts, is named as expired; the same
endpoint with another CA is named as untrusted. librdkafka says only "could not be verified";
the admin asks OpenSSL why (:func:`streamscale.kafka.security.tls_problem`)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamscale.errors import CertificateError
from streamscale.kafka import security
from streamscale.kafka.admin import KafkaAdmin
from streamscale.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def expired(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``(bootstrap, ca.pem)`` of a TLS endpoint whose certificate, signed by that CA, expired
    two days ago (made by keytool as ``broker start --secure`` makes its own)."""
    where = security.Files(tmp_path_factory.mktemp("expired"))
    ca_password = security.make_ca(where)
    store = security.make_broker_certificate(
        where, ca_password, ["127.0.0.1"], valid_days=1, start="-3d"
    )
    pem = where.folder / "broker.pem"
    argv = ["openssl", "pkcs12", "-in", str(where.keystore), "-nodes", "-out", str(pem)]
    subprocess.run(
        [*argv, "-passin", "env:STORE_PASS"],
        check=True, capture_output=True, timeout=60, env={"STORE_PASS": store},
    )  # fmt: skip
    pem.chmod(0o600)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pem))
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):  # ssl.SSLError is an OSError
                context.wrap_socket(conn, server_side=True).recv(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", where.ca_pem
    finally:
        done.set()
        thread.join(5)
        server.close()


def settings_for(bootstrap: str, ca: Path) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="pipeline",
        sasl_password="unused",
        ssl_ca_location=str(ca),
    )


def test_an_expired_certificate_is_named_in_one_line(expired: tuple[str, Path]) -> None:
    bootstrap, ca = expired
    admin = KafkaAdmin(settings_for(bootstrap, ca).kafka_config(), timeout_s=3)
    with pytest.raises(CertificateError, match="the broker's certificate has expired"):
        admin.topics()
    admin.close()


def test_the_same_endpoint_with_another_ca_is_untrusted(
    expired: tuple[str, Path], tmp_path: Path
) -> None:
    other = security.Files(tmp_path)
    security.make_ca(other, name="CN=another-ca")
    admin = KafkaAdmin(settings_for(expired[0], other.ca_pem).kafka_config(), timeout_s=3)
    with pytest.raises(CertificateError, match="not signed by a CA the client trusts"):
        admin.topics()
    admin.close()
