"""The autoscaler's runtime wiring: what it asks of the cluster manager."""

from __future__ import annotations

import pytest

from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf
from streamscale.errors import ConfigError


def test_elastic_conf_per_cluster_manager() -> None:
    options = AutoscaleOptions(min_executors=1, max_executors=3)
    standalone = elastic_conf("spark://127.0.0.1:7077", options)
    assert standalone["spark.cores.max"] == "3"
    assert standalone["spark.dynamicAllocation.enabled"] == "false"
    assert elastic_conf("k8s://https://api:6443", options)["spark.executor.instances"] == "1"
    with pytest.raises(ConfigError, match="needs a cluster manager"):
        elastic_conf("local[2]", options)


def test_run_autoscale_is_refused_in_local_mode_before_spark_starts() -> None:
    from typer.testing import CliRunner

    from streamscale.cli.main import app

    done = CliRunner().invoke(
        app, ["run", "game-sessions", "--autoscale", "--master", "local[2]"], catch_exceptions=False
    )
    assert done.exit_code == 2
    assert "needs a cluster manager" in done.output
