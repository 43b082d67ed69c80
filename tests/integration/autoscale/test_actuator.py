"""The Spark actuator on a real local standalone cluster: 1 → 2 → 1 executors.

The scenario runs in a child Python process: a process holds one SparkContext, and the
session-scoped ``spark`` fixture (local mode) may already hold it. Run directly, this file
prints the scenario's measurements as JSON:

    .venv/bin/python tests/integration/autoscale/test_actuator.py [DATA_DIR]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from child_run import run_child

from streamscale import cluster, processes

pytestmark = pytest.mark.integration

TIMEOUT_S = 240  # about 50 s on an idle 2-core machine; generous for a loaded one


def _executor_of_task(_rows: Iterator[Any]) -> Iterator[str]:
    """The id of the executor running this task: standalone starts each executor (and so its
    Python workers) in ``<worker dir>/<app id>/<executor id>``."""
    time.sleep(0.5)  # long enough for every free core to receive a task
    yield os.path.basename(os.getcwd())


def _wait_master_cores(local: cluster.Cluster, cores: int, timeout_s: float = 30) -> float:
    """When the Master shows ``cores`` granted to the (only) application."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = local.status(timeout_s=1)
        if status is not None and [a.cores for a in status.apps] == [cores]:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"the master did not show {cores} cores in {timeout_s} s")


def scenario(data_dir: Path) -> dict[str, Any]:
    """Start a 1-worker, 2-core cluster and an app capped at 2 executors of 1 core; scale it
    to 1, to 2 (the new executor must run tasks), to 1 again; stop everything by PID."""
    from streamscale.autoscale.actuator import SparkActuator
    from streamscale.settings import Settings
    from streamscale.spark import session

    out: dict[str, Any] = {}
    t_start = time.monotonic()
    with cluster.local_cluster(data_dir, workers=1, cores=2, memory="2g") as local:
        out["cluster_start_s"] = time.monotonic() - t_start
        settings = Settings(spark_master=local.master_url, executor_memory="512m")
        spark = session(
            settings,
            app_name="streamscale-actuator-test",
            extra_conf={
                **local.app_conf(2, executor_memory="512m"),
                "spark.sql.warehouse.dir": str(data_dir / "warehouse"),
                "spark.driver.extraJavaOptions": cluster.QUICK_JVM,
                "spark.executor.extraJavaOptions": cluster.QUICK_JVM,
            },
        )
        out["session_start_s"] = time.monotonic() - t_start - out["cluster_start_s"]
        sc = spark.sparkContext
        out["driver_jvm_pid"] = sc._gateway.proc.pid  # type: ignore[attr-defined]
        try:
            actuator = SparkActuator(spark)
            out["max_executors"] = actuator.max_executors
            # Dynamic allocation off: the Master grants cores.max / executor.cores at once.
            out["initial_wait_s"] = actuator.wait_for(2, timeout_s=60)
            status = local.status()
            assert status is not None
            out["apps_on_master"] = [(a.name, a.cores) for a in status.apps]

            down0 = actuator.apply(1)
            out["start_down"] = {"ok": down0.ok, "killed": list(down0.killed)}
            actuator.wait_for(1, 10)  # at once: the executor being killed gets no more tasks

            job = sc.parallelize(range(4), 4).mapPartitions(_executor_of_task)
            out["ran_on_one"] = sorted(set(job.collect()))
            before_ids = actuator.executor_ids()

            t0 = time.monotonic()
            up = actuator.apply(2)
            out["up"] = {"ok": up.ok, "direction": up.direction, "target": up.target}
            out["scale_out_s"] = actuator.wait_for(2, 60)
            new_ids = sorted(set(actuator.executor_ids()) - set(before_ids))
            t1 = time.monotonic()
            out["ran_on_two"] = sorted(set(job.collect()))
            out["first_job_on_two_s"] = time.monotonic() - t1
            out["scale_out_to_tasks_s"] = time.monotonic() - t0
            out["new_executor"] = new_ids
            out["tasks_by_executor"] = {e.id: e.total_tasks for e in actuator.executors()}
            out["again_up"] = actuator.apply(2).direction

            t2 = time.monotonic()
            down = actuator.apply(1)
            out["down"] = {"ok": down.ok, "direction": down.direction, "killed": list(down.killed)}
            out["running_right_after_kill"] = actuator.running()
            out["again_down_killed"] = list(actuator.apply(1).killed)
            out["master_frees_core_s"] = _wait_master_cores(local, 1) - t2
            actuator.wait_for(1, 60, include_removing=True)
            out["scale_in_s"] = time.monotonic() - t2
            out["ran_after_scale_in"] = sorted(set(job.collect()))

            master_pids = [local.master_pid, *local.worker_pids]
            out["cluster_pids"] = master_pids + [
                pid for parent in master_pids for pid in processes.descendants(parent)
            ]
        finally:
            spark.stop()
    out["recorded_after_stop"] = sorted(p.name for p in data_dir.glob("*.json"))
    return out


def test_actuator_scales_out_and_in(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    result = run_child(__file__, [str(data_dir)], data_dir, TIMEOUT_S)

    assert result["max_executors"] == 2
    assert result["apps_on_master"] == [["streamscale-actuator-test", 2]]
    assert result["start_down"]["ok"] and len(result["start_down"]["killed"]) == 1
    assert len(result["ran_on_one"]) == 1

    assert result["up"] == {"ok": True, "direction": "up", "target": 2}
    assert len(result["new_executor"]) == 1
    new = result["new_executor"][0]
    assert new in result["ran_on_two"], "the new executor ran no task"
    assert len(result["ran_on_two"]) == 2
    assert result["tasks_by_executor"][new] > 0
    assert result["again_up"] == "none"

    assert result["down"]["ok"] and result["down"]["direction"] == "down"
    assert result["down"]["killed"] == [new], "the idle, newest executor goes first"
    assert result["running_right_after_kill"] == 1, "an executor being killed is not counted"
    assert result["again_down_killed"] == [], "a repeated apply must not kill another"
    assert len(result["ran_after_scale_in"]) == 1
    assert result["recorded_after_stop"] == []

    deadline = time.monotonic() + 10
    pids = [*result["cluster_pids"], result["driver_jvm_pid"]]
    while time.monotonic() < deadline and any(processes.pid_alive(p) for p in pids):
        time.sleep(0.2)
    assert [p for p in pids if processes.pid_alive(p)] == [], "processes left behind"


def test_local_mode_has_nothing_to_scale(spark: Any) -> None:
    from streamscale.autoscale.actuator import SparkActuator

    actuator = SparkActuator(spark)
    assert actuator.running() == 0
    result = actuator.apply(1)
    assert not result.ok
    assert result.error is not None and "did not take the request" in result.error


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "cluster"
    print(json.dumps(scenario(target)))
