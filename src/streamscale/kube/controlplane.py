"""A real Kubernetes control plane on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, the binaries ``make setup`` builds from the pinned
Go modules of ``deploy/kube`` into ``build/bin``, each started and stopped by PID through
:mod:`streamscale.processes`, on free loopback ports, with its data (etcd's, the certificates,
the kubeconfigs, the logs) in one directory.

What runs is what a cluster runs, not a test double: TLS on the API server (a CA and its
certificates made at the first start, :mod:`.pki`), x509 client certificates as identities,
``Node,RBAC`` authorization, the default admission plugins (ServiceAccount among them) plus
NodeRestriction, service-account tokens signed by a key of the cluster (the TokenRequest API),
the controller manager with every default controller (Deployments, ReplicaSets, the garbage
collector, service accounts and their tokens, namespaces...) each under its own service
account, and the scheduler. The flags follow those envtest (controller-runtime) and kubeadm
give. No kubelet: :mod:`.node_agent` stands in for one.

Networking: everything listens on 127.0.0.1 and the API server advertises 127.0.0.1. The
Service range is a test-only one (:data:`SERVICE_CIDR`, in 198.18.0.0/15, set aside for
benchmarks) that no route leads to: nothing here ever connects to a ClusterIP; pods reach the
API server on its loopback port (``KUBERNETES_SERVICE_HOST``/``PORT`` set by the agent).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from streamscale import processes
from streamscale.errors import LaunchError
from streamscale.kube import pki

HOST = "127.0.0.1"
DEFAULT_DATA_DIR = Path(".streamscale/kube")
SERVICE_CIDR = "198.18.128.0/24"
SERVICE_IP = "198.18.128.1"  # the ``kubernetes`` Service's ClusterIP: in the certificate only
LAYOUT = "controlplane.json"
ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)
NODE_PREFIX = "node-agent-"
DEFAULT_NODE = "streamscale-node"
READY_TIMEOUT_S = 120.0
ADMIN_KUBECONFIG = "admin.kubeconfig"


class KubeError(LaunchError):
    """The local Kubernetes control plane or node agent could not be found, started or
    reached."""


def bin_dir() -> Path:
    """``build/bin`` of the source tree this package runs from (``make setup`` builds there)."""
    return Path(__file__).resolve().parents[3] / "build" / "bin"


def binary(name: str) -> Path:
    """The path of ``name`` in :func:`bin_dir`; a clear error if ``make setup`` has not built it."""
    path = bin_dir() / name
    if not path.exists():
        raise KubeError(f"{path} is missing: run `make setup` (it builds etcd and Kubernetes)")
    return path


# --------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class Layout:
    """The ports of one control plane (kept in ``controlplane.json``)."""

    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    controller_manager_port: int
    scheduler_port: int

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.apiserver_port}"


def etcd_argv(etcd: Path, data: Path, layout: Layout) -> list[str]:
    """etcd, one member on loopback, plain HTTP (only the API server dials it), no fsync (its
    data is thrown away with the cluster)."""
    client = f"http://{HOST}:{layout.etcd_port}"
    peer = f"http://{HOST}:{layout.etcd_peer_port}"
    return [
        str(etcd),
        "--name=default",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_argv(apiserver: Path, data: Path, layout: Layout) -> list[str]:
    """kube-apiserver on ``127.0.0.1:apiserver_port`` with TLS, x509 client authentication,
    Node and RBAC authorization, service-account tokens and NodeRestriction admission."""
    p = data / "pki"
    return [
        str(apiserver),
        f"--etcd-servers=http://{HOST}:{layout.etcd_port}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={layout.apiserver_port}",
        f"--cert-dir={p}",
        f"--tls-cert-file={p / 'apiserver.crt'}",
        f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer={layout.server}",
        f"--service-account-key-file={p / 'sa.pub'}",
        f"--service-account-signing-key-file={p / 'sa.key'}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(binary_path: Path, data: Path, layout: Layout) -> list[str]:
    """kube-controller-manager: every default controller, each with its own service account's
    credentials (as kubeadm runs it), the CA published to every namespace (``kube-root-ca.crt``,
    which projected service-account volumes read) and used to sign CSRs."""
    p = data / "pki"
    kubeconfig = data / f"{CONTROLLER_MANAGER}.kubeconfig"
    return [
        str(binary_path),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={layout.controller_manager_port}",
        f"--cert-dir={data / CONTROLLER_MANAGER}",
        "--controllers=*",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={p / 'sa.key'}",
        f"--root-ca-file={p / 'ca.crt'}",
        f"--cluster-signing-cert-file={p / 'ca.crt'}",
        f"--cluster-signing-key-file={p / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--leader-elect=false",
        "--v=1",
    ]


def scheduler_argv(binary_path: Path, data: Path, layout: Layout) -> list[str]:
    """kube-scheduler with its default profile."""
    kubeconfig = data / f"{SCHEDULER}.kubeconfig"
    return [
        str(binary_path),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={layout.scheduler_port}",
        f"--cert-dir={data / SCHEDULER}",
        "--leader-elect=false",
        "--v=1",
    ]


def kubeconfig(server: str, ca: bytes, cert: bytes, key: bytes, user: str) -> str:
    """A kubeconfig (JSON, which every client reads as YAML) for ``user`` with its client
    certificate embedded, one cluster ``streamscale`` and one current context."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "streamscale",
                    "cluster": {"server": server, "certificate-authority-data": b64(ca)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
                }
            ],
            "contexts": [
                {"name": "streamscale", "context": {"cluster": "streamscale", "user": user}}
            ],
            "current-context": "streamscale",
        },
        indent=2,
    )


# --------------------------------------------------------------------------- the edges


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane: its data directory and ports."""

    data_dir: Path
    layout: Layout

    @property
    def server(self) -> str:
        return self.layout.server

    @property
    def admin_kubeconfig(self) -> Path:
        return self.data_dir / ADMIN_KUBECONFIG

    @property
    def ca_file(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    def client_kubeconfig(self, name: str, identity: pki.Identity) -> Path:
        """A kubeconfig for ``identity`` (a certificate made now, if not yet), as a cluster
        admin hands one to a new node or user."""
        return _write_kubeconfig(self.data_dir, self.layout, name, identity)

    def node_kubeconfig(self, node: str) -> Path:
        """The kubeconfig of node ``node`` (``system:node:NODE`` in ``system:nodes``)."""
        return self.client_kubeconfig(f"node-{node}", pki.node_identity(node))

    def ssl_context(self) -> ssl.SSLContext:
        """TLS to the API server, verified against the cluster's CA, as the admin."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        p = self.data_dir / "pki"
        ctx.load_cert_chain(str(p / "admin.crt"), str(p / "admin.key"))
        return ctx

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        """GET ``path`` from the API server as the admin: (status, body)."""
        request = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(
                request, timeout=timeout_s, context=self.ssl_context()
            ) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def ready(self) -> bool:
        """The API server answers ``/readyz`` with 200 (etcd, RBAC bootstrap, and so on)."""
        try:
            return self.get("/readyz", timeout_s=2.0)[0] == 200
        except (OSError, ssl.SSLError):
            return False

    def pids(self) -> dict[str, int]:
        """PID of every recorded component that is alive."""
        found = {}
        for name in COMPONENTS:
            managed = processes.load(self.data_dir, name)
            if managed is not None and managed.alive():
                found[name] = managed.pid
        return found


def _write_kubeconfig(data_dir: Path, layout: Layout, name: str, identity: pki.Identity) -> Path:
    p = data_dir / "pki"
    pki.make_cert(p, name, identity.subject())
    path = data_dir / f"{name}.kubeconfig"
    text = kubeconfig(
        layout.server,
        (p / "ca.crt").read_bytes(),
        (p / f"{name}.crt").read_bytes(),
        (p / f"{name}.key").read_bytes(),
        identity.user,
    )
    path.write_text(text)
    path.chmod(0o600)
    return path


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=context) as response:
            return int(response.status) == 200
    except (OSError, ssl.SSLError):
        return False


def _insecure() -> ssl.SSLContext:
    # The controller manager and scheduler serve healthz with a certificate they make
    # themselves at start (--cert-dir): nothing to verify it against.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def load(data_dir: Path = DEFAULT_DATA_DIR) -> ControlPlane | None:
    """The control plane recorded in ``data_dir`` (running or not), or None."""
    path = data_dir / LAYOUT
    if not path.exists():
        return None
    return ControlPlane(data_dir, Layout(**json.loads(path.read_text())))


def running(data_dir: Path = DEFAULT_DATA_DIR) -> ControlPlane | None:
    """The control plane of ``data_dir`` if its API server's process is alive."""
    plane = load(data_dir)
    if plane is None or APISERVER not in plane.pids():
        return None
    return plane


def start(
    data_dir: Path = DEFAULT_DATA_DIR,
    *,
    apiserver_port: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> ControlPlane:
    """Start etcd, the API server (wait for ``/readyz``), the controller manager and the
    scheduler (wait for their ``/healthz``); write ``admin.kubeconfig``. A second start of a
    running control plane returns it."""
    data_dir = data_dir.resolve()
    already = running(data_dir)
    if already is not None:
        return already
    for name in COMPONENTS:
        binary(ETCD if name == ETCD else name)
    binary("kubectl")
    taken = () if apiserver_port is None else (apiserver_port,)
    etcd, peer, api, manager, scheduler = processes.free_ports(5, taken=taken)
    layout = Layout(
        etcd_port=etcd,
        etcd_peer_port=peer,
        apiserver_port=apiserver_port or api,
        controller_manager_port=manager,
        scheduler_port=scheduler,
    )
    if processes.port_in_use(layout.apiserver_port):
        raise KubeError(f"port {layout.apiserver_port} is in use: give another --port")
    data_dir.mkdir(parents=True, exist_ok=True)
    p = data_dir / "pki"
    pki.make_ca(p)
    pki.make_cert(p, "apiserver", "/CN=kube-apiserver", pki.serving_names(SERVICE_IP))
    pki.make_service_account_keys(p)
    _write_kubeconfig(data_dir, layout, "admin", pki.ADMIN)
    _write_kubeconfig(data_dir, layout, CONTROLLER_MANAGER, pki.CONTROLLER_MANAGER)
    _write_kubeconfig(data_dir, layout, SCHEDULER, pki.SCHEDULER)
    (data_dir / LAYOUT).write_text(json.dumps(asdict(layout), indent=2))
    plane = ControlPlane(data_dir, layout)
    try:
        processes.start(
            ETCD,
            etcd_argv(binary(ETCD), data_dir / "etcd", layout),
            data_dir,
            ready=lambda: _http_ok(f"http://{HOST}:{layout.etcd_port}/health"),
            ready_timeout_s=ready_timeout_s,
        )
        processes.start(
            APISERVER,
            apiserver_argv(binary(APISERVER), data_dir, layout),
            data_dir,
            ready=plane.ready,
            ready_timeout_s=ready_timeout_s,
        )
        for name, argv, port in (
            (
                CONTROLLER_MANAGER,
                controller_manager_argv(binary(CONTROLLER_MANAGER), data_dir, layout),
                layout.controller_manager_port,
            ),
            (
                SCHEDULER,
                scheduler_argv(binary(SCHEDULER), data_dir, layout),
                layout.scheduler_port,
            ),
        ):
            processes.start(
                name,
                argv,
                data_dir,
                ready=functools.partial(_http_ok, f"https://{HOST}:{port}/healthz", _insecure()),
                ready_timeout_s=ready_timeout_s,
            )
    except processes.ProcessError as exc:
        stop(data_dir)
        raise KubeError(f"the control plane did not start: {exc}") from None
    return plane


def node_ready(plane: ControlPlane, node: str) -> bool:
    """The Node ``node`` exists and its Ready condition is True."""
    try:
        code, body = plane.get(f"/api/v1/nodes/{node}", timeout_s=2.0)
    except (OSError, ssl.SSLError):
        return False
    if code != 200:
        return False
    conditions = json.loads(body).get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def start_node(plane: ControlPlane, node: str = DEFAULT_NODE) -> processes.ManagedProcess:
    """Start the node agent (:mod:`.node_agent`) of ``node`` as its own process, with a
    kubeconfig of that node's identity; wait until the Node is Ready."""
    import sys

    name = NODE_PREFIX + node
    managed = processes.load(plane.data_dir, name)
    if managed is not None and managed.alive():
        return managed
    argv = [
        sys.executable,
        "-m",
        "streamscale.kube.node_agent",
        str(plane.node_kubeconfig(node)),
        node,
        str(plane.layout.apiserver_port),
        str(plane.data_dir / "pods" / node),
    ]
    try:
        return processes.start(
            name,
            argv,
            plane.data_dir,
            env={"PYTHONUNBUFFERED": "1"},
            info={"node": node},
            ready=lambda: node_ready(plane, node),
            ready_timeout_s=60.0,
        )
    except processes.ProcessError as exc:
        raise KubeError(f"the node agent of {node} did not start: {exc}") from None


def node_names(data_dir: Path) -> list[str]:
    """The node agents recorded in ``data_dir``."""
    return sorted(p.stem for p in data_dir.glob(f"{NODE_PREFIX}*.json"))


def stop(data_dir: Path = DEFAULT_DATA_DIR, grace_s: float = 10.0) -> int:
    """Stop the node agents (and their pods' processes), the scheduler, controller manager,
    API server, then etcd, by recorded PID; the number of processes that were running."""
    data_dir = data_dir.resolve()
    stopped = 0
    for name in [*node_names(data_dir), *reversed(COMPONENTS)]:
        with contextlib.suppress(processes.ProcessError):
            stopped += processes.stop(data_dir, name, timeout_s=grace_s)
    return stopped


@contextlib.contextmanager
def control_plane(
    data_dir: Path, node: str | None = DEFAULT_NODE, ready_timeout_s: float = READY_TIMEOUT_S
) -> Iterator[ControlPlane]:
    """A control plane (and a node agent of ``node``, unless None) for the duration of a
    ``with`` block (the tests' session fixture)."""
    plane = start(data_dir, ready_timeout_s=ready_timeout_s)
    try:
        if node is not None:
            start_node(plane, node)
        yield plane
    finally:
        stop(data_dir)


def wait_for(
    check: Callable[[], object], what: str, timeout_s: float = 60.0, interval_s: float = 0.2
) -> None:
    """Poll ``check()`` until truthy; a :class:`KubeError` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise KubeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)
