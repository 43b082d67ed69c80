"""What ``streamscale.attach`` checks of the session it is given, without a session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from streamscale.autoscale.attach import attach, waits_for_locality
from streamscale.cluster import ClusterStatus, WorkerStatus
from streamscale.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "waits"),
    [
        ("3s", True),  # Spark's default
        ("500ms", True),
        ("0.5s", True),
        ("10s", True),
        ("1", True),
        ("0s", False),
        ("0", False),
        ("0ms", False),
        (" 0S ", False),
        ("0.0s", False),
    ],
)
def test_waits_for_locality(value: str, waits: bool) -> None:
    assert waits_for_locality(value) is waits


# --------------------------------------------------------------------------- attach's start check


class FakeConf:
    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings

    def getAll(self) -> list[tuple[str, str]]:
        return list(self.settings.items())

    def get(self, key: str, default: str) -> str:
        return self.settings.get(key, default)


class FakeContext:
    def __init__(self, master: str, settings: dict[str, str]) -> None:
        self.master = master
        self.applicationId = "app-1"
        self._conf = FakeConf(settings)

    def getConf(self) -> FakeConf:
        return self._conf


class FakeSession:
    """Just what attach reads before it starts anything: the master and the settings."""

    def __init__(self, master: str, settings: dict[str, str]) -> None:
        self.sparkContext = FakeContext(master, settings)


ONE_WORKER = ClusterStatus(
    "spark://127.0.0.1:7077",
    "ALIVE",
    (WorkerStatus("w", "ALIVE", "", 2, 0, 2048, 0),),
    (),
    2,
    0,
    2048,
    0,
)


class Reports:
    """A ``master_report`` that records its calls."""

    def __init__(self, status: ClusterStatus | None) -> None:
        self.status = status
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, master: str, settings: Mapping[str, str]) -> ClusterStatus | None:
        self.calls.append((master, dict(settings)))
        return self.status


def test_attach_refuses_a_standalone_session_without_executor_cores() -> None:
    settings = {"spark.master": "spark://127.0.0.1:7077", "spark.cores.max": "2"}
    reports = Reports(ONE_WORKER)
    spark = FakeSession("spark://127.0.0.1:7077", settings)
    with pytest.raises(ConfigError, match=r"spark\.executor\.cores is unset.*all 2 cores") as err:
        attach(spark, min_executors=1, max_executors=2, master_report=reports)
    assert "\n" not in str(err.value)
    assert reports.calls == [("spark://127.0.0.1:7077", settings)]


def test_attach_refuses_dynamic_allocation_before_starting_anything() -> None:
    settings = {"spark.dynamicAllocation.enabled": "true", "spark.executor.cores": "1"}
    reports = Reports(None)
    spark = FakeSession("k8s://https://k8s:6443", settings)
    with pytest.raises(ConfigError, match="dynamic allocation is on"):
        attach(spark, master_report=reports)
    assert reports.calls == [], "only a standalone master is asked"


def test_attach_bounds_the_controller_by_the_reachable_count(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import streamscale.autoscale.attach as attach_module
    import streamscale.lag

    started: dict[str, Any] = {}

    class Monitor:
        tracker = None
        server = None

        def stop(self) -> None:
            started["monitor stopped"] = True

    def fake_start(spark: Any, query: Any, tracker: Any, options: Any, **kw: Any) -> Any:
        started["options"], started["kw"] = options, kw
        return "controller"

    monkeypatch.setattr(streamscale.lag, "start_monitor", lambda *a, **kw: Monitor())
    monkeypatch.setattr(attach_module, "start_autoscaler", fake_start)
    settings = {
        "spark.executor.cores": "1",
        "spark.cores.max": "8",
        "spark.executor.memory": "512m",
        "spark.locality.wait": "0s",
    }
    spark = FakeSession("spark://127.0.0.1:7077", settings)
    with caplog.at_level("WARNING", logger="streamscale.autoscale.attach"):
        scaler = attach(
            spark,
            min_executors=1,
            max_executors=8,
            metrics_port=None,
            commit_offsets=False,
            master_report=Reports(ONE_WORKER),
        )
    assert scaler.controller == "controller"
    assert started["options"].max_executors == 2, "the one 2-core worker holds 2 executors"
    assert started["kw"]["grantable"] == 2
    assert [r.getMessage() for r in caplog.records] == [
        "the cluster's 1 alive worker (2 cores, 2048 MiB) holds 2 executors of 1 core and "
        "512 MiB: add workers or lower max_executors to 2; autoscaling up to 2 executors, "
        "not max_executors=8"
    ]
