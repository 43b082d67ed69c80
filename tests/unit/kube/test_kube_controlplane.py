"""Pure parts of the control plane (:mod:`streamscale.kube.controlplane`, :mod:`.pki`): the
components' flags and the kubeconfig (no process is started)."""

from __future__ import annotations

import base64
import ipaddress
import json
from pathlib import Path

from streamscale.kube import controlplane as cp
from streamscale.kube import pki

LAYOUT = cp.Layout(2379, 2380, 6443, 10257, 10259)
DATA = Path("/d")


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv[1:] if "=" in a)


def test_every_component_listens_on_loopback_only() -> None:
    for argv in (
        cp.etcd_argv(Path("etcd"), DATA / "etcd", LAYOUT),
        cp.apiserver_argv(Path("kube-apiserver"), DATA, LAYOUT),
        cp.controller_manager_argv(Path("kcm"), DATA, LAYOUT),
        cp.scheduler_argv(Path("ks"), DATA, LAYOUT),
    ):
        for key, value in _flags(argv).items():
            if "address" in key or key.endswith("urls") or key == "initial-cluster":
                assert "127.0.0.1" in value, (key, value)
                assert "0.0.0.0" not in value


def test_apiserver_enforces_authentication_rbac_and_admission() -> None:
    flags = _flags(cp.apiserver_argv(Path("kube-apiserver"), DATA, LAYOUT))
    assert flags["authorization-mode"] == "Node,RBAC"
    assert flags["enable-admission-plugins"] == "NodeRestriction"
    assert "disable-admission-plugins" not in flags  # ServiceAccount stays on
    assert flags["client-ca-file"] == "/d/pki/ca.crt"
    assert flags["secure-port"] == "6443"
    assert flags["etcd-servers"] == "http://127.0.0.1:2379"
    assert flags["service-account-issuer"] == "https://127.0.0.1:6443"
    assert flags["service-account-signing-key-file"] == "/d/pki/sa.key"


def test_service_range_is_test_only() -> None:
    flags = _flags(cp.apiserver_argv(Path("kube-apiserver"), DATA, LAYOUT))
    network = ipaddress.ip_network(flags["service-cluster-ip-range"])
    assert network.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
    assert ipaddress.ip_address(cp.SERVICE_IP) in network


def test_controller_manager_runs_every_controller_with_its_own_credentials() -> None:
    flags = _flags(cp.controller_manager_argv(Path("kcm"), DATA, LAYOUT))
    assert flags["controllers"] == "*"
    assert flags["use-service-account-credentials"] == "true"
    assert flags["root-ca-file"] == "/d/pki/ca.crt"
    assert flags["kubeconfig"] == "/d/kube-controller-manager.kubeconfig"


def test_kubeconfig_embeds_the_credentials() -> None:
    text = cp.kubeconfig("https://127.0.0.1:6443", b"CA", b"CERT", b"KEY", "me")
    config = json.loads(text)
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    user = config["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    assert config["current-context"] == config["contexts"][0]["name"]


def test_identities_as_the_authenticator_reads_them() -> None:
    assert pki.ADMIN.subject() == "/O=system:masters/CN=kubernetes-admin"
    assert pki.node_identity("n1").subject() == "/O=system:nodes/CN=system:node:n1"
    assert "IP:127.0.0.1" in pki.serving_names("198.18.128.1")
    assert "DNS:kubernetes.default.svc" in pki.serving_names("198.18.128.1")
