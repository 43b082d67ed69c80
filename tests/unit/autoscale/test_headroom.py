"""Whether a session's executor count can move between the autoscaler's bounds: the settings
and the standalone Master's report, without a session or a Master."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.autoscale.headroom import (
    DYNAMIC_ALLOCATION_ON,
    Headroom,
    headroom,
    is_loopback,
    master_urls,
    memory_mb,
    read_master,
    ui_ports,
)
from streamscale.cluster import AppStatus, ClusterStatus, WorkerStatus

MASTER = "spark://127.0.0.1:7077"
APP = "app-1"


def worker(cores: int, used: int = 0, memory: int = 2048, memory_used: int = 0) -> WorkerStatus:
    return WorkerStatus(f"w{cores}-{used}", "ALIVE", "", cores, used, memory, memory_used)


def report(*workers: WorkerStatus, app_cores: int = 0, dead: int = 0) -> ClusterStatus:
    all_workers = (
        *workers,
        *(WorkerStatus(f"d{i}", "DEAD", "", 8, 0, 8192, 0) for i in range(dead)),
    )
    apps = (AppStatus(APP, "user-job", "RUNNING", app_cores, 512),) if app_cores else ()
    return ClusterStatus(
        MASTER,
        "ALIVE",
        all_workers,
        apps,
        sum(w.cores for w in workers),
        sum(w.cores_used for w in workers),
        sum(w.memory_mb for w in workers),
        sum(w.memory_used_mb for w in workers),
    )


def conf(**settings: str) -> dict[str, str]:
    """``executor_cores="1"`` → ``{"spark.executor.cores": "1"}``; ``dyn`` for dynamic alloc."""
    names = {
        "executor_cores": "spark.executor.cores",
        "cores_max": "spark.cores.max",
        "memory": "spark.executor.memory",
        "dyn": "spark.dynamicAllocation.enabled",
    }
    return {names[k]: v for k, v in settings.items()}


ONE_CORE = conf(executor_cores="1", cores_max="8", memory="512m")

# (case, master, conf, min, max, report, reachable, fatal, words in the message or None)
CASES: list[tuple[str, str, dict[str, str], int, int, ClusterStatus | None, Any, bool, Any]] = [
    (
        "the issue: standalone without executor cores, one worker of 2 cores",
        MASTER,
        conf(cores_max="2"),
        1,
        2,
        report(worker(2)),
        None,
        True,
        ["spark.executor.cores is unset", "all 2 cores", "set spark.executor.cores=1"],
    ),
    (
        "without executor cores and no report: still refused",
        MASTER,
        conf(),
        1,
        8,
        None,
        None,
        True,
        ["spark.executor.cores is unset", "spark.cores.max >= 8 for max_executors=8"],
    ),
    (
        "without executor cores on several workers: refused, the count moves by workers",
        MASTER,
        conf(cores_max="8"),
        1,
        2,
        report(worker(4), worker(4)),
        None,
        True,
        ["spark.executor.cores is unset", "at most 2 can start", "whole workers"],
    ),
    (
        "the project's own settings on a 2-core worker, max 2",
        MASTER,
        conf(executor_cores="1", cores_max="2", memory="512m"),
        1,
        2,
        report(worker(2)),
        2,
        False,
        None,
    ),
    ("settings alone, enough", MASTER, ONE_CORE, 1, 8, None, 8, False, None),
    (
        "cores.max below max: warning, reachable 4",
        MASTER,
        conf(executor_cores="1", cores_max="4"),
        1,
        8,
        None,
        4,
        False,
        ["spark.cores.max=4", "allows 4 executors", "set spark.cores.max=8", "up to 4 executors"],
    ),
    (
        "cores.max equal to executor cores: one executor, refused",
        MASTER,
        conf(executor_cores="2", cores_max="2"),
        1,
        4,
        None,
        1,
        True,
        ["allows 1 executor:", "set spark.cores.max=8", "cannot move above min_executors=1"],
    ),
    (
        "cores.max below executor cores: no executor at all",
        MASTER,
        conf(executor_cores="4", cores_max="2"),
        1,
        2,
        None,
        0,
        True,
        ["allows 0 executors", "set spark.cores.max=8"],
    ),
    (
        "executor cores of 2 on a 2-core worker: one executor, suggest 1",
        MASTER,
        conf(executor_cores="2", cores_max="4", memory="512m"),
        1,
        2,
        report(worker(2)),
        1,
        True,
        ["1 alive worker (2 cores", "set spark.executor.cores=1 (and spark.cores.max=2)"],
    ),
    (
        "a worker too small for max: warning, add workers",
        MASTER,
        ONE_CORE,
        1,
        8,
        report(worker(2, memory=8192)),
        2,
        False,
        ["holds 2 executors of 1 core", "add workers or lower max_executors to 2", "up to 2"],
    ),
    (
        "memory binds: lower executor memory",
        MASTER,
        conf(executor_cores="1", cores_max="4", memory="1g"),
        1,
        4,
        report(worker(4, memory=2048)),
        2,
        False,
        ["lower spark.executor.memory"],
    ),
    (
        "dead workers do not count",
        MASTER,
        ONE_CORE,
        1,
        4,
        report(worker(1), dead=3),
        1,
        True,
        ["1 alive worker", "cannot move above min_executors=1"],
    ),
    (
        "no alive worker",
        MASTER,
        ONE_CORE,
        1,
        2,
        report(dead=1),
        0,
        True,
        ["no alive worker"],
    ),
    (
        "two workers together hold max",
        MASTER,
        ONE_CORE,
        1,
        4,
        report(worker(2), worker(2)),
        4,
        False,
        None,
    ),
    (
        "other applications hold cores: warning only, reachable unchanged",
        MASTER,
        ONE_CORE,
        1,
        4,
        report(worker(4, used=3, memory_used=1536)),
        4,
        False,
        ["other applications", "3 of 4 cores in use", "only 1 executor of 1 core"],
    ),
    (
        "the session's own cores count as available",
        MASTER,
        conf(executor_cores="1", cores_max="2", memory="512m"),
        1,
        2,
        report(worker(2, used=2, memory_used=1024), app_cores=2),
        2,
        False,
        None,
    ),
    (
        "min equals max: nothing to move, nothing to say",
        MASTER,
        conf(executor_cores="2", cores_max="2"),
        1,
        1,
        None,
        1,
        False,
        None,
    ),
    (
        "min 2 but only 2 reachable of max 4: refused",
        MASTER,
        conf(executor_cores="1", cores_max="2"),
        2,
        4,
        None,
        2,
        True,
        ["cannot move above min_executors=2"],
    ),
    (
        "dynamic allocation on, standalone",
        MASTER,
        {**ONE_CORE, "spark.dynamicAllocation.enabled": "true"},
        1,
        2,
        None,
        None,
        True,
        [DYNAMIC_ALLOCATION_ON],
    ),
    (
        "dynamic allocation on, Kubernetes",
        "k8s://https://k8s:6443",
        conf(dyn="TRUE"),
        1,
        2,
        None,
        None,
        True,
        ["spark.dynamicAllocation.enabled=false"],
    ),
    ("Kubernetes: no core limit", "k8s://https://k8s:6443", conf(), 1, 8, None, None, False, None),
    (
        "Kubernetes: executor cores must be a number",
        "k8s://https://k8s:6443",
        conf(executor_cores="0"),
        1,
        8,
        None,
        None,
        True,
        ["spark.executor.cores=0 is not a whole number >= 1: set spark.executor.cores=1"],
    ),
    (
        "standalone: cores.max must be a number",
        MASTER,
        conf(executor_cores="1", cores_max="many"),
        1,
        8,
        None,
        None,
        True,
        ["spark.cores.max=many is not", "set spark.cores.max=8 for max_executors=8"],
    ),
    (
        "Kubernetes: a driver on loopback is never reached by its executor pods",
        "k8s://https://k8s:6443",
        {"spark.driver.host": "127.0.0.1"},
        1,
        8,
        None,
        None,
        True,
        ["spark.driver.host=127.0.0.1", "cannot reach", "headless Service"],
    ),
    (
        "Kubernetes on loopback (streamscale kube start): its pods reach a driver on loopback",
        "k8s://https://127.0.0.1:6443",
        {"spark.driver.host": "127.0.0.1"},
        1,
        8,
        None,
        None,
        False,
        None,
    ),
    (
        "Kubernetes: the driver's pod IP",
        "k8s://https://k8s:6443",
        {"spark.driver.host": "10.1.2.3"},
        1,
        8,
        None,
        None,
        False,
        None,
    ),
    (
        "Kubernetes: a pod cap above max_executors is reported, not a bound",
        "k8s://https://k8s:6443",
        {"spark.kubernetes.allocation.maximum": "100"},
        1,
        8,
        None,
        None,
        False,
        ["spark.kubernetes.allocation.maximum=100 caps", "every scale-out creates new ones"],
    ),
    (
        "Kubernetes: a pod cap below max_executors bounds the count",
        "k8s://https://k8s:6443",
        {"spark.kubernetes.allocation.maximum": "4"},
        1,
        8,
        None,
        4,
        False,
        ["unset spark.kubernetes.allocation.maximum"],
    ),
    (
        "Kubernetes: a pod cap at min_executors leaves nothing to scale",
        "k8s://https://k8s:6443",
        {"spark.kubernetes.allocation.maximum": "2"},
        2,
        8,
        None,
        2,
        True,
        ["cannot move above min_executors=2"],
    ),
    (
        "Kubernetes: a pod cap that is not a number",
        "k8s://https://k8s:6443",
        {"spark.kubernetes.allocation.maximum": "lots"},
        1,
        8,
        None,
        None,
        True,
        ["spark.kubernetes.allocation.maximum=lots is not a whole number"],
    ),
    ("YARN: no core limit", "yarn", conf(executor_cores="4"), 1, 8, None, None, False, None),
    (
        "YARN: the Kubernetes rules do not apply",
        "yarn",
        {"spark.driver.host": "localhost", "spark.kubernetes.allocation.maximum": "1"},
        1,
        8,
        None,
        None,
        False,
        None,
    ),
    ("local mode: left to the ScalingError", "local[2]", conf(), 1, 8, None, None, False, None),
    (
        "local mode with dynamic allocation: still left to the ScalingError",
        "local[*]",
        conf(dyn="true"),
        1,
        8,
        None,
        None,
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("master", "settings", "low", "high", "status", "reachable", "fatal", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_headroom(
    master: str,
    settings: dict[str, str],
    low: int,
    high: int,
    status: ClusterStatus | None,
    reachable: int | None,
    fatal: bool,
    words: list[str] | None,
) -> None:
    room = headroom(master, settings, low, high, status, app_id=APP)
    assert room.fatal is fatal
    if reachable is not None:
        assert room.reachable == reachable
    if words is None:
        assert room.message is None
    else:
        assert room.message is not None and "\n" not in room.message
        for word in words:
            assert word in room.message


def test_bound_is_the_reachable_count_when_lower() -> None:
    assert Headroom(reachable=3).bound(8) == 3
    assert Headroom(reachable=10).bound(8) == 8
    assert Headroom().bound(8) == 8


def test_available_counts_free_slots_and_the_sessions_own() -> None:
    status = report(worker(4, used=3, memory_used=1024), worker(2), app_cores=2)
    room = headroom(MASTER, ONE_CORE, 1, 8, status, app_id=APP)
    assert room.available == 2 + 1 + 2  # its own 2, one free core, the idle worker's 2


@pytest.mark.parametrize(
    ("value", "mb"),
    [("512m", 512), ("1g", 1024), ("2G", 2048), ("1024", 1024), ("2048k", 2), ("1gb", 1024)],
)
def test_memory_mb(value: str, mb: int) -> None:
    assert memory_mb(value) == mb


def test_memory_mb_unreadable() -> None:
    assert memory_mb("lots") is None


# --------------------------------------------------------------------------- properties

_ADVICE = re.compile(r"(?:set|and) (spark\.[a-z.]+)(?:=| >= )(\d+)")


def _follow(message: str, settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with every ``set key=value`` of ``message`` applied."""
    return {**settings, **dict(_ADVICE.findall(message))}


workers_st = st.lists(
    st.builds(
        worker,
        cores=st.integers(1, 8),
        used=st.integers(0, 0),
        memory=st.sampled_from([1024, 2048, 4096, 8192]),
    ),
    max_size=4,
)


@given(
    executor_cores=st.none() | st.integers(1, 4),
    cores_max=st.none() | st.integers(1, 32),
    memory=st.sampled_from(["512m", "1g", "2g"]),
    low=st.integers(1, 4),
    extra=st.integers(0, 6),
    workers=st.none() | workers_st,
)
def test_headroom_properties(
    executor_cores: int | None,
    cores_max: int | None,
    memory: str,
    low: int,
    extra: int,
    workers: list[WorkerStatus] | None,
) -> None:
    high = low + extra
    settings = {"spark.executor.memory": memory}
    if executor_cores is not None:
        settings["spark.executor.cores"] = str(executor_cores)
    if cores_max is not None:
        settings["spark.cores.max"] = str(cores_max)
    status = None if workers is None else report(*workers)
    room = headroom(MASTER, settings, low, high, status)

    assert room.message is None or "\n" not in room.message, "one line"
    if room.fatal or room.bound(high) < high:
        assert room.message is not None, "a limit is always explained"
    if not room.fatal:
        assert low <= room.bound(high) <= high
        assert executor_cores is not None
    if executor_cores is None:
        assert room.fatal
    elif room.fatal:
        assert room.reachable is not None and room.reachable <= low and room.reachable < high

    # A bigger cluster or a higher spark.cores.max never lowers the reachable count.
    if room.reachable is not None:
        more = report(*(workers or []), worker(4)) if workers is not None else None
        bigger = headroom(MASTER, settings, low, high, more).reachable
        assert bigger is None or bigger >= room.reachable

    # Following the advice works when the cluster itself is big enough (1 core, 1 GiB each).
    if room.message is not None and workers is not None:
        roomy = sum(min(w.cores, w.memory_mb // 2048) for w in workers) >= high
        if roomy:
            fixed = _follow(room.message, settings)
            assert headroom(MASTER, fixed, low, high, status).bound(high) == high, room.message


# --------------------------------------------------------------------------- the Master's report

MASTER_JSON = {
    "url": MASTER,
    "status": "ALIVE",
    "workers": [
        {"id": "w1", "state": "ALIVE", "cores": 2, "coresused": 1, "memory": 2048},
        {"id": "w2", "state": "DEAD", "cores": 4, "memory": 4096},
    ],
    "activeapps": [{"id": APP, "name": "user-job", "state": "RUNNING", "cores": 1}],
    "cores": 2,
    "coresused": 1,
    "memory": 2048,
}


class FakeWeb:
    """Answers ``get_json`` from a table of URL → document (or exception); records calls."""

    def __init__(self, pages: Mapping[str, Any]) -> None:
        self.pages = dict(pages)
        self.asked: list[str] = []

    def __call__(self, url: str, timeout_s: float) -> Any:
        assert 0 < timeout_s <= 2.0
        self.asked.append(url)
        page = self.pages.get(url, ConnectionRefusedError(111, "refused"))
        if isinstance(page, BaseException):
            raise page
        return page


def test_read_master_finds_the_master_on_its_default_port() -> None:
    web = FakeWeb({"http://127.0.0.1:8080/json/": MASTER_JSON})
    status = read_master(MASTER, {}, get_json=web, local_port=lambda _: None)
    assert status is not None and status.master_url == MASTER
    assert [w.cores for w in status.alive_workers] == [2]
    assert web.asked == ["http://127.0.0.1:8080/json/"]


def test_read_master_tries_the_configured_and_recorded_ports_first() -> None:
    web = FakeWeb({"http://127.0.0.1:9999/json/": MASTER_JSON})
    settings = {"spark.master.ui.port": "4444"}
    status = read_master(MASTER, settings, get_json=web, local_port=lambda _: 9999)
    assert status is not None
    assert web.asked == ["http://127.0.0.1:4444/json/", "http://127.0.0.1:9999/json/"]


@pytest.mark.parametrize(
    "page",
    [
        {**MASTER_JSON, "url": "spark://127.0.0.1:7078"},  # another master
        {**MASTER_JSON, "status": "STANDBY"},
        ["not", "a", "master"],
        {"url": MASTER, "workers": [{"cores": 2}]},  # unreadable workers
        TimeoutError("timed out"),
        ValueError("not JSON"),
    ],
)
def test_read_master_skips_what_is_not_this_alive_master(page: Any) -> None:
    web = FakeWeb({"http://127.0.0.1:8080/json/": page})
    assert read_master(MASTER, {}, get_json=web, local_port=lambda _: None) is None


def test_read_master_asks_only_the_masters_own_hosts() -> None:
    master = "spark://m1:7077,m2:7077"
    page = {**MASTER_JSON, "url": "spark://m2:7077"}
    web = FakeWeb({"http://m2:8080/json/": page})
    status = read_master(master, {}, get_json=web, local_port=lambda _: None)
    assert status is not None
    assert {u.split("/")[2].split(":")[0] for u in web.asked} == {"m1", "m2"}


def test_read_master_stops_at_its_deadline() -> None:
    web = FakeWeb({})
    assert read_master(MASTER, {}, timeout_s=0.0, get_json=web, local_port=lambda _: None) is None
    assert web.asked == []


def test_ui_ports_order_and_dedup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_MASTER_WEBUI_PORT", "8080")
    assert ui_ports({"spark.master.ui.port": "8081"}, MASTER, 40000) == [8081, 8080, 40000]
    monkeypatch.delenv("SPARK_MASTER_WEBUI_PORT")
    assert ui_ports({"spark.master.ui.port": "x"}, MASTER) == [8080]


def test_master_urls() -> None:
    assert master_urls("spark://a:1") == ["spark://a:1"]
    assert master_urls("spark://a:1, b:2") == ["spark://a:1", "spark://b:2"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        (" localhost ", True),
        ("LOCALHOST", True),
        ("::1", True),
        ("[::1]", True),
        ("", False),
        ("10.0.0.7", False),
        ("streamscale-driver.data.svc", False),
        ("127.example.com", False),
        ("1270.0.0.1", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
