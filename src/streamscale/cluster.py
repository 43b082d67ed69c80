"""A Spark standalone cluster: one Master and N Workers, on 127.0.0.1 by default, started by PID.

The pip-installed pyspark ships ``bin/spark-class`` but not the ``sbin`` start scripts, so the
Master and Workers are started here with ``spark-class`` through :mod:`streamscale.processes`
(PIDs and logs in the data directory). Readiness and status come from the Master's JSON
endpoint (``http://<host>:<webui>/json/``), the same view as its web UI.

Every daemon binds to and advertises one address, ``host`` (127.0.0.1 unless ``--host`` says
otherwise); executors inherit their Worker's environment, so they listen on their Worker's
address. :func:`start_master` and :func:`start_worker` start one daemon each, optionally
through a command prefix (``ip netns exec NS``: the multi-host tests run each in a network
namespace of its own).

Executors on standalone: with dynamic allocation off, the Master grants an application
``spark.cores.max / spark.executor.cores`` executors at once (``spark.executor.instances`` is
ignored), so :func:`app_conf` sets ``spark.cores.max`` to the executor ceiling and the
actuator brings the count down to the wanted start value.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamscale import class_archives, processes
from streamscale.errors import LaunchError
from streamscale.jars import spark_home

HOST = "127.0.0.1"
DEFAULT_DATA_DIR = Path(".streamscale/cluster")
MASTER = "spark-master"
WORKER_PREFIX = "spark-worker-"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
_MEMORY_RE = re.compile(r"^[1-9][0-9]*[kKmMgGtT]?$")


class ClusterError(LaunchError):
    """The local cluster could not be found, started, reached or stopped."""


# --------------------------------------------------------------------------- pure parts


def validate_memory(memory: str) -> str:
    """Spark's memory syntax (``512m``, ``2g``); a clear error otherwise."""
    if not _MEMORY_RE.match(memory):
        raise ClusterError(f"memory {memory!r} is not a Spark size such as 512m or 2g")
    return memory.lower()


def master_url(port: int, host: str = HOST) -> str:
    return f"spark://{host}:{port}"


def master_argv(spark_class: Path, port: int, webui_port: int, host: str = HOST) -> list[str]:
    """Command line of the standalone Master bound to ``host``."""
    return [
        str(spark_class),
        MASTER_CLASS,
        "--host",
        host,
        "--port",
        str(port),
        "--webui-port",
        str(webui_port),
    ]


def worker_argv(
    spark_class: Path, master: str, cores: int, memory: str, webui_port: int, host: str = HOST
) -> list[str]:
    """Command line of a standalone Worker offering ``cores`` and ``memory`` to ``master``."""
    if cores < 1:
        raise ClusterError(f"a worker needs at least 1 core, not {cores}")
    return [
        str(spark_class),
        WORKER_CLASS,
        master,
        "--host",
        host,
        "--cores",
        str(cores),
        "--memory",
        validate_memory(memory),
        "--webui-port",
        str(webui_port),
    ]


QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for JVMs whose start-up dominates their work (the Master and Workers, which
schedule and heartbeat; a test's short Spark application): the client compiler only and the
serial collector. On 2 cores, a Master and a Worker then start on about half the CPU
(6-8 s instead of 14 s measured, about 2 s sooner)."""


def daemon_env(
    data_dir: Path,
    spark_home: Path,
    host: str = HOST,
    daemon_opts: Sequence[str] = (),
    class_archive: bool = True,
) -> dict[str, str]:
    """Environment of the Master and Workers: ``host`` only, logs and work dirs in ``data_dir``.

    Executors inherit the Worker's environment, so they bind to ``host`` too (not its JVM
    options: the daemons start with :data:`QUICK_JVM` and the Spark class archive, executors
    with the application's). ``daemon_opts``: more ``-Dspark...`` options of the daemons (the
    multi-host tests shorten ``spark.worker.timeout``, which the Master waits for a Worker's
    heartbeat and a Worker divides by 4 to send them). ``class_archive``: map the Spark class
    archive (a faster start; but the JVM relocates the archive and so keeps all of it, about
    150 MB, resident: the demo's daemons go without, 0.8 s slower, 120 MB smaller each).
    The Master's REST submission server (on by default in Spark 4, fixed port 6066) is turned
    off: it is not used and would make two local clusters contend for that port.
    """
    return {
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": host,
        "SPARK_LOCAL_HOSTNAME": host,
        "SPARK_LOG_DIR": str(data_dir.resolve() / "logs"),
        "SPARK_WORKER_DIR": str(data_dir.resolve() / "work"),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_DAEMON_JAVA_OPTS": " ".join(
            [
                QUICK_JVM,
                *(class_archives.use_options(class_archives.SPARK) if class_archive else ()),
                *daemon_opts,
            ]
        ),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
    }


def app_conf(
    master: str,
    max_executors: int,
    *,
    executor_cores: int = 1,
    executor_memory: str = "1g",
    python: str | None = None,
    remove_delay: str = "1s",
) -> dict[str, str]:
    """Spark configuration for an application on this cluster, scaled by the actuator.

    ``spark.cores.max`` caps the application at ``max_executors`` executors of
    ``executor_cores`` cores (without it, dynamic allocation off means every core of the
    cluster); dynamic allocation is off because ``killExecutors`` refuses to run with it and
    its queued-task heuristic would fight the autoscaler. Executors run this interpreter.
    A killed executor exits at once, but the driver forgets it only after
    ``spark.standalone.executorRemoveDelayOnDisconnection`` (5 s by default, a wait for the
    Master's loss reason, which arrives in milliseconds on loopback): ``remove_delay``.

    No address here: :func:`streamscale.spark.session` decides the driver's (settings, or the
    route to the master), and executors listen where their Worker does.
    """
    if max_executors < 1:
        raise ClusterError(f"max_executors must be at least 1, not {max_executors}")
    if executor_cores < 1:
        raise ClusterError(f"executor_cores must be at least 1, not {executor_cores}")
    python = python or sys.executable
    return {
        "spark.master": master,
        "spark.executor.cores": str(executor_cores),
        "spark.cores.max": str(max_executors * executor_cores),
        "spark.executor.memory": validate_memory(executor_memory),
        "spark.dynamicAllocation.enabled": "false",
        "spark.pyspark.python": python,
        "spark.executorEnv.PYSPARK_PYTHON": python,
        "spark.standalone.executorRemoveDelayOnDisconnection": remove_delay,
    }


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as the Master sees it."""

    id: str
    state: str
    webui: str
    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int


@dataclass(frozen=True)
class AppStatus:
    """One running application as the Master sees it (``cores`` granted to its executors)."""

    id: str
    name: str
    state: str
    cores: int
    memory_per_executor_mb: int


@dataclass(frozen=True)
class ClusterStatus:
    """The Master's state: its URL, its workers and its running applications."""

    master_url: str
    state: str
    workers: tuple[WorkerStatus, ...]
    apps: tuple[AppStatus, ...]
    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int

    @property
    def alive_workers(self) -> tuple[WorkerStatus, ...]:
        return tuple(w for w in self.workers if w.state == "ALIVE")

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ClusterStatus:
        """Parse the Master's ``/json/`` document."""
        workers = tuple(
            WorkerStatus(
                id=str(w["id"]),
                state=str(w["state"]),
                webui=str(w.get("webuiaddress", "")),
                cores=int(w["cores"]),
                cores_used=int(w.get("coresused", 0)),
                memory_mb=int(w["memory"]),
                memory_used_mb=int(w.get("memoryused", 0)),
            )
            for w in raw.get("workers", [])
        )
        apps = tuple(
            AppStatus(
                id=str(a["id"]),
                name=str(a.get("name", "")),
                state=str(a.get("state", "")),
                cores=int(a.get("cores", 0)),
                memory_per_executor_mb=int(a.get("memoryperexecutor", 0)),
            )
            for a in raw.get("activeapps", [])
        )
        return cls(
            master_url=str(raw["url"]),
            state=str(raw.get("status", "")),
            workers=workers,
            apps=apps,
            cores=int(raw.get("cores", 0)),
            cores_used=int(raw.get("coresused", 0)),
            memory_mb=int(raw.get("memory", 0)),
            memory_used_mb=int(raw.get("memoryused", 0)),
        )

    def describe(self) -> str:
        """Human-readable summary, one fact per line (for ``streamscale cluster status``)."""
        lines = [
            f"master   {self.master_url} ({self.state})",
            f"workers  {len(self.alive_workers)} alive of {len(self.workers)}",
            f"cores    {self.cores_used} used of {self.cores}",
            f"memory   {self.memory_used_mb} MB used of {self.memory_mb} MB",
        ]
        lines += [
            f"  worker {w.id} {w.state} cores {w.cores_used}/{w.cores} "
            f"memory {w.memory_used_mb}/{w.memory_mb} MB"
            for w in self.workers
        ]
        lines.append(f"apps     {len(self.apps)} running")
        lines += [
            f"  app {a.id} {a.name!r} {a.state} cores {a.cores} "
            f"memory/executor {a.memory_per_executor_mb} MB"
            for a in self.apps
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------- I/O edge


def spark_class(home: Path | None = None) -> Path:
    """The ``bin/spark-class`` launcher (it ``exec``s java, so its PID is the JVM's)."""
    path = (home or spark_home()) / "bin" / "spark-class"
    if not path.exists():
        raise ClusterError(f"spark-class not found at {path}: reinstall pyspark")
    return path


def fetch_state(webui_port: int, timeout_s: float = 2.0, host: str = HOST) -> dict[str, Any] | None:
    """The Master's ``/json/`` document, or None when it does not answer."""
    url = f"http://{host}:{webui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            data = json.loads(resp.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _master_ready(webui_port: int, host: str = HOST) -> bool:
    state = fetch_state(webui_port, timeout_s=1.0, host=host)
    return state is not None and state.get("status") == "ALIVE"


def _worker_ready(
    webui_port: int, worker_webui_port: int, host: str = HOST, worker_host: str = HOST
) -> bool:
    state = fetch_state(webui_port, timeout_s=1.0, host=host)
    if state is None:
        return False
    suffix = f"{worker_host}:{worker_webui_port}"
    return any(
        str(w.get("webuiaddress", "")).endswith(suffix) and w.get("state") == "ALIVE"
        for w in state.get("workers", [])
    )


@dataclass(frozen=True)
class Cluster:
    """A running local cluster, as recorded in its data directory."""

    port: int
    webui_port: int
    data_dir: Path
    master_pid: int
    worker_pids: tuple[int, ...]
    host: str = HOST

    @property
    def master_url(self) -> str:
        return master_url(self.port, self.host)

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def status(self, timeout_s: float = 2.0) -> ClusterStatus | None:
        """The Master's current view, or None when it does not answer."""
        raw = fetch_state(self.webui_port, timeout_s, self.host)
        return None if raw is None else ClusterStatus.from_json(raw)

    def app_conf(self, max_executors: int | None = None, **kwargs: Any) -> dict[str, str]:
        """:func:`app_conf` for this cluster (by default as many executors as cores), with
        the driver's addresses by :func:`streamscale.network.driver_addresses`: 127.0.0.1 for
        a cluster on loopback, so that a session built from this alone (a user's own
        ``SparkSession.builder``) listens on loopback only."""
        from streamscale.network import driver_addresses

        if max_executors is None:
            status = self.status()
            max_executors = max(1, status.cores if status else 1)
        return {
            **app_conf(self.master_url, max_executors, **kwargs),
            **driver_addresses(self.master_url),
        }


def _worker_names(data_dir: Path) -> list[str]:
    names = [p.stem for p in data_dir.glob(f"{WORKER_PREFIX}*.json")]
    return sorted(names, key=lambda n: int(n.removeprefix(WORKER_PREFIX) or 0))


def running(data_dir: Path = DEFAULT_DATA_DIR) -> Cluster | None:
    """The cluster recorded in ``data_dir`` if its Master process is alive."""
    master = processes.load(data_dir, MASTER)
    if master is None or not master.alive():
        return None
    workers = [processes.load(data_dir, n) for n in _worker_names(data_dir)]
    return Cluster(
        port=int(master.info["port"]),
        webui_port=int(master.info["webui_port"]),
        data_dir=data_dir,
        master_pid=master.pid,
        worker_pids=tuple(w.pid for w in workers if w is not None and w.alive()),
        host=str(master.info.get("host", HOST)),
    )


def status(data_dir: Path = DEFAULT_DATA_DIR) -> ClusterStatus | None:
    """The running cluster's status from its Master, or None when none runs or answers."""
    cluster = running(data_dir)
    return None if cluster is None else cluster.status()


def _check_ports(ports: Sequence[int], host: str = HOST) -> None:
    for port in ports:
        if not 0 < port < 65536:
            raise ClusterError(f"port {port} is not a TCP port")
        if processes.port_in_use(port, host):
            raise ClusterError(f"port {port} on {host} is taken: choose another with --port")
    if len(set(ports)) != len(ports):
        raise ClusterError(f"ports must differ: {', '.join(map(str, ports))}")


def start_master(
    data_dir: Path,
    *,
    host: str = HOST,
    port: int | None = None,
    webui_port: int | None = None,
    prefix: Sequence[str] = (),
    daemon_opts: Sequence[str] = (),
    class_archive: bool = True,
    ready_timeout_s: float = 60.0,
) -> processes.ManagedProcess:
    """Start the Master on ``host`` (free ports unless given), through the command ``prefix``
    (e.g. ``ip netns exec NS``, which ``exec``s: the PID recorded is the JVM's); return once
    its ``/json/`` says ALIVE."""
    if not prefix:
        _check_ports([p for p in (port, webui_port) if p is not None], host)
    port = port if port is not None else processes.free_port(host)
    webui_port = webui_port if webui_port is not None else processes.free_port(host)
    if port == webui_port:
        webui_port = processes.free_port(host)
    home = spark_home()
    try:
        return processes.start(
            MASTER,
            [*prefix, *master_argv(spark_class(home), port, webui_port, host)],
            data_dir,
            env=daemon_env(data_dir, home, host, daemon_opts, class_archive),
            info={
                "port": port,
                "webui_port": webui_port,
                "master_url": master_url(port, host),
                "host": host,
            },
            ready=functools.partial(_master_ready, webui_port, host),
            ready_timeout_s=ready_timeout_s,
        )
    except processes.ProcessError as exc:
        raise ClusterError(str(exc)) from exc


def start_worker(
    data_dir: Path,
    index: int,
    master: processes.ManagedProcess,
    *,
    cores: int = 2,
    memory: str = "2g",
    host: str = HOST,
    webui_port: int | None = None,
    prefix: Sequence[str] = (),
    daemon_opts: Sequence[str] = (),
    class_archive: bool = True,
    ready_timeout_s: float = 60.0,
) -> processes.ManagedProcess:
    """Start Worker ``index`` of ``master`` (as :func:`start_master` returned it) on ``host``,
    through ``prefix``; return once the Master lists it ALIVE."""
    webui_port = webui_port if webui_port is not None else processes.free_port(host)
    master_host = str(master.info.get("host", HOST))
    master_webui = int(master.info["webui_port"])
    home = spark_home()
    argv = worker_argv(
        spark_class(home), str(master.info["master_url"]), cores, memory, webui_port, host
    )
    try:
        return processes.start(
            f"{WORKER_PREFIX}{index}",
            [*prefix, *argv],
            data_dir,
            env=daemon_env(data_dir, home, host, daemon_opts, class_archive),
            info={"webui_port": webui_port, "cores": cores, "memory": memory, "host": host},
            ready=functools.partial(_worker_ready, master_webui, webui_port, master_host, host),
            ready_timeout_s=ready_timeout_s,
        )
    except processes.ProcessError as exc:
        raise ClusterError(str(exc)) from exc


def start(
    workers: int = 1,
    cores: int = 2,
    memory: str = "2g",
    *,
    port: int | None = None,
    webui_port: int | None = None,
    data_dir: Path = DEFAULT_DATA_DIR,
    ready_timeout_s: float = 60.0,
    host: str = HOST,
    daemon_opts: Sequence[str] = (),
    class_archive: bool = True,
) -> Cluster:
    """Start a Master and ``workers`` Workers (each ``cores`` cores, ``memory``) on ``host``
    (127.0.0.1 by default; an address of this machine that the driver and executors reach);
    ``daemon_opts`` and ``class_archive`` as :func:`daemon_env` takes them.

    Free ports are chosen unless given; a taken port fails before anything starts. Returns
    once the Master's ``/json/`` lists every Worker ALIVE; on failure everything already
    started is stopped again.
    """
    if workers < 1:
        raise ClusterError(f"a cluster needs at least 1 worker, not {workers}")
    if cores < 1:
        raise ClusterError(f"a worker needs at least 1 core, not {cores}")
    memory = validate_memory(memory)
    existing = running(data_dir)
    if existing is not None:
        raise ClusterError(
            f"a cluster is already running from {data_dir} at {existing.master_url} "
            f"(pid {existing.master_pid}): `streamscale cluster stop` first"
        )
    leftovers = [
        name
        for name in _worker_names(data_dir)
        if (rec := processes.load(data_dir, name)) is not None and rec.alive()
    ]
    if leftovers:
        raise ClusterError(
            f"{', '.join(leftovers)} from {data_dir} still run without their master: "
            "`streamscale cluster stop` first"
        )
    _check_ports([p for p in (port, webui_port) if p is not None], host)
    try:
        master = start_master(
            data_dir,
            host=host,
            port=port,
            webui_port=webui_port,
            daemon_opts=daemon_opts,
            class_archive=class_archive,
            ready_timeout_s=ready_timeout_s,
        )
        for index in range(workers):
            start_worker(
                data_dir,
                index,
                master,
                cores=cores,
                memory=memory,
                host=host,
                daemon_opts=daemon_opts,
                class_archive=class_archive,
                ready_timeout_s=ready_timeout_s,
            )
    except ClusterError:
        stop(data_dir)
        raise
    cluster = running(data_dir)
    if cluster is None:  # pragma: no cover - the master was ready a moment ago
        raise ClusterError(f"the master exited right after start: see {data_dir}")
    return cluster


def _stop_leftovers(pids: Sequence[int], timeout_s: float = 10.0) -> None:
    alive = [p for p in pids if processes.pid_alive(p)]
    deadline = time.monotonic() + 3.0
    while alive and time.monotonic() < deadline:  # they exit by themselves on stdin EOF
        time.sleep(0.1)
        alive = [p for p in alive if processes.pid_alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [p for p in alive if processes.pid_alive(p)]
        if not alive:
            return
    raise ClusterError(f"processes {alive} did not stop")


def stop(data_dir: Path = DEFAULT_DATA_DIR) -> int:
    """Stop the recorded Workers (with their executors), then the Master, by PID.

    Returns the number of processes that were alive and are now stopped.
    """
    stopped = 0
    for name in [*_worker_names(data_dir), MASTER]:
        recorded = processes.load(data_dir, name)
        # Executors are children of a Worker, and PySpark's Python daemons (children of
        # executors) move to their own process group: stopping the Worker's group can leave them.
        alive = recorded is not None and recorded.alive()
        below = processes.descendants(recorded.pid) if recorded is not None and alive else []
        try:
            if processes.stop(data_dir, name):
                stopped += 1
        except processes.ProcessError as exc:
            raise ClusterError(str(exc)) from exc
        _stop_leftovers(below)
    return stopped


@contextlib.contextmanager
def local_cluster(
    data_dir: Path,
    workers: int = 1,
    cores: int = 2,
    memory: str = "2g",
    **kwargs: Any,
) -> Iterator[Cluster]:
    """A cluster for the duration of a ``with`` block (tests, the demo); stopped by PID."""
    cluster = start(workers, cores, memory, data_dir=data_dir, **kwargs)
    try:
        yield cluster
    finally:
        stop(data_dir)
