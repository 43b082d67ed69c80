"""The certificates and keys of a local control plane, made at its first start with the
``openssl`` command line (no Python crypto dependency): one CA; the API server's serving
certificate (loopback, ``localhost`` and the ``kubernetes.default.svc`` names); client
certificates whose subject is the identity the API server's x509 authenticator reads (CN the
user, O the groups: the admin in ``system:masters``, the controller manager and scheduler as
their bootstrap RBAC users, each node as ``system:node:NAME`` in ``system:nodes`` for the Node
authorizer); and the service-account token signing key pair.

EC P-256 keys throughout: quicker to make than RSA, and accepted by every component.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamscale.errors import LaunchError

CA = "ca"
DAYS = 365
SERVICE_ACCOUNT_KEY = "sa"


class PkiError(LaunchError):
    """A certificate or key of the local control plane could not be made."""


@dataclass(frozen=True)
class Identity:
    """Who a client certificate names: CN ``user``, one O per group."""

    user: str
    groups: tuple[str, ...] = ()

    def subject(self) -> str:
        return "".join(f"/O={g}" for g in self.groups) + f"/CN={self.user}"


ADMIN = Identity("kubernetes-admin", ("system:masters",))
CONTROLLER_MANAGER = Identity("system:kube-controller-manager")
SCHEDULER = Identity("system:kube-scheduler")


def node_identity(node: str) -> Identity:
    """The identity the Node authorizer and NodeRestriction admission recognise as ``node``."""
    return Identity(f"system:node:{node}", ("system:nodes",))


def serving_names(service_ip: str) -> list[str]:
    """subjectAltName entries of the API server's serving certificate: loopback (what every
    client here dials), and the in-cluster names and Service IP a pod would use."""
    names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    return [f"DNS:{n}" for n in names] + ["IP:127.0.0.1", f"IP:{service_ip}"]


def _openssl(args: Sequence[str]) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise PkiError("openssl is not installed: apt-get install openssl") from None
    except subprocess.CalledProcessError as exc:
        raise PkiError(f"openssl {args[0]} failed: {exc.stderr.strip()[-300:]}") from None


_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(pki: Path) -> None:
    """``ca.crt``/``ca.key`` in ``pki`` unless present."""
    if (pki / f"{CA}.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        [
            "req", "-x509", *_EC, "-days", str(DAYS), "-subj", "/CN=streamscale-kube-ca",
            "-keyout", str(pki / f"{CA}.key"), "-out", str(pki / f"{CA}.crt"),
        ]
    )  # fmt: skip


def make_cert(pki: Path, name: str, subject: str, alt_names: Sequence[str] = ()) -> None:
    """``name.crt``/``name.key`` signed by the CA, unless present; a serving certificate
    when ``alt_names`` are given, a client certificate otherwise."""
    if (pki / f"{name}.crt").exists():
        return
    usage = "serverAuth" if alt_names else "clientAuth"
    extensions = [
        "-addext", "basicConstraints=critical,CA:FALSE",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
        "-addext", f"extendedKeyUsage={usage}",
    ]  # fmt: skip
    if alt_names:
        extensions += ["-addext", "subjectAltName=" + ",".join(alt_names)]
    _openssl(
        [
            "req", "-x509", *_EC, "-days", str(DAYS), "-subj", subject,
            "-CA", str(pki / f"{CA}.crt"), "-CAkey", str(pki / f"{CA}.key"), *extensions,
            "-keyout", str(pki / f"{name}.key"), "-out", str(pki / f"{name}.crt"),
        ]
    )  # fmt: skip


def make_service_account_keys(pki: Path) -> None:
    """``sa.key`` (the API server signs service-account tokens with it, the controller
    manager too) and ``sa.pub`` (verifies them), unless present."""
    if (pki / f"{SERVICE_ACCOUNT_KEY}.pub").exists():
        return
    key = pki / f"{SERVICE_ACCOUNT_KEY}.key"
    _openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)])
    _openssl(["ec", "-in", str(key), "-pubout", "-out", str(pki / f"{SERVICE_ACCOUNT_KEY}.pub")])
