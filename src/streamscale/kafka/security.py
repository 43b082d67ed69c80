"""A secured embedded cluster: its CA and broker certificate, its SCRAM principals, its
listeners and its ACLs; and the files a client of it needs.

``streamscale broker start --secure`` makes everything here once, in ``<data-dir>/security``
(mode 0700), with the JDK's ``keytool`` (nothing downloaded):

- ``ca.pem``: the CA certificate (a PEM trust store for librdkafka and the Java client);
  ``ca.p12``: the CA's key, kept to sign the broker's certificate only;
- ``broker.p12``: every node's key and certificate (PKCS12; subject ``CN=streamscale-broker``,
  the nodes' addresses as subject alternative names), signed by the CA;
- ``<user>.password`` for the ``admin`` (a super user) and the ``pipeline`` principal,
  ``keystore.password``: random, mode 0600, referred to by path, never printed;
- ``<user>.env``: the ``STREAMSCALE_*`` lines of a client (the password by its file),
  ``<user>.properties``: a Java client configuration for Kafka's tools (``--command-config``),
  mode 0600 since it holds the JAAS line.

Listeners: clients and the brokers among themselves use ``SASL_SSL`` with SCRAM-SHA-512 (the
brokers as ``admin``); the KRaft controllers use ``SSL`` with client certificates required
(mutual TLS, principal ``User:CN=streamscale-broker``): only a holder of the broker's key
reaches a controller. Authorization is KRaft's ``StandardAuthorizer`` with
``allow.everyone.if.no.acl.found=false``; the pipeline principal gets the ACLs of
:func:`streamscale.kafka.acls.pipeline_grants` for the topic catalog.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamscale import jars
from streamscale.errors import LaunchError
from streamscale.kafka.acls import Grant
from streamscale.settings import Settings

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
PIPELINE = "pipeline"
USERS = (ADMIN, PIPELINE)
BROKER_DN = "CN=streamscale-broker"
CA_DN = "CN=streamscale-ca"
VALID_DAYS = 365
SECURITY_DIR = "security"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class SecurityError(LaunchError):
    """The secured cluster's certificates, credentials or ACLs could not be made."""


@dataclass(frozen=True)
class Files:
    """Where a secured cluster's certificates, secrets and client files live."""

    folder: Path

    @property
    def ca_pem(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def ca_store(self) -> Path:
        return self.folder / "ca.p12"

    @property
    def keystore(self) -> Path:
        return self.folder / "broker.p12"

    @property
    def keystore_password(self) -> Path:
        return self.folder / "keystore.password"

    def password(self, user: str) -> Path:
        return self.folder / f"{user}.password"

    def env(self, user: str) -> Path:
        return self.folder / f"{user}.env"

    def properties(self, user: str) -> Path:
        return self.folder / f"{user}.properties"


def files(data_dir: Path) -> Files:
    return Files((data_dir / SECURITY_DIR).resolve())


# --------------------------------------------------------------------------- pure parts


def server_overrides(
    host: str, port: int, controller_port: int, where: Files, admin_password: str, store: str
) -> dict[str, str]:
    """The ``server.properties`` keys of a secured node (over the plaintext ones)."""
    ssl = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(where.keystore),
        "ssl.keystore.password": store,
        "ssl.key.password": store,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(where.ca_pem),
    }
    jaas = scram_jaas(ADMIN, admin_password)
    return {
        "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{host}:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        "listener.name.controller.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        **ssl,
        "authorizer.class.name": AUTHORIZER,
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN};User:{BROKER_DN}",
    }


def scram_jaas(user: str, password: str) -> str:
    from streamscale.settings import jaas_config

    return jaas_config(SCRAM_MODULE, user, password)


def client_env(bootstrap: str, user: str, where: Files) -> str:
    """The ``STREAMSCALE_*`` lines of a client of the secured cluster as ``user`` (its
    password by reference to its file)."""
    lines = {
        "STREAMSCALE_BOOTSTRAP_SERVERS": bootstrap,
        "STREAMSCALE_SECURITY_PROTOCOL": "SASL_SSL",
        "STREAMSCALE_SASL_MECHANISM": MECHANISM,
        "STREAMSCALE_SASL_USERNAME": user,
        "STREAMSCALE_SASL_PASSWORD_FILE": str(where.password(user)),
        "STREAMSCALE_SSL_CA_LOCATION": str(where.ca_pem),
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def client_properties(settings: Settings) -> str:
    """A Java client configuration (``--command-config`` of Kafka's tools) of ``settings``'s
    connection; holds the JAAS line: write it with mode 0600."""
    conf = settings.java_client_config()
    conf.pop("bootstrap.servers", None)
    return "".join(f"{k}={_escape(v)}\n" for k, v in conf.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


# --------------------------------------------------------------------------- I/O


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (created with mode 0600)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def read_secret(path: Path) -> str:
    return path.read_text().rstrip("\r\n")


def write_client_properties(settings: Settings, path: Path) -> Path:
    """Write :func:`client_properties` of ``settings`` to ``path`` (mode 0600)."""
    write_secret(path, client_properties(settings))
    return path


def keytool() -> str:
    """The JDK's ``keytool``, next to the ``java`` the project runs."""
    java = Path(jars.java())
    beside = java.parent / "keytool"
    return str(beside) if java.parent != Path() and beside.exists() else "keytool"


def _keytool(args: Sequence[str], env: Mapping[str, str]) -> None:
    try:
        done = subprocess.run(
            [keytool(), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SecurityError(f"keytool could not run ({exc}): run `make setup` (the JDK)") from exc
    if done.returncode != 0:
        out = (done.stdout + done.stderr).strip()[-400:]
        raise SecurityError(f"keytool {args[0]} failed: {out}")


def make_ca(where: Files, *, valid_days: int = VALID_DAYS, name: str = CA_DN) -> str:
    """A new CA in ``where`` (``ca.p12`` and ``ca.pem``); returns its store password."""
    password = secrets.token_hex(16)
    env = {"STREAMSCALE_CA_PASS": password}
    store = ["-keystore", str(where.ca_store), "-storetype", "PKCS12"]
    store += ["-storepass:env", "STREAMSCALE_CA_PASS"]
    key = ["-keyalg", "RSA", "-keysize", "2048", "-validity", str(valid_days)]
    _keytool(["-genkeypair", "-alias", "ca", *key, "-dname", name, "-ext", "bc:c", *store], env)
    _keytool(["-exportcert", "-rfc", "-alias", "ca", "-file", str(where.ca_pem), *store], env)
    where.ca_pem.chmod(0o644)
    where.ca_store.chmod(0o600)
    return password


def make_broker_certificate(
    where: Files,
    ca_password: str,
    hosts: Iterable[str],
    *,
    valid_days: int = VALID_DAYS,
    start: str | None = None,
) -> str:
    """The nodes' key and certificate in ``broker.p12``, signed by the CA of ``where``, for
    every address of ``hosts`` (and ``localhost``); returns the keystore's password.
    ``start``: keytool's ``-startdate`` of the certificate (``-3d``: three days ago)."""
    password = secrets.token_hex(16)
    env = {"STREAMSCALE_CA_PASS": ca_password, "STREAMSCALE_STORE_PASS": password}
    store = ["-keystore", str(where.keystore), "-storetype", "PKCS12"]
    store += ["-storepass:env", "STREAMSCALE_STORE_PASS"]
    ca = ["-keystore", str(where.ca_store), "-storetype", "PKCS12"]
    ca += ["-storepass:env", "STREAMSCALE_CA_PASS"]
    csr = where.folder / "broker.csr"
    crt = where.folder / "broker.crt"
    san = ",".join([*(f"ip:{h}" for h in sorted(set(hosts))), "dns:localhost"])
    key = ["-keyalg", "RSA", "-keysize", "2048", "-validity", str(valid_days)]
    _keytool(["-genkeypair", "-alias", "broker", *key, "-dname", BROKER_DN, *store], env)
    _keytool(["-certreq", "-alias", "broker", "-file", str(csr), *store], env)
    dates = ["-startdate", start] if start else []
    paths = ["-infile", str(csr), "-outfile", str(crt), "-rfc"]
    signing = ["-validity", str(valid_days), *dates, "-ext", f"SAN={san}"]
    _keytool(["-gencert", "-alias", "ca", *paths, *signing, *ca], env)
    _keytool(["-importcert", "-noprompt", "-alias", "ca", "-file", str(where.ca_pem), *store], env)
    _keytool(["-importcert", "-noprompt", "-alias", "broker", "-file", str(crt), *store], env)
    csr.unlink(missing_ok=True)
    crt.unlink(missing_ok=True)
    where.keystore.chmod(0o600)
    return password


@dataclass(frozen=True)
class Secrets:
    """The random passwords of a secured cluster (read from its files)."""

    keystore: str
    users: Mapping[str, str]


def create(data_dir: Path, hosts: Iterable[str]) -> Secrets:
    """Make the CA, the broker certificate and the principals' passwords of a new secured
    cluster in ``data_dir`` (once, at format time)."""
    where = files(data_dir)
    where.folder.mkdir(parents=True, exist_ok=True)
    where.folder.chmod(0o700)
    ca_password = make_ca(where)
    store = make_broker_certificate(where, ca_password, hosts)
    write_secret(where.keystore_password, store + "\n")
    users = {user: secrets.token_hex(24) for user in USERS}
    for user, password in users.items():
        write_secret(where.password(user), password + "\n")
    return Secrets(store, users)


def load(data_dir: Path) -> Secrets:
    """The passwords of the secured cluster of ``data_dir``."""
    where = files(data_dir)
    try:
        return Secrets(
            read_secret(where.keystore_password),
            {user: read_secret(where.password(user)) for user in USERS},
        )
    except OSError as exc:
        raise SecurityError(
            f"{where.folder} lacks a secret of the secured cluster ({exc.strerror}): "
            "choose another --data-dir, or remove this one to start afresh"
        ) from None


def scram_arguments(users: Mapping[str, str]) -> list[str]:
    """``kafka-storage format`` arguments that create the SCRAM credentials of ``users``."""
    out: list[str] = []
    for user, password in users.items():
        out += ["--add-scram", f"{MECHANISM}=[name={user},password={password}]"]
    return out


def client_settings(data_dir: Path, bootstrap: str, user: str = PIPELINE, **more: Any) -> Settings:
    """The settings of a client of the secured cluster of ``data_dir`` as ``user``."""
    where = files(data_dir)
    return Settings(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism=MECHANISM,
        sasl_username=user,
        sasl_password_file=where.password(user),
        ssl_ca_location=str(where.ca_pem),
        **more,
    )


def write_client_files(data_dir: Path, bootstrap: str) -> Files:
    """Each principal's ``.env`` and ``.properties`` (mode 0600) for ``bootstrap``."""
    where = files(data_dir)
    for user in USERS:
        write_secret(where.env(user), client_env(bootstrap, user, where))
        settings = client_settings(data_dir, bootstrap, user)
        write_client_properties(settings, where.properties(user))
    return where


def _acl_binding(grant: Grant) -> Any:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kind = {
        "topic": ResourceType.TOPIC,
        "group": ResourceType.GROUP,
        "transactional_id": ResourceType.TRANSACTIONAL_ID,
        "cluster": ResourceType.BROKER,
    }[grant.resource]
    pattern = (
        ResourcePatternType.PREFIXED
        if grant.pattern == "prefixed"
        else (ResourcePatternType.LITERAL)
    )
    return AclBinding(
        kind,
        grant.name,
        pattern,
        grant.principal,
        "*",
        AclOperation[grant.operation],
        AclPermissionType.ALLOW,
    )


def apply_grants(
    conf: Mapping[str, Any],
    grants: Iterable[Grant],
    *,
    revoke: bool = False,
    timeout_s: float = 30.0,
) -> None:
    """Create (or with ``revoke``, delete) ``grants`` with the admin connection ``conf``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter, AdminClient

    bindings = [_acl_binding(g) for g in grants]
    if not bindings:
        return
    admin = AdminClient(dict(conf))
    try:
        if revoke:
            filters = [
                AclBindingFilter(
                    b.restype,
                    b.name,
                    b.resource_pattern_type,
                    b.principal,
                    b.host,
                    b.operation,
                    b.permission_type,
                )
                for b in bindings
            ]
            futures = admin.delete_acls(filters, request_timeout=timeout_s)
        else:
            futures = admin.create_acls(bindings, request_timeout=timeout_s)
        for future in futures.values():
            future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise SecurityError(f"ACLs not {'deleted' if revoke else 'created'}: {exc}") from exc


def tls_problem(bootstrap: str, ca_location: str | None, timeout_s: float = 5.0) -> str | None:
    """What OpenSSL says of the certificate of the first broker of ``bootstrap`` checked
    against ``ca_location`` (``certificate has expired``, ``unable to get local issuer
    certificate``, ``IP address mismatch``...), None when it verifies or nobody answers.

    librdkafka's handshake error says only that the certificate "could not be verified":
    this names why, for :mod:`streamscale.kafka.refusals`."""
    import socket
    import ssl

    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    context = ssl.create_default_context(cafile=ca_location)
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"certificate verify failed: {exc.verify_message}"
    except (OSError, ValueError):
        return None
