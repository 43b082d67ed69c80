"""Start the project's Kafka cluster and Spark standalone cluster on hosts of their own
(:mod:`netns`), each process through ``ip netns exec`` on its host, recorded and stopped by
PID; shared by the multi-host tests and ``benchmarks/faults.py --hosts``.

Timeouts set on purpose, so that a partition is detected in seconds (Spark's defaults take
one to two minutes): the Master declares a silent Worker dead after
:data:`WORKER_TIMEOUT_S` (``spark.worker.timeout``, 60 s by default; set on the Workers too,
which send a heartbeat every quarter of it), and the driver an
executor without heartbeat after ``spark.network.timeout`` (:data:`DRIVER_CONF`, 120 s by
default; heartbeats every second, checked every 2 s). Kafka keeps its defaults
(``broker.session.timeout.ms`` 9 s fences a broker cut off from the controller quorum).
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from netns import Network

from streamscale import cluster, processes
from streamscale.kafka import broker

ADDRESSES = {
    "kafka1": 11,
    "kafka2": 12,
    "kafka3": 13,
    "master": 2,
    "worker1": 21,
    "worker2": 22,
    "driver": 30,
}
"""Host name -> last byte of its address in 198.18.0.0/24."""
KAFKA_HOSTS = ("kafka1", "kafka2", "kafka3")
WORKERS = ("worker1", "worker2")
WORKER_CORES = 2
"""Each Worker can hold every executor of the application (two of one core): a host lost,
the other takes them all."""
WORKER_TIMEOUT_S = 8
DAEMON_OPTS = [f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}"]
"""On the Master (how long it waits) and the Workers (a heartbeat every quarter of it)."""
DRIVER_CONF = {
    "spark.network.timeout": "12s",
    "spark.executor.heartbeatInterval": "1s",
    "spark.network.timeoutInterval": "2s",
}
MASTER_PORT, MASTER_UI, WORKER_UI = 7077, 8080, 8081


@dataclass
class Hosts:
    """The running harness."""

    net: Network
    kafka_dir: Path
    spark_dir: Path
    workdir: Path
    bootstrap: str
    master_url: str

    def worker_pid(self, host: str) -> int:
        record = processes.load(self.spark_dir, f"{cluster.WORKER_PREFIX}{WORKERS.index(host)}")
        if record is None:
            raise RuntimeError(f"no worker recorded for {host}")
        return record.pid

    def host_of(self, address: str) -> str:
        """The host name of ``address`` (``198.18.0.21:port`` or ``198.18.0.21``)."""
        ip = address.split(":")[0]
        return next(name for name, a in self.net.hosts.items() if a == ip)

    def alive_workers(self) -> int:
        state = cluster.fetch_state(MASTER_UI, host=self.net.address("master"))
        if state is None:
            return -1
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        """Every process by PID (Workers with their executors, the Master, the brokers)."""
        try:
            cluster.stop(self.spark_dir)
        finally:
            broker.stop(self.kafka_dir, grace_s=5.0)


@contextlib.contextmanager
def hosts_cluster(workdir: Path) -> Iterator[Hosts]:
    """The namespaces, the brokers, the Master and Workers; all gone on exit, even on failure
    (``finally``, and ``atexit`` for an interpreter that exits before)."""
    net = Network()
    kafka_dir, spark_dir = workdir / "kafka", workdir / "spark"
    running: Hosts | None = None

    def teardown() -> None:
        try:
            if running is not None:
                running.stop()
            else:
                with contextlib.suppress(Exception):
                    cluster.stop(spark_dir)
                with contextlib.suppress(Exception):
                    broker.stop(kafka_dir, grace_s=5.0)
        finally:
            net.destroy()

    atexit.register(teardown)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        net.create(ADDRESSES)
        kafka = broker.start(
            None,
            kafka_dir,
            nodes=3,
            host=[net.address(h) for h in KAFKA_HOSTS],
            prefixes={i: net.prefix(h) for i, h in enumerate(KAFKA_HOSTS, start=1)},
        )
        master = cluster.start_master(
            spark_dir,
            host=net.address("master"),
            port=MASTER_PORT,
            webui_port=MASTER_UI,
            prefix=net.prefix("master"),
            daemon_opts=DAEMON_OPTS,
        )
        for index, host in enumerate(WORKERS):
            cluster.start_worker(
                spark_dir,
                index,
                master,
                cores=WORKER_CORES,
                memory="2g",
                host=net.address(host),
                webui_port=WORKER_UI,
                prefix=net.prefix(host),
                daemon_opts=DAEMON_OPTS,
            )
        running = Hosts(
            net,
            kafka_dir,
            spark_dir,
            workdir,
            kafka.bootstrap,
            str(master.info["master_url"]),
        )
        yield running
    finally:
        teardown()
        atexit.unregister(teardown)
