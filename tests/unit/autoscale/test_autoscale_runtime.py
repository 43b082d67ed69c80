"""The autoscaler's runtime wiring: what it asks of the cluster manager."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import pytest

from streamscale.autoscale.actuator import ApplyResult
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


def test_surge_share_reaches_the_policy_and_is_validated() -> None:
    """What a user sets for the ``rate`` policy's surge headroom is what it decides with."""
    assert AutoscaleOptions().policy_config().surge_share == 0.0
    assert AutoscaleOptions(surge_share=0.5).policy_config().surge_share == 0.5
    with pytest.raises(ConfigError, match="--surge-share must be >= 0"):
        AutoscaleOptions(surge_share=-0.1)


def test_reverse_for_slo_reaches_the_policy() -> None:
    """Off unless set; what a user sets is what the policy decides with."""
    assert AutoscaleOptions().policy_config().reverse_for_slo is False
    assert AutoscaleOptions(reverse_for_slo=True).policy_config().reverse_for_slo is True


def test_run_autoscale_is_refused_in_local_mode_before_spark_starts() -> None:
    from typer.testing import CliRunner

    from streamscale.cli.main import app

    done = CliRunner().invoke(
        app, ["run", "game-sessions", "--autoscale", "--master", "local[2]"], catch_exceptions=False
    )
    assert done.exit_code == 2
    assert "needs a cluster manager" in done.output


def test_elastic_conf_on_kubernetes_creates_the_maximum_in_one_round() -> None:
    conf = elastic_conf(
        "k8s://https://kubernetes.default.svc", AutoscaleOptions(min_executors=1, max_executors=12)
    )
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    assert conf["spark.executor.instances"] == "1"
    assert conf["spark.kubernetes.allocation.batch.size"] == "12"


class _CountingActuator:
    """Stands in for the SparkActuator: ``count`` executors run; records every read."""

    count = 0
    reads = 0
    applied: ClassVar[list[int]] = []

    def __init__(self, spark: object) -> None:
        type(self).reads = 0
        type(self).applied = []

    def running(self) -> int:
        type(self).reads += 1
        return self.count

    def apply(self, target: int) -> ApplyResult:
        type(self).applied.append(target)
        return ApplyResult(target, target, self.count)

    def wait_for(self, count: int, timeout_s: float = 60.0) -> float:
        return 0.0


class _Controller:
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.target: int | None = None
        self.started = False

    def start(self) -> None:
        self.started = True


@pytest.mark.parametrize(
    ("master", "conf", "running", "reads_at_most"),
    [
        # Kubernetes started spark.executor.instances=1 pod: nothing more to wait for
        ("k8s://https://kubernetes.default.svc", {"spark.executor.instances": "1"}, 1, 1),
        # standalone granted spark.cores.max=2 executors, both registered
        ("spark://127.0.0.1:7077", {"spark.cores.max": "2"}, 2, 1),
    ],
)
def test_the_start_waits_for_what_the_cluster_manager_starts(
    monkeypatch: pytest.MonkeyPatch,
    master: str,
    conf: dict[str, str],
    running: int,
    reads_at_most: int,
) -> None:
    """On Kubernetes the start does not wait for max_executors (8 here), which never come
    unless asked for: it waits for the executor pods the application starts with."""
    import streamscale.autoscale.actuator as actuator_module
    import streamscale.autoscale.runtime as runtime

    _CountingActuator.count = running
    monkeypatch.setattr(actuator_module, "SparkActuator", _CountingActuator)
    monkeypatch.setattr(runtime, "Controller", _Controller)
    settings = {"spark.master": master, **conf}
    context = SimpleNamespace(
        master=master, getConf=lambda: SimpleNamespace(getAll=lambda: list(settings.items()))
    )
    spark = SimpleNamespace(sparkContext=context)
    options = AutoscaleOptions(min_executors=1, max_executors=8)
    controller = runtime.start_autoscaler(spark, "q", None, options, register_timeout_s=20.0)  # type: ignore[arg-type]
    # one read: no polling (every 0.2 s for 20 s) for executors that were never asked for
    assert _CountingActuator.reads <= reads_at_most
    assert _CountingActuator.applied == [1]
    assert isinstance(controller, _Controller) and controller.started


def _session(master: str, conf: dict[str, str]) -> SimpleNamespace:
    settings = {"spark.master": master, **conf}
    context = SimpleNamespace(
        master=master, getConf=lambda: SimpleNamespace(getAll=lambda: list(settings.items()))
    )
    return SimpleNamespace(sparkContext=context)


def test_run_refuses_a_kubernetes_driver_on_loopback_before_scaling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import streamscale.autoscale.runtime as runtime
    from streamscale.cli.run import autoscaler
    from streamscale.settings import Settings

    started: list[AutoscaleOptions] = []
    monkeypatch.setattr(runtime, "start_autoscaler", lambda *a, **kw: started.append(a[3]))
    hook = autoscaler(AutoscaleOptions(min_executors=1, max_executors=4), Settings())
    spark = _session("k8s://https://k8s:6443", {"spark.driver.host": "127.0.0.1"})
    with pytest.raises(ConfigError, match=r"spark\.driver\.host=127\.0\.0\.1: executor pods"):
        hook(spark, None, "enrichment")  # type: ignore[arg-type]
    assert started == []


def test_run_bounds_the_count_by_the_kubernetes_pod_cap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import streamscale.autoscale.runtime as runtime
    from streamscale.cli.run import autoscaler
    from streamscale.settings import Settings

    started: list[AutoscaleOptions] = []

    def start(*args: object, **kwargs: object) -> SimpleNamespace:
        started.append(args[3])  # type: ignore[arg-type]
        return SimpleNamespace(stop=lambda: None)

    monkeypatch.setattr(runtime, "start_autoscaler", start)
    hook = autoscaler(AutoscaleOptions(min_executors=1, max_executors=8), Settings())
    conf = {"spark.driver.host": "10.4.0.7", "spark.kubernetes.allocation.maximum": "5"}
    hook(_session("k8s://https://kubernetes.default.svc", conf), None, "enrichment")  # type: ignore[arg-type]
    assert [o.max_executors for o in started] == [5]
    out = capsys.readouterr()
    assert "warning: spark.kubernetes.allocation.maximum=5 caps" in out.err
    assert "1-5 executors" in out.out
