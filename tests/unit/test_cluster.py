"""The local cluster's pure parts: command lines, environment, app config, status parsing, and
the CLI's refusal of a taken port (which must happen before any process starts)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamscale import class_archives, cluster
from streamscale.cli.main import app

SPARK_CLASS = Path("/opt/spark/bin/spark-class")


def test_master_argv_binds_loopback() -> None:
    argv = cluster.master_argv(SPARK_CLASS, 7077, 8080)
    assert argv == [
        str(SPARK_CLASS),
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        "7077",
        "--webui-port",
        "8080",
    ]


def test_worker_argv_offers_cores_and_memory() -> None:
    argv = cluster.worker_argv(SPARK_CLASS, "spark://127.0.0.1:7077", 2, "2G", 8081)
    assert argv[1] == "org.apache.spark.deploy.worker.Worker"
    assert argv[2] == "spark://127.0.0.1:7077"
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags == {
        "--host": "127.0.0.1",
        "--cores": "2",
        "--memory": "2g",
        "--webui-port": "8081",
    }


@pytest.mark.parametrize("memory", ["", "2 g", "0g", "-1g", "2gb", "g"])
def test_bad_memory_is_refused(memory: str) -> None:
    with pytest.raises(cluster.ClusterError, match="not a Spark size"):
        cluster.validate_memory(memory)


def test_worker_needs_a_core() -> None:
    with pytest.raises(cluster.ClusterError, match="at least 1 core"):
        cluster.worker_argv(SPARK_CLASS, "spark://127.0.0.1:7077", 0, "1g", 8081)


def test_daemons_bind_to_the_host_given() -> None:
    argv = cluster.master_argv(SPARK_CLASS, 7077, 8080, "198.18.0.2")
    assert argv[argv.index("--host") + 1] == "198.18.0.2"
    argv = cluster.worker_argv(SPARK_CLASS, "spark://198.18.0.2:7077", 1, "1g", 8081, "198.18.0.3")
    assert argv[argv.index("--host") + 1] == "198.18.0.3"
    env = cluster.daemon_env(Path("/tmp/x"), Path("/opt/spark"), "198.18.0.3", ["-Dspark.a=1"])
    assert env["SPARK_LOCAL_IP"] == env["SPARK_LOCAL_HOSTNAME"] == "198.18.0.3"
    assert env["SPARK_DAEMON_JAVA_OPTS"].endswith(" -Dspark.a=1")
    assert cluster.master_url(7077, "198.18.0.2") == "spark://198.18.0.2:7077"


def test_daemon_env_keeps_everything_in_data_dir(tmp_path: Path) -> None:
    env = cluster.daemon_env(tmp_path, Path("/opt/spark"))
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["SPARK_LOG_DIR"].startswith(str(tmp_path.resolve()))
    assert env["SPARK_WORKER_DIR"].startswith(str(tmp_path.resolve()))
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert "spark.master.rest.enabled=false" in env["SPARK_MASTER_OPTS"]


def test_daemon_env_maps_the_class_archive_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's daemons run without the archive (relocated, all of it stays resident)."""
    archive = ["-XX:SharedArchiveFile=/x/spark.jsa", "-Xlog:cds*=off"]
    monkeypatch.setattr(class_archives, "use_options", lambda name: archive)
    with_archive = cluster.daemon_env(tmp_path, Path("/opt/spark"))["SPARK_DAEMON_JAVA_OPTS"]
    assert archive[0] in with_archive.split()
    without = cluster.daemon_env(
        tmp_path, Path("/opt/spark"), daemon_opts=["-Xmn24m"], class_archive=False
    )
    assert without["SPARK_DAEMON_JAVA_OPTS"].split() == [*cluster.QUICK_JVM.split(), "-Xmn24m"]


def test_app_conf_caps_cores_and_turns_dynamic_allocation_off() -> None:
    conf = cluster.app_conf("spark://127.0.0.1:7077", 3, executor_memory="512m", python="/py")
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.cores.max"] == "3"
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert conf["spark.executor.memory"] == "512m"
    assert conf["spark.pyspark.python"] == "/py"
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == "/py"
    # No address: the session decides the driver's (streamscale.network), executors listen
    # where their Worker does.
    assert not {k for k in conf if "driver.host" in k or "bindAddress" in k or "LOCAL_IP" in k}
    assert conf["spark.standalone.executorRemoveDelayOnDisconnection"] == "1s"


def test_app_conf_cores_max_counts_executor_cores() -> None:
    conf = cluster.app_conf("spark://127.0.0.1:7077", 2, executor_cores=2)
    assert conf["spark.cores.max"] == "4"


@pytest.mark.parametrize(("executors", "cores"), [(0, 1), (1, 0)])
def test_app_conf_refuses_empty_apps(executors: int, cores: int) -> None:
    with pytest.raises(cluster.ClusterError):
        cluster.app_conf("spark://127.0.0.1:7077", executors, executor_cores=cores)


MASTER_JSON = {
    "url": "spark://127.0.0.1:7077",
    "workers": [
        {
            "id": "worker-1",
            "host": "127.0.0.1",
            "port": 40813,
            "webuiaddress": "http://127.0.0.1:8081",
            "cores": 2,
            "coresused": 1,
            "coresfree": 1,
            "memory": 2048,
            "memoryused": 512,
            "state": "ALIVE",
        },
        {
            "id": "worker-0",
            "webuiaddress": "http://127.0.0.1:8082",
            "cores": 2,
            "coresused": 0,
            "memory": 2048,
            "memoryused": 0,
            "state": "DEAD",
        },
    ],
    "aliveworkers": 1,
    "cores": 2,
    "coresused": 1,
    "memory": 2048,
    "memoryused": 512,
    "activeapps": [
        {
            "id": "app-1",
            "name": "enrichment",
            "cores": 1,
            "memoryperexecutor": 512,
            "state": "RUNNING",
        }
    ],
    "completedapps": [],
    "status": "ALIVE",
}


def test_status_from_master_json() -> None:
    status = cluster.ClusterStatus.from_json(MASTER_JSON)
    assert status.master_url == "spark://127.0.0.1:7077"
    assert status.state == "ALIVE"
    assert [w.id for w in status.alive_workers] == ["worker-1"]
    assert status.workers[0].cores_used == 1
    assert status.apps == (cluster.AppStatus("app-1", "enrichment", "RUNNING", 1, 512),)
    text = status.describe()
    assert "1 alive of 2" in text
    assert "app-1 'enrichment' RUNNING cores 1" in text


def test_nothing_running_in_an_empty_data_dir(tmp_path: Path) -> None:
    assert cluster.running(tmp_path) is None
    assert cluster.status(tmp_path) is None
    assert cluster.stop(tmp_path) == 0


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_taken_port_fails_before_anything_starts(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(cluster.ClusterError, match=f"port {taken_port} on 127.0.0.1 is taken"):
        cluster.start(port=taken_port, data_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_cli_start_on_taken_port_is_one_clear_line(tmp_path: Path, taken_port: int) -> None:
    result = CliRunner().invoke(
        app, ["cluster", "start", "--port", str(taken_port), "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines == [f"error: port {taken_port} on 127.0.0.1 is taken: choose another with --port"]
    assert list(tmp_path.iterdir()) == []


def test_cli_status_and_stop_without_cluster(tmp_path: Path) -> None:
    runner = CliRunner()
    status = runner.invoke(app, ["cluster", "status", "--data-dir", str(tmp_path)])
    assert status.exit_code == 1
    assert "no cluster running" in status.output
    stop = runner.invoke(app, ["cluster", "stop", "--data-dir", str(tmp_path)])
    assert stop.exit_code == 0
    assert "no cluster running" in stop.output


def test_a_local_clusters_app_conf_keeps_the_driver_on_loopback() -> None:
    """The local convenience keeps the driver on loopback for a loopback cluster: a user's own
    ``SparkSession.builder`` given this conf listens on loopback only."""
    running = cluster.Cluster(7077, 8080, Path("/tmp/x"), 1, ())
    conf = running.app_conf(2)
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"


@pytest.mark.parametrize("group", ["cluster", "broker"])
def test_cli_start_on_a_bad_host_is_one_clear_line(tmp_path: Path, group: str) -> None:
    """``--host`` is checked before anything starts (nothing is written to the data dir)."""
    data_dir = tmp_path / "data"
    result = CliRunner().invoke(
        app, [group, "start", "--host", "10.0.0.5:7077", "--data-dir", str(data_dir)]
    )
    assert result.exit_code == 1
    assert "--host='10.0.0.5:7077' is not an IP address" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not data_dir.exists()
