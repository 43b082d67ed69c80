"""The embedded broker: Apache Kafka in KRaft combined mode, from Maven-resolved jars, on
127.0.0.1 by default (``--host``: an address of this machine; the multi-host tests give each
node an address, and a network namespace, of its own).

One node by default; three nodes form one cluster (a static controller quorum of all three)
where replication, ``min.insync.replicas=2`` and broker faults are real. The data directory
holds everything a later command needs: ``cluster.json`` (cluster id and each node's ports),
``node-N/server.properties``, ``node-N/data`` (the log, kept across restarts), and per node a
PID file and a log (:mod:`streamscale.processes`). A restarted cluster reuses its ports.

The configuration is that of ``config/server.properties`` for KRaft, with what a loopback
cluster needs: internal topics replicated ``min(3, nodes)`` times with a min ISR of
``min(2, nodes)``, no group rebalance delay, and no topic auto-creation (a missing topic is an
error, as with any cluster run on purpose).

``secure`` (``broker start --secure``, fixed at format time): TLS, SASL/SCRAM and ACLs
(:mod:`streamscale.kafka.security`); every probe of this module then connects as the admin.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from streamscale import class_archives, jars, processes
from streamscale.errors import LaunchError
from streamscale.settings import Settings

DEFAULT_DATA_DIR = Path(".streamscale/broker")
LAYOUT = "cluster.json"
NODE_PREFIX = "kafka-"
HEAP = "512m"
STOP_GRACE_S = 15.0
READY_TIMEOUT_S = 90.0
HOST = "127.0.0.1"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
JVM_OPTS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = warn
logger.controller.name = org.apache.kafka.controller
logger.controller.level = warn
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
logger.log.name = kafka.log.LogManager
logger.log.level = warn
"""


class BrokerError(LaunchError):
    """The embedded broker could not be found, started, reached or stopped."""


@dataclass(frozen=True)
class NodeSpec:
    """One node's identity and ports, fixed when its storage is formatted."""

    node_id: int
    port: int
    controller_port: int
    host: str = HOST
    """The address the node listens on and advertises (its listeners and its voter entry)."""


@dataclass(frozen=True)
class Layout:
    """A formatted cluster: its id and nodes (``cluster.json``)."""

    cluster_id: str
    nodes: tuple[NodeSpec, ...]
    secure: bool = False
    """SASL_SSL with SCRAM and ACLs (:mod:`streamscale.kafka.security`)."""

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.host}:{n.port}" for n in self.nodes)

    def node(self, node_id: int) -> NodeSpec:
        for spec in self.nodes:
            if spec.node_id == node_id:
                return spec
        raise BrokerError(f"no node {node_id}: the cluster has nodes {self.node_ids()}")

    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes]


@dataclass(frozen=True)
class Node:
    """A running node."""

    node_id: int
    port: int
    pid: int
    log: str
    host: str = HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Broker:
    """A running embedded cluster (one node or three)."""

    nodes: tuple[Node, ...]
    data_dir: Path
    secure: bool = False

    def client_settings(self, user: str = "pipeline", **more: object) -> Settings:
        """The settings of a client of this cluster: as ``user`` (``pipeline`` or ``admin``)
        when it is secured, else a plaintext client."""
        if not self.secure:
            return Settings(bootstrap_servers=self.bootstrap, **more)  # type: ignore[arg-type]
        from streamscale.kafka import security

        return security.client_settings(self.data_dir, self.bootstrap, user, **more)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def port(self) -> int:
        """The first node's port."""
        return self.nodes[0].port

    @property
    def pid(self) -> int:
        return self.nodes[0].pid

    @property
    def log(self) -> str:
        return self.nodes[0].log


# --------------------------------------------------------------------------- pure parts


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, never starting
    with ``-`` (a command line would read it as an option; Kafka's ``Uuid`` avoids it too)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def node_name(node_id: int) -> str:
    return f"{NODE_PREFIX}{node_id}"


def server_properties(
    layout: Layout, node_id: int, data: Path, secured: Mapping[str, str] | None = None
) -> str:
    """``server.properties`` of node ``node_id`` of ``layout`` (KRaft, broker and controller);
    ``secured``: the keys of a secured node
    (:func:`streamscale.kafka.security.server_overrides`) over the plaintext listeners."""
    spec = layout.node(node_id)
    count = len(layout.nodes)
    rf = min(3, count)
    isr = min(2, rf)
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in layout.nodes)
    host = spec.host
    props = {
        "process.roles": "broker,controller",
        "node.id": spec.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{host}:{spec.port},CONTROLLER://{host}:{spec.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{spec.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data.resolve()),
        "num.partitions": 1,
        "default.replication.factor": rf,
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 4,
    }
    props.update(secured or {})
    return "".join(f"{k}={v}\n" for k, v in props.items())


def layout_to_json(layout: Layout) -> str:
    return json.dumps(
        {
            "cluster_id": layout.cluster_id,
            "nodes": [asdict(n) for n in layout.nodes],
            "secure": layout.secure,
        },
        indent=2,
    )


def layout_from_json(text: str) -> Layout:
    raw = json.loads(text)
    nodes = tuple(NodeSpec(**n) for n in raw["nodes"])
    return Layout(raw["cluster_id"], nodes, bool(raw.get("secure", False)))


# --------------------------------------------------------------------------- I/O


def answers_metadata(
    bootstrap: str, timeout_s: float = 1.0, conf: Mapping[str, str] | None = None
) -> int:
    """How many brokers the cluster at ``bootstrap`` reports (0 when nobody answers);
    ``conf``: the connection's other librdkafka keys (a secured cluster's admin)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            **(conf or {}),
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 1000,
            "log_level": 0,
            "logger": _quiet_logger(),
        }
    )
    try:
        return len(admin.list_topics(timeout=timeout_s).brokers)
    except Exception:
        return 0


def _quiet_logger() -> object:
    import logging

    quiet = logging.getLogger("streamscale.broker.probe")
    quiet.setLevel(logging.CRITICAL)
    return quiet


def node_dir(data_dir: Path, node_id: int) -> Path:
    return data_dir / f"node-{node_id}"


def load_layout(data_dir: Path) -> Layout | None:
    path = data_dir / LAYOUT
    return layout_from_json(path.read_text()) if path.exists() else None


def _in_use_by_other(data: Path) -> bool:
    """True when another process holds the Kafka lock of log dir ``data``."""
    lock = data / ".lock"
    if not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.lockf(handle, fcntl.LOCK_UN)
    return False


def node_hosts(host: str | Sequence[str], nodes: int) -> list[str]:
    """One address per node: ``host`` for all of them, or a list of exactly ``nodes``."""
    if isinstance(host, str):
        return [host] * nodes
    hosts = list(host)
    if len(hosts) != nodes:
        raise BrokerError(f"{len(hosts)} host(s) given for {nodes} node(s): give one per node")
    return hosts


def probe_conf(data_dir: Path, layout: Layout | None) -> dict[str, str]:
    """librdkafka keys that reach the cluster of ``data_dir``: none for a plaintext one, the
    admin's connection for a secured one."""
    if layout is None or not layout.secure:
        return {}
    from streamscale.kafka import security

    conf = security.client_settings(data_dir, layout.bootstrap, security.ADMIN).kafka_config()
    conf.pop("bootstrap.servers")
    return conf


def _new_layout(
    nodes: int, port: int | None, host: str | Sequence[str] = HOST, secure: bool = False
) -> Layout:
    free = iter(processes.free_ports(2 * nodes, taken=() if port is None else (port,)))
    specs = []
    for i, node_host in enumerate(node_hosts(host, nodes), start=1):
        broker_port = port if (i == 1 and port is not None) else next(free)
        specs.append(NodeSpec(i, broker_port, next(free), node_host))
    return Layout(new_cluster_id(), tuple(specs), secure)


def _format(data_dir: Path, layout: Layout) -> None:
    """Write each node's properties and format its storage (``kafka-storage.sh format``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "log4j2.properties").write_text(LOG4J2)
    cp = jars.classpath(jars.BROKER)
    archive = class_archives.use_options(class_archives.KAFKA)
    scram: list[str] = []
    if layout.secure:
        from streamscale.kafka import security

        made = security.create(data_dir, [n.host for n in layout.nodes])
        scram = security.scram_arguments(made.users)
    running = []
    for spec in layout.nodes:
        folder = node_dir(data_dir, spec.node_id)
        folder.mkdir(parents=True, exist_ok=True)
        props = folder / "server.properties"
        secured = None
        if layout.secure:
            where = security.files(data_dir)
            secured = security.server_overrides(
                spec.host,
                spec.port,
                spec.controller_port,
                where,
                made.users["admin"],
                made.keystore,
            )
        _write_private(props, server_properties(layout, spec.node_id, folder / "data", secured))
        argv = [jars.java(), "-Xmx256m", *_log_opts(data_dir), *archive, "-cp", cp, STORAGE_TOOL]
        argv += ["format", "-t", layout.cluster_id, "-c", str(props), *scram]
        running.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    for proc in running:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            text = out.strip()[-500:]
            for secret in scram[1::2]:
                text = text.replace(secret, "[hidden]")
            raise BrokerError(f"kafka-storage format failed: {text}")
    (data_dir / LAYOUT).write_text(layout_to_json(layout))


def _write_private(path: Path, text: str) -> None:
    """Write a node's properties: mode 0600 (a secured node's hold its keystore's and its
    admin's passwords)."""
    from streamscale.kafka.security import write_secret

    write_secret(path, text)


def _log_opts(data_dir: Path) -> list[str]:
    return [f"-Dlog4j2.configurationFile={(data_dir / 'log4j2.properties').resolve()}"]


def node_argv(
    data_dir: Path, node_id: int, heap: str = HEAP, java_options: Sequence[str] | None = None
) -> list[str]:
    """The command line of one node, as ``kafka-server-start.sh`` builds it; ``java_options``
    default to mapping the Kafka class archive (:mod:`streamscale.class_archives`)."""
    props = node_dir(data_dir, node_id) / "server.properties"
    if java_options is None:
        java_options = class_archives.use_options(class_archives.KAFKA)
    return [
        jars.java(),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *JVM_OPTS,
        *java_options,
        *_log_opts(data_dir),
        "-cp",
        jars.classpath(jars.BROKER),
        MAIN_CLASS,
        str(props),
    ]


def _launch(
    data_dir: Path,
    spec: NodeSpec,
    heap: str,
    java_options: Sequence[str] | None = None,
    prefix: Sequence[str] = (),
) -> processes.ManagedProcess:
    taken = processes.port_in_use(spec.port, spec.host) or processes.port_in_use(
        spec.controller_port, spec.host
    )
    if taken:
        raise BrokerError(
            f"port {spec.port} or {spec.controller_port} on {spec.host} (node {spec.node_id}) is "
            f"taken: stop what holds it, or start with another --data-dir"
        )
    if _in_use_by_other(node_dir(data_dir, spec.node_id) / "data"):
        raise BrokerError(
            f"data dir {node_dir(data_dir, spec.node_id) / 'data'} is in use by another "
            "process: stop that broker or choose another --data-dir"
        )
    try:
        return processes.start(
            node_name(spec.node_id),
            [*prefix, *node_argv(data_dir, spec.node_id, heap, java_options)],
            data_dir,
            info={"node_id": spec.node_id, "port": spec.port, "host": spec.host},
        )
    except processes.ProcessError as exc:
        raise BrokerError(str(exc)) from exc


def _wait_ready(data_dir: Path, layout: Layout, expect: int, timeout_s: float) -> None:
    """Until the cluster reports ``expect`` brokers; a node that exits ends the wait."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for spec in layout.nodes:
            proc = processes.load(data_dir, node_name(spec.node_id))
            if proc is not None and not proc.alive():
                raise BrokerError(
                    f"Kafka node {spec.node_id} exited at start: {processes.tail(Path(proc.log))}"
                )
        if answers_metadata(layout.bootstrap, conf=probe_conf(data_dir, layout)) >= expect:
            return
        time.sleep(0.2)
    raise BrokerError(
        f"the Kafka cluster at {layout.bootstrap} did not report {expect} broker(s) within "
        f"{timeout_s:.0f} s; see the logs in {data_dir}"
    )


def start(
    port: int | None = None,
    data_dir: Path = DEFAULT_DATA_DIR,
    *,
    nodes: int = 1,
    heap: str = HEAP,
    ready_timeout_s: float = READY_TIMEOUT_S,
    java_options: Sequence[str] | None = None,
    host: str | Sequence[str] = HOST,
    prefixes: Mapping[int, Sequence[str]] | None = None,
    secure: bool = False,
) -> Broker:
    """Start a cluster of ``nodes`` (1 or 3) Kafka nodes and wait until every node is
    registered; return it. Data in ``data_dir`` is formatted once and kept: a second start of
    the same directory restarts the same cluster, on the same addresses and ports, with its
    data. ``host``: the address of every node (127.0.0.1 by default), or one per node, fixed
    at the first start; ``prefixes``: a command prefix per node id (``ip netns exec NS``);
    ``secure``: TLS, SCRAM and ACLs (:mod:`streamscale.kafka.security`), fixed at the first
    start too (the client files and the pipeline principal's ACLs are written at each).
    """
    if nodes not in (1, 3):
        raise BrokerError(f"--nodes must be 1 or 3, not {nodes}")
    running = status(data_dir)
    if running is not None:
        raise BrokerError(
            f"a broker is already running from {data_dir} at {running.bootstrap} "
            f"(pid {running.pid}): `streamscale broker stop` first"
        )
    layout = load_layout(data_dir)
    if layout is None:
        first = node_hosts(host, nodes)[0]
        if port is not None and processes.port_in_use(port, first):
            raise BrokerError(f"port {port} on {first} is taken: choose another with --port")
        layout = _new_layout(nodes, port, host, secure)
        _format(data_dir, layout)
    else:
        if len(layout.nodes) != nodes:
            raise BrokerError(
                f"{data_dir} holds a {len(layout.nodes)}-node cluster: start it with "
                f"--nodes {len(layout.nodes)}, or choose another --data-dir"
            )
        if port is not None and port != layout.nodes[0].port:
            raise BrokerError(
                f"{data_dir} holds a cluster on port {layout.nodes[0].port}, not {port}: "
                "drop --port, or choose another --data-dir"
            )
        if layout.secure != secure:
            kind = "secured" if layout.secure else "plaintext"
            flag = "add --secure" if layout.secure else "drop --secure"
            raise BrokerError(
                f"{data_dir} holds a {kind} cluster: {flag}, or choose another --data-dir"
            )
    try:
        for spec in layout.nodes:
            _launch(data_dir, spec, heap, java_options, (prefixes or {}).get(spec.node_id, ()))
        _wait_ready(data_dir, layout, len(layout.nodes), ready_timeout_s)
        if layout.secure:
            _secure_clients(data_dir, layout)
    except BrokerError:
        stop(data_dir)
        raise
    found = status(data_dir)
    if found is None:
        raise BrokerError(f"the broker in {data_dir} stopped right after start")
    return found


def _secure_clients(data_dir: Path, layout: Layout) -> None:
    """Write the client files of a secured cluster and grant the pipeline principal its
    topics, groups and transactional ids (:func:`streamscale.kafka.acls.pipeline_grants`)."""
    from streamscale.kafka import security
    from streamscale.kafka.acls import pipeline_grants
    from streamscale.pipelines.topics import topic_access

    security.write_client_files(data_dir, layout.bootstrap)
    admin = security.client_settings(data_dir, layout.bootstrap, security.ADMIN)
    reads, writes = topic_access()
    try:
        security.apply_grants(
            admin.kafka_config(), pipeline_grants(security.PIPELINE, reads, writes)
        )
    except security.SecurityError as exc:
        raise BrokerError(str(exc)) from exc


def start_node(
    data_dir: Path, node_id: int, *, heap: str = HEAP, prefix: Sequence[str] = ()
) -> Node:
    """Restart one stopped node of the cluster in ``data_dir`` (fault tests)."""
    layout = load_layout(data_dir)
    if layout is None:
        raise BrokerError(f"no cluster formatted in {data_dir}: `streamscale broker start`")
    spec = layout.node(node_id)
    proc = _launch(data_dir, spec, heap, prefix=prefix)
    return Node(node_id, spec.port, proc.pid, proc.log, spec.host)


def stop_node(data_dir: Path, node_id: int, *, kill: bool = False) -> bool:
    """Stop one node: SIGTERM (a controlled shutdown) or, with ``kill``, SIGKILL at once."""
    name = node_name(node_id)
    return processes.stop_all(data_dir, [name], grace_s=0.0 if kill else STOP_GRACE_S)


def nodes(data_dir: Path = DEFAULT_DATA_DIR) -> list[Node]:
    """The nodes recorded in ``data_dir`` that are still running."""
    layout = load_layout(data_dir)
    if layout is None:
        return []
    found = []
    for spec in layout.nodes:
        proc = processes.load(data_dir, node_name(spec.node_id))
        if proc is not None and proc.alive():
            found.append(Node(spec.node_id, spec.port, proc.pid, proc.log, spec.host))
    return found


def status(data_dir: Path = DEFAULT_DATA_DIR) -> Broker | None:
    """The cluster recorded in ``data_dir`` if any node of it is running."""
    running = nodes(data_dir)
    if not running:
        return None
    layout = load_layout(data_dir)
    return Broker(tuple(running), data_dir, layout is not None and layout.secure)


def describe(data_dir: Path = DEFAULT_DATA_DIR) -> list[dict[str, object]]:
    """Every node of the cluster: id, port, PID (None when stopped), and whether it answers."""
    layout = load_layout(data_dir)
    if layout is None:
        return []
    out: list[dict[str, object]] = []
    for spec in layout.nodes:
        proc = processes.load(data_dir, node_name(spec.node_id))
        alive = proc is not None and proc.alive()
        out.append(
            {
                "node_id": spec.node_id,
                "host": spec.host,
                "port": spec.port,
                "controller_port": spec.controller_port,
                "pid": proc.pid if alive and proc is not None else None,
                "answers": alive
                and answers_metadata(f"{spec.host}:{spec.port}", conf=probe_conf(data_dir, layout))
                > 0,
                "log": proc.log if proc is not None else None,
            }
        )
    return out


def stop(data_dir: Path = DEFAULT_DATA_DIR, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop every node by its recorded PID: SIGTERM to all at once, SIGKILL after
    ``grace_s``. False if none was running. The data stays in ``data_dir``."""
    layout = load_layout(data_dir)
    names: Sequence[str] = (
        [node_name(n.node_id) for n in layout.nodes] if layout is not None else []
    )
    return processes.stop_all(data_dir, names, grace_s=grace_s)


TOOL_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""
CONSUMER_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
"""``kafka-consumer-groups.sh``."""


def run_tool(main_class: str, args: Sequence[str], *, timeout_s: float = 120.0) -> str:
    """Run one of Kafka's command-line tools (its main class, e.g. :data:`CONSUMER_GROUPS_TOOL`)
    with the broker's class path, as its ``bin/*.sh`` script would; return its standard output.

    Logs go to standard error at WARN, as with Kafka's ``tools-log4j2.yaml``. A tool that exits
    non-zero or outlives ``timeout_s`` raises :class:`BrokerError` with what it printed.
    """
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as tmp:
        config = Path(tmp) / "log4j2.properties"
        config.write_text(TOOL_LOG4J2)
        argv = [jars.java(), "-Xmx256m", f"-Dlog4j2.configurationFile={config}"]
        argv += class_archives.use_options(class_archives.KAFKA)
        argv += ["-cp", jars.classpath(jars.BROKER), main_class, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(f"{main_class} did not finish within {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-2000:]
        raise BrokerError(f"{main_class} {' '.join(args)} exited {done.returncode}: {output}")
    return done.stdout


@contextmanager
def embedded_broker(
    data_dir: Path,
    port: int | None = None,
    *,
    nodes: int = 1,
    host: str = HOST,
    heap: str = HEAP,
    secure: bool = False,
) -> Iterator[Broker]:
    """A cluster for the duration of a ``with`` block (tests, the demo, benchmarks); ``heap``
    of each node's JVM (the demo's broker takes less); ``secure``: see :func:`start`."""
    running = start(port, data_dir, nodes=nodes, host=host, heap=heap, secure=secure)
    try:
        yield running
    finally:
        with contextlib.suppress(processes.ProcessError):
            stop(data_dir)
