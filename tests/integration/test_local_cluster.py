"""The local standalone cluster as real processes: start, status, refusals, stop by PID, CLI.

(Named apart from ``tests/unit/test_cluster.py``: test modules share one namespace in
pytest's default import mode.)
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamscale import class_archives, cluster, processes
from streamscale.cli.main import app

pytestmark = pytest.mark.integration


def _all_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if processes.pid_alive(p)]
        time.sleep(0.1)
    return alive


def test_two_workers_start_report_and_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    local = cluster.start(workers=2, cores=1, memory="1g", data_dir=data_dir)
    try:
        assert local.master_url == f"spark://127.0.0.1:{local.port}"
        assert len(local.worker_pids) == 2
        status = local.status()
        assert status is not None
        assert status.master_url == local.master_url
        assert status.state == "ALIVE"
        assert len(status.alive_workers) == 2
        assert (status.cores, status.memory_mb, status.apps) == (2, 2048, ())
        assert all(w.webui.startswith("http://127.0.0.1:") for w in status.workers)
        assert cluster.status(data_dir) == status
        archive = str(class_archives.archive_path(class_archives.SPARK))
        for pid in (local.master_pid, *local.worker_pids):  # they start on the class archive
            with open(f"/proc/{pid}/maps") as maps:
                assert any(line.rstrip().endswith(archive) for line in maps), pid

        with pytest.raises(cluster.ClusterError, match="already running"):
            cluster.start(data_dir=data_dir)
        other = tmp_path / "other"
        with pytest.raises(cluster.ClusterError, match=f"port {local.port} .* is taken"):
            cluster.start(port=local.port, data_dir=other)
        assert not other.exists()
    finally:
        pids = [local.master_pid, *local.worker_pids]
        assert cluster.stop(data_dir) == 3
    assert _all_gone(pids) == []
    assert cluster.running(data_dir) is None
    assert list(data_dir.glob("*.json")) == []
    assert cluster.stop(data_dir) == 0


def test_cli_start_status_stop(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "cli")
    runner = CliRunner()
    argv = ["cluster", "start", "--workers", "1", "--cores", "1", "--memory", "1g"]
    started = runner.invoke(app, [*argv, "--data-dir", data_dir])
    try:
        assert started.exit_code == 0, started.output
        url = started.output.strip()
        assert url.startswith("spark://127.0.0.1:")
        status = runner.invoke(app, ["cluster", "status", "--data-dir", data_dir])
        assert status.exit_code == 0, status.output
        assert url in status.output
        assert "workers  1 alive of 1" in status.output
        assert "apps     0 running" in status.output
    finally:
        stopped = runner.invoke(app, ["cluster", "stop", "--data-dir", data_dir])
    assert stopped.output.strip() == "cluster stopped (2 processes)"
    after = runner.invoke(app, ["cluster", "status", "--data-dir", data_dir])
    assert after.exit_code == 1
