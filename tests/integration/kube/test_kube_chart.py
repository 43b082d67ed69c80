"""The Helm chart installed for real on the project's control plane (``helm install`` against
kube-apiserver: real admission, RBAC enforced), with the node agent running the pods:

- the driver's service account may do what Spark's Kubernetes backend does in its namespace
  and is refused (403, by the API server) anything else: another namespace, secrets, nodes,
  by ``kubectl auth can-i --as`` and by real requests with the account's own token;
- the driver pod runs ``streamscale run enrichment --autoscale`` (Spark in client mode on
  ``k8s://https://127.0.0.1:PORT``) against an embedded Kafka broker holding a backlog: the
  executor pods Spark's Kubernetes backend creates are listed through the API server before,
  during and after the scale-out and the scale-in, and follow the autoscaler's decision log;
  the executors a scale-in chose have their pods deleted; the output read back from the
  topic holds every input record;
- an executor pod deleted from outside is reported lost with Spark's reason and replaced by
  Spark's pod allocator, and the output still holds every input;
- ``mode: attach`` (one install, after the enrichment's release is uninstalled): a user's
  unmodified word count (a stateful aggregation) under ``streamscale attach`` scales out
  1 → 2 and in 2 → 1 on executor pods; its state partitions run on both pods after the
  scale-out and on the one left after the scale-in (Spark's status store, through the
  driver's REST API); an executor's process SIGKILLed inside its pod is reported by the pod's
  status as a kubelet would (terminated, exit code 137) and lost with Spark's reason, and is
  replaced; the counts in the output topic are exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_io import wait

from streamscale import processes
from streamscale.kafka import broker as embedded
from streamscale.kube import controlplane as cp

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "streamscale"
RELEASE = "orders"
NAMESPACE = "streaming"
PURCHASES = 20_000
MORE = 4_000
"""Purchases sent after an executor pod is deleted from outside: the batches after the loss."""
PRODUCTS = 200
MAX_EXECUTORS = 3
TIMEOUT_S = 900.0  # about 4 min when the machine is not shared; 7+ when it is
EXECUTORS = "spark-role=executor"


def streamscale(*args: str, timeout_s: float = 180.0) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streamscale.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def tool(kube: cp.ControlPlane, name: str, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [str(cp.binary(name)), "--kubeconfig", str(kube.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@contextlib.contextmanager
def installed(
    kube: cp.ControlPlane, work: Path, name: str, values: dict[str, Any]
) -> Iterator[None]:
    """``helm install`` of the chart as ``name`` with ``values``, uninstalled (waited for)
    whatever happens."""
    values_file = work / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    tool(
        kube, "helm", "install", name, str(CHART), "--namespace", NAMESPACE,
        "--create-namespace", "--values", str(values_file),
    )  # fmt: skip
    try:
        yield
    finally:
        tool(kube, "helm", "uninstall", name, "--namespace", NAMESPACE, "--wait", check=False)


@dataclass
class Release:
    """The installed chart and what the test needs to watch it."""

    bootstrap: str
    decision_log: Path
    service_account: str
    samples: list[tuple[float, int]] = field(default_factory=list)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Broker]:
    """A broker of this module's own: ``streamscale run`` uses the pipeline's fixed topic
    names (achats, referentiel, achats-enrichis)."""
    with embedded.embedded_broker(tmp_path_factory.mktemp("kube-kafka")) as running:
        yield running


@pytest.fixture(scope="module")
def release(
    kube: cp.ControlPlane, kafka: embedded.Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    work = tmp_path_factory.mktemp("kube-release")
    bootstrap = kafka.bootstrap
    streamscale("topics", "apply", "--bootstrap", bootstrap, "--partitions", "4")
    streamscale(
        "generate", "referential", "--bootstrap", bootstrap, "--count", str(PRODUCTS),
        "--rate", "5000", "--seed", "1", "--no-progress",
    )  # fmt: skip
    streamscale(
        "generate", "purchases", "--bootstrap", bootstrap, "--count", str(PURCHASES),
        "--rate", "20000", "--products", str(PRODUCTS), "--seed", "2", "--no-progress",
    )  # fmt: skip
    decision_log = work / "decisions.jsonl"
    values = {
        "image": {"repository": "streamscale", "tag": "local"},
        "checkpoint": {"dir": str(work / "checkpoints")},
        "kafka": {"bootstrapServers": bootstrap},
        "autoscale": {
            "minExecutors": 1,
            "maxExecutors": MAX_EXECUTORS,
            "policy": "lag",
            "intervalSeconds": 3,
            "windowSeconds": 10,
        },
        "run": {
            "extraArgs": [
                "--lag-threshold",
                "5000",
                "--max-offsets-per-trigger",
                "2000",
                "--decision-log",
                str(decision_log),
                "--starting-offsets",
                "earliest",
            ]
        },
        "spark": {
            "master": f"k8s://{kube.server}",
            "driverAddress": "podIP",
            "driverPort": processes.free_port(),
            "blockManagerPort": processes.free_port(),
            "driverMemory": "768m",
            "executor": {"memory": "512m", "requestCores": "100m"},
            "deleteGracePeriod": "5s",
            # Every pod here has the host's IP: Spark would read another executor's shuffle
            # files from its local directory, which lives in that pod's mount namespace.
            "conf": {"spark.shuffle.readHostLocalDisk": "false"},
        },
        "metrics": {"port": processes.free_port()},
        "env": [{"name": "STREAMSCALE_METRICS_HOST", "value": "127.0.0.1"}],
        "driver": {
            "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
            "terminationGracePeriodSeconds": 30,
        },
    }
    with installed(kube, work, RELEASE, values):
        yield Release(bootstrap, decision_log, f"{RELEASE}-streamscale")


def token_for(core: Any, account: str, namespace: str) -> str:
    answer = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 600}}
    )
    return str(answer.status.token)


def request_as(kube: cp.ControlPlane, token: str, path: str, method: str = "GET") -> int:
    ctx = ssl.create_default_context(cafile=str(kube.ca_file))
    req = urllib.request.Request(
        kube.server + path, method=method, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_driver_account_may_do_what_spark_needs_and_nothing_else(
    kube: cp.ControlPlane, core: Any, release: Release
) -> None:
    who = f"system:serviceaccount:{NAMESPACE}:{release.service_account}"

    def can(*args: str) -> str:
        return tool(kube, "kubectl", "auth", "can-i", "--as", who, *args, check=False)

    for verb in ("create", "list", "watch", "delete", "get"):
        assert can(verb, "pods", "-n", NAMESPACE) == "yes", verb
    assert can("create", "configmaps", "-n", NAMESPACE) == "yes"
    assert can("list", "pods", "-n", "default") == "no"
    assert can("create", "pods", "-n", "kube-system") == "no"
    assert can("get", "secrets", "-n", NAMESPACE) == "no"
    assert can("list", "nodes") == "no"
    token = token_for(core, release.service_account, NAMESPACE)
    assert request_as(kube, token, f"/api/v1/namespaces/{NAMESPACE}/pods") == 200
    assert request_as(kube, token, "/api/v1/namespaces/default/pods") == 403
    assert request_as(kube, token, f"/api/v1/namespaces/{NAMESPACE}/secrets") == 403
    assert request_as(kube, token, "/api/v1/nodes") == 403
    assert request_as(kube, token, "/api/v1/namespaces/kube-system/configmaps") == 403


def executor_pods(core: Any) -> list[Any]:
    """Executor pods that are not being deleted."""
    return [
        p
        for p in core.list_namespaced_pod(NAMESPACE, label_selector=EXECUTORS).items
        if p.metadata.deletion_timestamp is None and p.status.phase in ("Pending", "Running")
    ]


def decisions(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def topic_keys(
    bootstrap: str, topic: str, expected: int, timeout_s: float
) -> tuple[int, set[bytes]]:
    """(records, distinct keys) of ``topic``, read until ``expected`` distinct keys or
    ``timeout_s``."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kube-check-{os.getpid()}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.subscribe([topic])
    keys: set[bytes] = set()
    count = 0
    deadline = time.monotonic() + timeout_s
    try:
        while len(keys) < expected and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is None:
                    count += 1
                    keys.add(message.key() or b"")
    finally:
        consumer.close()
    return count, keys


def test_executor_pods_follow_the_autoscaler_and_the_output_reconciles(
    kube: cp.ControlPlane, core: Any, release: Release
) -> None:
    started = time.monotonic()
    driver = wait(
        lambda: [
            p
            for p in core.list_namespaced_pod(
                NAMESPACE, label_selector="app.kubernetes.io/component=driver"
            ).items
            if p.status.phase == "Running"
        ],
        "the driver pod Running",
    )[0]
    assert driver.status.pod_ip == "127.0.0.1"
    samples: list[tuple[float, int, int]] = []  # (time, executor pods, decisions so far)
    seen_max = 0
    scaled_in = False
    while time.monotonic() - started < TIMEOUT_S:
        pods = executor_pods(core)
        log = decisions(release.decision_log)
        samples.append((time.monotonic() - started, len(pods), len(log)))
        seen_max = max(seen_max, len(pods))
        applied_down = [d for d in log if d["direction"] == "down" and d["killed"]]
        if seen_max >= MAX_EXECUTORS and applied_down and len(pods) == applied_down[-1]["desired"]:
            scaled_in = True
            break
        time.sleep(1.0)
    log = decisions(release.decision_log)
    ups = [d for d in log if d["direction"] == "up" and d["outcome"] == "applied"]
    downs = [d for d in log if d["direction"] == "down" and d["killed"]]
    print(f"executor pods over time (s, pods, decisions): {samples[::5]}")
    print(f"decisions up: {[(d['running'], d['desired']) for d in ups]}")
    print(f"decisions down: {[(d['running'], d['desired'], d['killed']) for d in downs]}")
    assert ups, "the backlog made no scale-out decision"
    assert max(d["desired"] for d in ups) == MAX_EXECUTORS
    assert seen_max == MAX_EXECUTORS, samples
    assert scaled_in, f"no scale-in to the decided count: {samples[-10:]}"
    # The chosen executors' pods were deleted, not left idle.
    killed = {str(e) for d in downs for e in d["killed"]}
    left = {p.metadata.labels.get("spark-exec-id") for p in executor_pods(core)}
    assert not killed & left, (killed, left)
    # Before the scale-out, one executor pod (minExecutors).
    before = [n for t, n, k in samples if k == 0 and n > 0]
    assert not before or min(before) == 1
    # Every purchase is in the output (at-least-once: duplicates only from retried batches).
    count, keys = topic_keys(release.bootstrap, "achats-enrichis", PURCHASES, timeout_s=180.0)
    assert len(keys) == PURCHASES, f"{PURCHASES - len(keys)} purchases missing from the output"
    assert count >= PURCHASES


def running_executor_pods(core: Any) -> dict[str, str]:
    """Executor id → pod name, of the executor pods Running and not being deleted."""
    return {
        p.metadata.labels["spark-exec-id"]: p.metadata.name
        for p in executor_pods(core)
        if p.status.phase == "Running"
    }


def test_an_executor_pod_deleted_from_outside_is_reported_lost_and_replaced(
    core: Any, release: Release
) -> None:
    """After the scale-in, an executor pod is deleted through the API server (as a node drain
    or an operator does): the autoscaler reports the executor lost with Spark's reason,
    Spark's pod allocator starts a replacement, and the output holds every input record,
    the purchases sent after the loss included.

    The loss's pause is not measured here, as on standalone under the same conditions: with
    the ``lag`` policy and every batch at the batch limit, the capacity fit that a pause is
    measured against never forms."""
    before = wait(lambda: running_executor_pods(core), "a running executor pod")
    victim, pod = min(before.items())
    core.delete_namespaced_pod(pod, NAMESPACE)
    streamscale(
        "generate", "purchases", "--bootstrap", release.bootstrap, "--count", str(MORE),
        "--rate", "2000", "--products", str(PRODUCTS), "--seed", "3", "--no-progress",
    )  # fmt: skip
    replaced = wait(
        lambda: {e: n for e, n in running_executor_pods(core).items() if e not in before},
        "a replacement executor pod",
        timeout_s=300.0,
    )
    lost = wait(
        lambda: [
            (d, reason)
            for d in decisions(release.decision_log)
            for gone, reason in d.get("lost") or ()
            if str(gone) == victim
        ],
        f"executor {victim} reported lost in the decision log",
        timeout_s=300.0,
    )
    print(f"executor {victim} lost ({lost[0][1]}); replaced by {sorted(replaced)}")
    assert lost[0][1], "the loss carries Spark's reason"
    assert not [d for d, _ in lost if d["direction"] == "down" and victim in d["killed"]]
    total = PURCHASES + MORE
    inputs = topic_keys(release.bootstrap, "achats", total, timeout_s=120.0)[1]
    assert len(inputs) == total
    count, keys = topic_keys(release.bootstrap, "achats-enrichis", total, timeout_s=300.0)
    assert keys == inputs, f"{len(inputs - keys)} purchases missing from the output"
    assert count >= total


# --------------------------------------------------------------------------- mode: attach

ATTACHED = "wordcount"
"""The release of the user's word count (``mode: attach``)."""
SOURCE = "lines"
LINES = 24_000
"""The backlog: 12 s of the job's work for one executor, over the lag policy's 10,000 records
an executor: the autoscaler asks for the second."""
SPREAD_LINES = 12_000
"""Sent when the autoscaler asks for the second executor: the backlog lasts until it has
registered (its pod's start, 10-30 s here), so batches run on both and the state spreads;
sent after the registration instead, it came after the scale-in on a loaded machine."""
AFTER_IN_LINES = 4_000
"""Sent after the scale-in: the removed executor's state partitions run on the one left."""
AFTER_KILL_LINES = 4_000
"""Sent after the executor's process is killed: they run on its replacement."""
WORK_S = 0.0005  # per line: 2,000 lines/s an executor at most
ATTACH_TIMEOUT_S = 600.0  # about 2 minutes when the machine is not shared


@dataclass
class Attached:
    """The installed word count and what the test reads of it."""

    bootstrap: str
    output: str
    decision_log: Path
    ui_port: int


@pytest.fixture(scope="module")
def attached(
    kube: cp.ControlPlane, kafka: embedded.Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Attached]:
    """The user's unmodified word count installed with ``mode: attach`` (launcher on, the
    chart's default), after the enrichment's release is uninstalled: its driver and executor
    pods would share the machine's two cores with this one's."""
    from wordcount import JOB, PARTITIONS, fill

    from streamscale.kafka.admin import KafkaAdmin, TopicSpec

    tool(kube, "helm", "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", check=False)
    work = tmp_path_factory.mktemp("kube-attach")
    bootstrap = kafka.bootstrap
    source, output = SOURCE, "counts"
    admin = KafkaAdmin({"bootstrap.servers": bootstrap}, timeout_s=15)
    try:
        admin.apply(TopicSpec(n, PARTITIONS, replication_factor=1) for n in (source, output))
    finally:
        admin.close()
    fill(bootstrap, source, 0, LINES)
    decision_log = work / "decisions.jsonl"
    ui_port, driver_port, block_port, metrics_port = processes.free_ports(4)
    values = {
        "mode": "attach",
        "image": {"repository": "streamscale", "tag": "local"},
        "checkpoint": {"dir": str(work / "checkpoint")},
        "kafka": {"bootstrapServers": bootstrap},
        "attach": {
            "command": ["python", str(JOB)],
            "args": [bootstrap, source, output, str(work / "checkpoint"), str(WORK_S)],
            "extraArgs": ["--decision-log", str(decision_log)],
        },
        "autoscale": {
            "minExecutors": 1,
            "maxExecutors": 2,
            "policy": "lag",
            "intervalSeconds": 2,
            "windowSeconds": 8,
        },
        "spark": {
            "master": f"k8s://{kube.server}",
            "driverAddress": "podIP",
            "driverPort": driver_port,
            "blockManagerPort": block_port,
            "driverMemory": "768m",
            "executor": {"memory": "512m", "requestCores": "100m"},
            "deleteGracePeriod": "5s",
            "conf": {
                "spark.shuffle.readHostLocalDisk": "false",
                # the job's state partitions: Spark's default 200 would make every batch 200
                # tasks on one core
                "spark.sql.shuffle.partitions": 4,
                # Spark's UI (the job leaves it on): its REST API is where the test reads the
                # state partitions' executors and the executors' registration times
                "spark.ui.port": ui_port,
            },
        },
        "metrics": {"port": metrics_port},
        "env": [{"name": "STREAMSCALE_METRICS_HOST", "value": "127.0.0.1"}],
        "driver": {
            "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
            "terminationGracePeriodSeconds": 30,
        },
    }
    with installed(kube, work, ATTACHED, values):
        yield Attached(bootstrap, output, decision_log, ui_port)


def spark_api(port: int, path: str) -> Any:
    """An answer of the driver's Spark REST API (``/api/v1``), None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1{path}", timeout=10) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def spark_time(text: str) -> float:
    """Seconds since the epoch of a time as Spark's REST API writes it (``...T06:40:01.123GMT``)."""
    import datetime as dt

    return dt.datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def state_placements(port: int, app: str) -> list[tuple[float, dict[int, str]]]:
    """(completion time, state partition → executor id) of every completed stage that ran the
    word count's state store, oldest first: from Spark's status store, the stage that reads
    the aggregation's shuffle (the only one here) runs one task per state partition, on the
    executor that loads the partition (the placement :class:`~streamscale.autoscale.
    state_placement.SparkStateReader` reads in the driver)."""
    stages = spark_api(port, f"/applications/{app}/stages?status=complete&details=true") or []
    out = []
    for stage in sorted(stages, key=lambda s: (s["stageId"], s["attemptId"])):
        if stage.get("shuffleReadBytes", 0) <= 0 or stage.get("shuffleWriteBytes", 0) > 0:
            continue
        tasks = [t for t in (stage.get("tasks") or {}).values() if t.get("status") == "SUCCESS"]
        placed = {int(t.get("partitionId", t["index"])): str(t["executorId"]) for t in tasks}
        out.append((spark_time(stage["completionTime"]), placed))
    return out


def wordcount_executors(core: Any) -> dict[str, Any]:
    """Executor id → pod of the word count's executor pods not being deleted."""
    return {
        p.metadata.labels["spark-exec-id"]: p
        for p in executor_pods(core)
        if p.metadata.labels.get("app.kubernetes.io/instance") == ATTACHED
    }


def container_process(kube: cp.ControlPlane, pod: str) -> int:
    """PID of the process the node agent runs for executor pod ``pod``'s container (the
    executor's JVM: the agent's child, the entrypoint having exec'd it)."""
    agent = processes.load(kube.data_dir, cp.NODE_PREFIX + cp.DEFAULT_NODE)
    assert agent is not None and agent.alive()
    children = processes.commands(processes.descendants(agent.pid))
    found = [
        pid
        for pid, (parent, cmd) in children.items()
        if parent == agent.pid and "KubernetesExecutorBackend" in cmd and f"--podName {pod}" in cmd
    ]
    assert len(found) == 1, children
    return found[0]


def test_an_unmodified_job_attached_on_kubernetes_scales_spreads_state_and_survives_a_kill(
    kube: cp.ControlPlane, core: Any, attached: Attached
) -> None:
    """``mode: attach``: the user's word count (Spark's example, no import of streamscale), a
    streaming aggregation with state, runs under ``streamscale attach`` in the driver pod;
    Spark's Kubernetes backend creates its executor pods.

    - the backlog makes the autoscaler ask for a second executor: its pod is created and
      its executor registers; the state partitions then run on both executor pods (Spark's
      status store: the stateful stage's tasks);
    - the drain makes it scale in: the chosen executor's pod is deleted, the state partitions
      it held (the decision log's ``removed``, read from the status store) run on the one
      left, reloaded from the checkpoint;
    - the remaining executor's process is killed with SIGKILL inside its pod (not a pod
      delete): the pod's status says the container terminated with exit code 137 as a kubelet
      reports it, the autoscaler reports the executor lost with Spark's reason (the exit
      code), Spark's pod allocator replaces it;
    - the counts read back from the output topic are exactly those of the input lines.

    Request → registration of the scale-out's executor (the decision's time, Spark's
    ``addTime``) is printed: what a pod start adds on Kubernetes (docs/how-to/kubernetes.md)."""
    from wordcount import counts, expected, fill

    began, began_epoch = time.monotonic(), time.time()
    port, log = attached.ui_port, attached.decision_log

    def applied(direction: str) -> list[dict[str, Any]]:
        return [
            d for d in decisions(log) if d["direction"] == direction and d["outcome"] == "applied"
        ]

    app = wait(
        lambda: (spark_api(port, "/applications") or [{}])[0].get("id"),
        "the job's Spark application",
        timeout_s=ATTACH_TIMEOUT_S,
    )
    up = wait(lambda: applied("up"), "the scale-out decision", timeout_s=ATTACH_TIMEOUT_S)[0]
    assert (up["running"], up["desired"]) == (1, 2), up
    fill(attached.bootstrap, SOURCE, LINES, LINES + SPREAD_LINES)
    pods_out = wait(
        lambda: len(wordcount_executors(core)) == 2 and wordcount_executors(core),
        "two executor pods",
    )

    def registered_executors() -> list[dict[str, Any]] | None:
        found = spark_api(port, f"/applications/{app}/executors") or []
        found = [e for e in found if e["id"] != "driver"]
        return found if len(found) == 2 else None

    executors = wait(registered_executors, "two executors registered")
    added = max(executors, key=lambda e: spark_time(e["addTime"]))
    registered = spark_time(added["addTime"]) - float(up["time"])
    down = wait(lambda: applied("down"), "the scale-in decision", timeout_s=ATTACH_TIMEOUT_S)[0]
    assert (down["running"], down["desired"]) == (2, 1) and len(down["killed"]) == 1, down
    victim = str(down["killed"][0])
    left = wait(
        lambda: len(wordcount_executors(core)) == 1 and wordcount_executors(core),
        "the scale-in's executor pod deleted",
    )
    assert victim not in left and victim in pods_out, (victim, left)
    survivor = next(iter(left))
    fill(attached.bootstrap, SOURCE, LINES + SPREAD_LINES, LINES + SPREAD_LINES + AFTER_IN_LINES)
    so_far = LINES + SPREAD_LINES + AFTER_IN_LINES
    wait(
        lambda: counts(attached.bootstrap, attached.output) == expected(so_far),
        "the counts after the scale-in",
        timeout_s=ATTACH_TIMEOUT_S,
    )
    placements = state_placements(port, app)

    # Spread: after the second executor registered, the state partitions ran on both pods.
    after_out = [p for t, p in placements if t > spark_time(added["addTime"]) and t < down["time"]]
    on_both = [p for p in after_out if set(p.values()) == set(pods_out)]
    assert on_both, f"no stateful batch ran on both executors: {after_out}"
    # Scale-in: the victim's partitions (as the autoscaler read them before the kill) ran on
    # the survivor in the batches after it.
    removed = {str(r[0]): int(r[2]) for r in down["removed"]}
    before_in = [p for t, p in placements if t < down["time"]][-1]
    held = sorted(k for k, e in before_in.items() if e == victim)
    assert held and removed.get(victim, 0) > 0, (removed, before_in)
    after_in = [p for t, p in placements if t > down["time"]]
    assert after_in and all(after_in[-1][k] == survivor for k in held), after_in[-3:]

    # An executor's process killed inside its pod.
    pod = left[survivor].metadata.name
    os.kill(container_process(kube, pod), 9)
    from kubernetes import watch

    terminated = None
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod,
        NAMESPACE,
        field_selector=f"metadata.name={pod}",
        timeout_seconds=60,
    ):
        statuses = event["object"].status.container_statuses or []
        if statuses and statuses[0].state.terminated is not None:
            terminated = (event["object"].status.phase, statuses[0].state.terminated)
            stream.stop()
    assert terminated is not None, f"pod {pod}: no terminated container reported"
    phase, state = terminated
    assert (phase, state.exit_code, state.reason) == ("Failed", 137, "Error"), terminated
    lost = wait(
        lambda: [
            reason
            for d in decisions(log)
            for gone, reason in d.get("lost") or ()
            if str(gone) == survivor
        ],
        f"executor {survivor} reported lost",
        timeout_s=120.0,
    )
    assert "137" in lost[0], lost
    replaced = wait(
        lambda: {
            e: p
            for e, p in wordcount_executors(core).items()
            if e not in (survivor, victim) and p.status.phase == "Running"
        },
        "a replacement executor pod",
        timeout_s=120.0,
    )
    fill(attached.bootstrap, SOURCE, so_far, so_far + AFTER_KILL_LINES)
    total = so_far + AFTER_KILL_LINES
    wait(
        lambda: counts(attached.bootstrap, attached.output) == expected(total),
        "the exact counts after the kill",
        timeout_s=ATTACH_TIMEOUT_S,
    )
    print(
        f"scale-out decided at +{up['time'] - began_epoch:.0f} s; executor {added['id']} "
        f"registered "
        f"{registered:.1f} s after the request; scale-in at +{down['time'] - began_epoch:.0f} s "
        f"(executor {victim}, {len(held)} state partitions); executor {survivor} killed: "
        f"{lost[0]!r}; replaced by {sorted(replaced)}; counts exact after "
        f"{time.monotonic() - began:.0f} s"
    )
