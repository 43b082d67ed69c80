"""``streamscale.attach`` refuses at once a session that cannot grow (issue 23): built as a new
user would, on a real local standalone cluster of one 2-core worker, but without
``spark.executor.cores``, so that the Master gives its one executor both cores and no second
one can ever start. attach reads the Master's report on its own (``spark.master.ui.port``)
and names the setting.

The session runs in a child Python process (a process holds one SparkContext). Run directly:

    .venv/bin/python tests/integration/autoscale/test_attach_refuses.py [DATA_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from child_run import run_child

from streamscale import cluster

pytestmark = pytest.mark.integration

TIMEOUT_S = 180  # about 25 s on an idle 2-core machine


def scenario(data_dir: Path) -> dict[str, Any]:
    """A session without ``spark.executor.cores`` on a 1-worker, 2-core cluster, then attach."""
    from pyspark.sql import SparkSession

    import streamscale

    out: dict[str, Any] = {}
    began = time.monotonic()
    with cluster.local_cluster(data_dir / "cluster", workers=1, cores=2, memory="2g") as local:
        conf = local.app_conf(2, executor_memory="512m")
        del conf["spark.executor.cores"]  # the new user's omission
        conf.update(
            {
                "spark.locality.wait": "0s",
                # Where the Master's web UI listens, as a user with a non-default port sets it.
                "spark.master.ui.port": str(local.webui_port),
                "spark.driver.extraJavaOptions": cluster.QUICK_JVM,
                "spark.executor.extraJavaOptions": cluster.QUICK_JVM,
                "spark.sql.warehouse.dir": str(data_dir / "warehouse"),
            }
        )
        builder = SparkSession.builder.appName("new-user-job")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        out["session_s"] = round(time.monotonic() - began, 1)
        try:
            t0 = time.monotonic()
            try:
                scaler = streamscale.attach(spark, min_executors=1, max_executors=2, metrics_port=0)
            except streamscale.Error as exc:
                out["error"] = {"type": type(exc).__name__, "message": str(exc)}
                out["is_value_error"] = isinstance(exc, ValueError)
            else:
                scaler.stop()
                out["error"] = None
            out["attach_s"] = round(time.monotonic() - t0, 2)
        finally:
            spark.stop()
    return out


def test_attach_refuses_a_standalone_session_without_executor_cores(tmp_path: Path) -> None:
    data_dir = tmp_path / "run"
    result = run_child(__file__, [str(data_dir)], data_dir / "cluster", TIMEOUT_S)

    error = result["error"]
    assert error is not None, "attach accepted a session whose executor count cannot move"
    assert error["type"] == "ConfigError" and result["is_value_error"]
    message = error["message"]
    assert "\n" not in message
    assert "spark.executor.cores is unset" in message
    assert "set spark.executor.cores=1" in message
    assert "all 2 cores of the cluster's only worker" in message, "read from the Master"
    assert result["attach_s"] < 5, "refused at once"


if __name__ == "__main__":
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    print(json.dumps(scenario(data)))
