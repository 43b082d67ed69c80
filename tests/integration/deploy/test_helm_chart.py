"""The Helm chart in deploy/helm/streamscale, checked offline: rendered by the real ``helm``
binary (built by ``make setup``), every Kubernetes object validated against the Kubernetes
schemas of kubernetes-validate (strict: unknown fields refused) at the oldest and newest
versions the chart supports, the Prometheus Operator objects against the operator's CRD models
(cloudcoil-models-prometheus-operator, generated from its CRDs' OpenAPI schemas), the objects'
wiring (selectors, ports, the driver's address, the service account) checked against each
other and against the project's code (the CLI's options, the settings, the autoscaler's own
start check), and the alerts checked and unit-tested by ``promtool`` on series named as the
driver's ``/metrics`` names them.

No API server runs here: nothing is applied to a cluster.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamscale.processes import free_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "streamscale"
HELM = ROOT / "build" / "bin" / "helm"
RELEASE = "orders"
NAMESPACE = "data"
KUBE_VERSIONS = (
    "1.29.0",
    "1.37.0",
)  # the chart's kubeVersion floor, and kubernetes-validate's newest
IMAGE = "registry.example/streamscale"
REQUIRED = {"image": {"repository": IMAGE}, "checkpoint": {"dir": "s3a://bucket/streamscale"}}
FULL = {
    "image": {"repository": IMAGE, "tag": "0.1.0"},
    "imagePullSecrets": [{"name": "regcred"}],
    "checkpoint": {
        "dir": "/var/lib/streamscale/checkpoints/enrichment",
        "claimName": "streamscale-checkpoints",
    },
    "kafka": {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092"},
    "autoscale": {"minExecutors": 2, "maxExecutors": 12, "policy": "lag"},
    "run": {"pipeline": "game-sessions", "extraArgs": ["--max-offsets-per-trigger", "250000"]},
    "envFrom": [{"secretRef": {"name": "kafka-credentials"}}],
    "env": [
        {"name": "STREAMSCALE_SECURITY_PROTOCOL", "value": "SASL_SSL"},
        {"name": "STREAMSCALE_SASL_MECHANISM", "value": "SCRAM-SHA-512"},
    ],
    "spark": {
        "executor": {"memory": "2g", "requestCores": "500m", "limitCores": "1"},
        "conf": {"spark.sql.shuffle.partitions": 8},
    },
    "monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
}
ATTACH = {
    **REQUIRED,
    "mode": "attach",
    "attach": {"command": ["python", "/opt/job/job.py"], "args": ["--topic", "orders"]},
    "monitoring": {"enabled": True, "kind": "PodMonitor"},
    "prometheusRule": {"enabled": True},
}


class RenderError(Exception):
    """``helm template`` refused the values; the message is its error output."""


Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="module")
def helm() -> Path:
    if not HELM.is_file():
        pytest.fail(f"{HELM} is missing: `make setup` builds it from the Go module proxy")
    return HELM


@pytest.fixture(scope="module")
def render(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """``render(values, kube_version=...)``: the chart's objects, as ``helm template`` (a real
    process, bounded by a timeout) renders them for release ``orders`` in namespace ``data``."""
    folder = tmp_path_factory.mktemp("values")
    cache: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def run(values: dict[str, Any], kube_version: str = KUBE_VERSIONS[-1]) -> list[dict[str, Any]]:
        text = yaml.safe_dump(values, sort_keys=True)
        key = (text, kube_version)
        if key not in cache:
            path = folder / f"values-{len(cache)}.yaml"
            path.write_text(text)
            done = subprocess.run(
                [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                 "--kube-version", kube_version, "--values", str(path)],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise RenderError(done.stderr.strip())
            cache[key] = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
        return cache[key]

    return run


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} found"
    return found[0]


def spark_defaults(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The ``spark-defaults.conf`` the driver reads, as Spark parses it (key, whitespace,
    value)."""
    text = one(objects, "ConfigMap")["data"]["spark-defaults.conf"]
    conf = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.strip().split(None, 1)
            conf[key] = value
    return conf


def driver_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["driver"]
    return dict(containers[0])


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


CORE_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment"}
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


# --------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("values", [REQUIRED, FULL, ATTACH], ids=["required", "full", "attach"])
def test_helm_lint_strict_passes(helm: Path, values: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), "--namespace", NAMESPACE,
         "--values", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", [REQUIRED, FULL, ATTACH], ids=["required", "full", "attach"])
def test_every_object_validates_against_the_kubernetes_schemas(
    render: Render, values: dict[str, Any], kube_version: str
) -> None:
    import kubernetes_validate

    objects = render(values, kube_version)
    kinds = {o["kind"] for o in objects}
    assert kinds >= CORE_KINDS, kinds
    assert kinds <= CORE_KINDS | OPERATOR_KINDS, kinds
    checked = 0
    for obj in objects:
        if obj["kind"] in OPERATOR_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {path}: {exc.message}")
        assert obj["metadata"]["namespace"] == NAMESPACE
        checked += 1
    assert checked == sum(1 for o in objects if o["kind"] in CORE_KINDS)


def _unknown_fields(given: Any, kept: Any, path: str = "") -> list[str]:
    """Keys of ``given`` that the model's dump ``kept`` lost: fields the CRD does not have."""
    if isinstance(given, dict):
        lost = [f"{path}/{k}" for k in given if not isinstance(kept, dict) or k not in kept]
        return lost + [
            found
            for k, v in given.items()
            if isinstance(kept, dict) and k in kept
            for found in _unknown_fields(v, kept[k], f"{path}/{k}")
        ]
    if isinstance(given, list) and isinstance(kept, list):
        return [f for g, k in zip(given, kept, strict=True) for f in _unknown_fields(g, k, path)]
    return []


@pytest.mark.parametrize("values", [FULL, ATTACH], ids=["servicemonitor", "podmonitor"])
def test_the_prometheus_operator_objects_validate_against_its_crds(
    render: Render, values: dict[str, Any]
) -> None:
    from cloudcoil.models.prometheus_operator import v1

    objects = render(values)
    models = {
        "ServiceMonitor": v1.ServiceMonitor,
        "PodMonitor": v1.PodMonitor,
        "PrometheusRule": v1.PrometheusRule,
    }
    operator = [o for o in objects if o["kind"] in OPERATOR_KINDS]
    assert {o["kind"] for o in operator} in (
        {"ServiceMonitor", "PrometheusRule"},
        {"PodMonitor", "PrometheusRule"},
    )
    for obj in operator:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        model = models[obj["kind"]].model_validate(obj)  # types, enums, patterns of the CRD
        kept = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
        assert _unknown_fields(obj, kept) == [], f"{obj['kind']}: fields the CRD lacks"


def test_the_crd_check_refuses_what_the_operator_would(render: Render) -> None:
    """The CRD models do catch a bad object (so the check above is not vacuous)."""
    from cloudcoil.models.prometheus_operator import v1
    from pydantic import ValidationError

    rule = one(render(FULL), "PrometheusRule")
    bad = yaml.safe_load(yaml.safe_dump(rule))
    bad["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    with pytest.raises(ValidationError, match="for"):
        v1.PrometheusRule.model_validate(bad)
    monitor = one(render(FULL), "ServiceMonitor")
    typo = yaml.safe_load(yaml.safe_dump(monitor))
    typo["spec"]["endpoints"][0]["intervall"] = "15s"
    kept = v1.ServiceMonitor.model_validate(typo).model_dump(
        by_alias=True, exclude_unset=True, mode="json"
    )
    assert _unknown_fields(typo, kept) == ["/spec/endpoints/intervall"]


# --------------------------------------------------------------------------- wiring


@pytest.mark.parametrize("values", [REQUIRED, FULL, ATTACH], ids=["required", "full", "attach"])
def test_executors_reach_the_driver_through_its_headless_service(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    conf = spark_defaults(objects)
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert matches(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    headless = one(objects, "Service", f"{RELEASE}-streamscale-driver")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert matches(headless["spec"]["selector"], pod_labels)
    assert conf["spark.driver.host"] == f"{RELEASE}-streamscale-driver.{NAMESPACE}.svc"
    assert conf["spark.driver.bindAddress"] == "0.0.0.0"
    container = driver_container(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_ports = {p["targetPort"]: p["port"] for p in headless["spec"]["ports"]}
    assert service_ports == {
        "driver-rpc": ports["driver-rpc"],
        "blockmanager": ports["blockmanager"],
    }
    assert int(conf["spark.driver.port"]) == ports["driver-rpc"]
    assert int(conf["spark.driver.blockManager.port"]) == ports["blockmanager"]
    # executor pods carry the release's labels, but never the driver's component label:
    # no Service of the chart selects them
    executor_labels = {
        k.removeprefix("spark.kubernetes.executor.label."): v
        for k, v in conf.items()
        if k.startswith("spark.kubernetes.executor.label.")
    }
    assert executor_labels["app.kubernetes.io/component"] == "executor"
    for service in by_kind(objects)["Service"]:
        assert not matches(service["spec"]["selector"], executor_labels)
    env = env_of(container)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "spark.kubernetes.driver.pod.name=$(POD_NAME)" in env["PYSPARK_SUBMIT_ARGS"]
    assert env["PYSPARK_SUBMIT_ARGS"].endswith("pyspark-shell")
    assert env["SPARK_CONF_DIR"] in {m["mountPath"] for m in container["volumeMounts"]}
    assert env["STREAMSCALE_DRIVER_HOST"] == conf["spark.driver.host"]


def test_executors_may_reach_the_driver_at_its_pod_ip(render: Render) -> None:
    """``spark.driverAddress=podIP`` (a cluster whose DNS does not resolve the Service):
    the driver advertises its pod's IP, declared before the variable that expands it."""
    objects = render({**REQUIRED, "spark": {"driverAddress": "podIP"}})
    assert "spark.driver.host" not in spark_defaults(objects)
    container = driver_container(objects)
    names = [e["name"] for e in container["env"]]
    env = env_of(container)
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["STREAMSCALE_DRIVER_HOST"] == "$(POD_IP)"
    assert names.index("POD_IP") < names.index("STREAMSCALE_DRIVER_HOST")


@pytest.mark.parametrize("values", [REQUIRED, FULL], ids=["required", "full"])
def test_the_service_account_may_do_what_sparks_kubernetes_backend_does(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    account = one(objects, "ServiceAccount")["metadata"]["name"]
    pod_spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == account
    role = one(objects, "Role")
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    granted = {
        (resource, verb)
        for rule in role["rules"]
        if rule["apiGroups"] == [""]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        # the driver's own pod (executors' owner), executor pods created, watched, labelled
        # with their id, and deleted (scale-in kills after the grace period, excess pending)
        *(("pods", v) for v in ("get", "list", "watch", "create", "patch", "delete")),
        ("configmaps", "create"),  # the executors' configuration, at start
        ("configmaps", "delete"),  # and at stop
        ("services", "delete"),  # spark.kubernetes.driver.service.deleteOnTermination
        *(("persistentvolumeclaims", v) for v in ("list", "create", "delete")),
    }
    assert needed <= granted, needed - granted
    assert all(rule["apiGroups"] == [""] for rule in role["rules"]), "core objects only"


def test_run_mode_runs_the_cli_with_options_it_has(render: Render) -> None:
    import typer

    from streamscale.cli.main import app

    container = driver_container(render(FULL))
    assert container["command"] == ["streamscale"]
    args = container["args"]
    assert args[:3] == ["run", "game-sessions", "--autoscale"]
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    options = {opt for param in run.params for opt in param.opts}
    used = [a for a in args if a.startswith("--")]
    assert set(used) <= options, set(used) - options
    pairs = dict(zip(args[3::2], args[4::2], strict=False))
    assert pairs["--min-executors"] == "2" and pairs["--max-executors"] == "12"
    assert pairs["--policy"] == "lag"
    assert pairs["--max-offsets-per-trigger"] == "250000"


def test_attach_mode_runs_the_users_job(render: Render) -> None:
    """By default the job runs unmodified under ``streamscale attach`` with the chart's
    master, bounds and metrics port; ``attach.launcher: false`` runs a job that calls
    ``streamscale.attach`` itself as it is."""
    container = driver_container(render(ATTACH))
    assert container["command"] == ["streamscale"]
    args = container["args"]
    assert args[0] == "attach"
    split = args.index("--")
    assert args[split + 1 :] == ["python", "/opt/job/job.py", "--topic", "orders"]
    pairs = dict(zip(args[1:split:2], args[2:split:2], strict=True))
    assert pairs["--master"] == "k8s://https://kubernetes.default.svc:443"
    assert pairs["--max-executors"] == "8" and pairs["--metrics-port"] == "9464"
    extra = {**ATTACH, "attach": {**ATTACH["attach"], "extraArgs": ["--decision-log", "/d"]}}
    assert driver_container(render(extra))["args"][split : split + 3] == [
        "--decision-log", "/d", "--",
    ]  # fmt: skip
    own = {**ATTACH, "attach": {**ATTACH["attach"], "launcher": False}}
    container = driver_container(render(own))
    assert container["command"] == ["python", "/opt/job/job.py"]
    assert container["args"] == ["--topic", "orders"]


@pytest.mark.parametrize("values", [REQUIRED, FULL], ids=["required", "full"])
def test_the_driver_settings_are_streamscale_settings(
    render: Render, values: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every STREAMSCALE_* variable the chart sets is a setting of the project's one settings
    model, and together they validate; the session's memory settings agree with
    spark-defaults (the session's win)."""
    from streamscale.settings import Settings

    objects = render(values)
    env = env_of(driver_container(objects))
    ours = {k: v for k, v in env.items() if k.startswith("STREAMSCALE_") and isinstance(v, str)}
    fields = set(Settings.model_fields)
    unknown = {k for k in ours if k.removeprefix("STREAMSCALE_").lower() not in fields}
    # STREAMSCALE_DRIVER_HOST is issue 24's driver-address setting, added on another branch;
    # spark.driver.host in spark-defaults carries the same address meanwhile.
    assert unknown <= {"STREAMSCALE_DRIVER_HOST"}, unknown
    for name, value in ours.items():
        if name not in unknown:
            monkeypatch.setenv(name, value)
    container = driver_container(objects)
    if {"secretRef": {"name": "kafka-credentials"}} in container.get("envFrom", []):
        # what that Secret holds in a cluster
        monkeypatch.setenv("STREAMSCALE_SASL_USERNAME", "orders")
        monkeypatch.setenv("STREAMSCALE_SASL_PASSWORD", "secret")
    settings = Settings()
    assert settings.spark_master.startswith("k8s://")
    assert settings.metrics_host == "0.0.0.0"
    conf = spark_defaults(objects)
    assert settings.spark_conf()["spark.executor.memory"] == conf["spark.executor.memory"]
    assert conf["spark.master"] == settings.spark_master


@pytest.mark.parametrize("values", [REQUIRED, FULL], ids=["required", "full"])
def test_the_autoscaler_would_accept_the_session_the_chart_configures(
    render: Render, values: dict[str, Any]
) -> None:
    """The session's configuration (spark-defaults, then what ``run --autoscale`` adds on a
    k8s:// master) passes the autoscaler's start check (no loopback driver, nothing that
    stops the count from moving) and starts what the autoscaler's start waits for."""
    from streamscale.autoscale.actuator import initial_executors
    from streamscale.autoscale.headroom import headroom
    from streamscale.autoscale.runtime import AutoscaleOptions, elastic_conf

    objects = render(values)
    conf = spark_defaults(objects)
    args = driver_container(objects)["args"]
    pairs = dict(zip(args[3::2], args[4::2], strict=False))
    low, high = int(pairs["--min-executors"]), int(pairs["--max-executors"])
    options = AutoscaleOptions(min_executors=low, max_executors=high)
    session = {**conf, **elastic_conf(conf["spark.master"], options)}
    room = headroom(conf["spark.master"], session, low, high)
    assert not room.fatal and room.message is None, room.message
    assert room.bound(high) == high
    assert initial_executors(session, high) == low
    assert session["spark.kubernetes.allocation.batch.size"] == str(high)


@pytest.mark.parametrize("values", [REQUIRED, FULL], ids=["required", "full"])
def test_checkpoints_are_where_every_executor_reaches_them(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    conf = spark_defaults(objects)
    container = driver_container(objects)
    checkpoint = env_of(container)["STREAMSCALE_CHECKPOINT_DIR"]
    claim = values["checkpoint"].get("claimName")
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoints"
    if claim is None:
        assert checkpoint.startswith("s3a://")
        assert not any(k.startswith(volume) for k in conf)
        return
    mount = values["checkpoint"].get("mountPath", "/var/lib/streamscale/checkpoints")
    assert checkpoint.startswith(mount + "/")
    assert conf[f"{volume}.options.claimName"] == claim
    assert conf[f"{volume}.mount.path"] == mount
    pod_spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == claim
    assert {"name": "checkpoints", "mountPath": mount} in container["volumeMounts"]


def test_the_full_values_reach_spark(render: Render) -> None:
    conf = spark_defaults(render(FULL))
    assert conf["spark.kubernetes.container.image"] == f"{IMAGE}:0.1.0"
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "regcred"
    assert conf["spark.kubernetes.executor.request.cores"] == "500m"
    assert conf["spark.kubernetes.executor.limit.cores"] == "1"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    # Spark's own prefix is unique per application: a restarted driver's executor pods (ids
    # from 1 again) never collide with the pods of the one before, still terminating
    assert "spark.kubernetes.executor.podNamePrefix" not in conf


@pytest.mark.parametrize("values", [FULL, ATTACH], ids=["servicemonitor", "podmonitor"])
def test_prometheus_scrapes_the_drivers_metrics_port(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render(values)
    container = driver_container(objects)
    metrics_port = next(p for p in container["ports"] if p["name"] == "metrics")
    assert metrics_port["containerPort"] == 9464
    assert env_of(container)["STREAMSCALE_METRICS_PORT"] == "9464"
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(objects, "Service", f"{RELEASE}-streamscale-metrics")
    assert matches(service["spec"]["selector"], pod_labels)
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    if "ServiceMonitor" in by_kind(objects):
        monitor = one(objects, "ServiceMonitor")
        assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        assert not matches(
            monitor["spec"]["selector"]["matchLabels"],
            one(objects, "Service", f"{RELEASE}-streamscale-driver")["metadata"]["labels"],
        )
        endpoints = monitor["spec"]["endpoints"]
        assert {e["port"] for e in endpoints} == {service["spec"]["ports"][0]["name"]}
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    else:
        monitor = one(objects, "PodMonitor")
        assert matches(monitor["spec"]["selector"]["matchLabels"], pod_labels)
        assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} == {"metrics"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_monitoring_objects_are_optional(render: Render) -> None:
    assert not {o["kind"] for o in render(REQUIRED)} & OPERATOR_KINDS


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"checkpoint": {"dir": "s3a://b/c"}}, "image.repository is required"),
        ({"image": {"repository": IMAGE}}, "checkpoint.dir is required"),
        ({**REQUIRED, "mode": "cluster"}, "at '/mode': value must be one of 'run', 'attach'"),
        ({**REQUIRED, "autoscaling": {"max": 3}}, "additional properties 'autoscaling'"),
        (
            {**REQUIRED, "autoscale": {"minExecutors": 0}},
            "at '/autoscale/minExecutors': minimum: got 0, want 1",
        ),
        ({**REQUIRED, "spark": {"master": "spark://m:7077"}}, "spark.master=spark://m:7077"),
        (
            {**REQUIRED, "autoscale": {"minExecutors": 4, "maxExecutors": 2}},
            "autoscale.maxExecutors (2) must be >= autoscale.minExecutors (4)",
        ),
        (
            {**REQUIRED, "monitoring": {"enabled": True, "kind": "Probe"}},
            "at '/monitoring/kind': value must be one of 'ServiceMonitor', 'PodMonitor'",
        ),
    ],
)
def test_values_that_cannot_work_are_refused_with_a_clear_message(
    render: Render, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(RenderError, match=re.escape(message)):
        render(values)


# --------------------------------------------------------------------------- alerts


def exported_series() -> dict[str, set[str]]:
    """The sample names the driver's ``/metrics`` exports, with their labels (the lag
    collector's families: a counter's samples end in ``_total``, a histogram's in
    ``_bucket``, ``_sum``, ``_count``)."""
    from streamscale.lag.metrics import LagCollector
    from streamscale.lag.model import LagTracker

    out: dict[str, set[str]] = {}
    for family in LagCollector(LagTracker()).describe():
        labels = set(getattr(family, "_labelnames", ()))  # as the family was declared
        if family.type == "counter":
            out[f"{family.name}_total"] = labels
        elif family.type == "histogram":
            out |= {f"{family.name}{s}": labels | {"le"} for s in ("_bucket", "_sum", "_count")}
        else:
            out[family.name] = labels
    return out


def exported_series_names() -> set[str]:
    return set(exported_series())


SCRAPE_SERIES = {"up"}  # Prometheus' own, per scrape target
TARGET_LABELS = {"namespace", "pod", "service", "job", "instance", "container", "endpoint"}
"""Labels a ServiceMonitor's or PodMonitor's scrape adds to every series."""


def selected_metrics(expr: str) -> set[str]:
    """The metric names an expression selects (every selector of the chart has braces)."""
    bare = re.sub(r"\{[^}]*\}", "{}", expr)
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{\}", bare))


def rules_of(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = one(objects, "PrometheusRule")["spec"]["groups"]
    return [rule for group in groups for rule in group["rules"]]


@pytest.mark.parametrize("values", [FULL, ATTACH], ids=["run", "attach"])
def test_the_alerts_read_metrics_the_driver_exports(render: Render, values: dict[str, Any]) -> None:
    exported = exported_series_names()
    assert {"streamscale_records_lag", "streamscale_time_lag_seconds"} <= exported
    read: set[str] = set()
    for rule in rules_of(render(values)):
        names = selected_metrics(rule["expr"])
        assert names, f"{rule['alert']}: no metric selector found in {rule['expr']!r}"
        # and no metric read without a selector (it would escape the check above)
        collapsed = re.sub(r"\{[^}]*\}", "{}", rule["expr"])
        bare = re.findall(r"\b((?:streamscale|kafka)_[a-zA-Z0-9_:]*)\b(?!\{)", collapsed)
        assert bare == [], f"{rule['alert']}: {bare} read without a selector"
        read |= names
    assert read - SCRAPE_SERIES <= exported, read - SCRAPE_SERIES - exported
    # the issue's two signals are both alerted on
    assert {"streamscale_records_lag", "streamscale_time_lag_seconds"} <= read


@pytest.mark.parametrize("values", [FULL, ATTACH], ids=["run", "attach"])
def test_the_alerts_match_and_group_by_labels_the_series_have(
    render: Render, values: dict[str, Any]
) -> None:
    """A matcher or a ``by``/``on`` label the series lack would make an alert silently never
    fire (or lose its query label): each is a label of the metric or one the scrape adds."""
    labels_of = {**exported_series(), **{name: set() for name in SCRAPE_SERIES}}
    assert labels_of["streamscale_records_lag"] == {"query", "topic", "partition"}
    for rule in rules_of(render(values)):
        expr = rule["expr"]
        available = set(TARGET_LABELS)
        for name, matchers in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", expr):
            own = labels_of[name] | TARGET_LABELS
            used = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
            assert used <= own, f"{rule['alert']}: {name} has no label {used - own}"
            available |= labels_of[name]
        for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            grouped = {g.strip() for g in group.split(",") if g.strip()}
            assert grouped <= available, f"{rule['alert']}: no label {grouped - available}"
        assert "query" in expr or rule["alert"] == "StreamscaleMetricsDown"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: `make setup` installs Debian's prometheus package")
    return found


@pytest.fixture
def rules_file(render: Render, tmp_path: Path) -> Path:
    rule = one(render(FULL), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def test_promtool_checks_the_rules(promtool: str, rules_file: Path) -> None:
    done = subprocess.run(
        [promtool, "check", "rules", str(rules_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout + done.stderr


POD = f'namespace="{NAMESPACE}",pod="{RELEASE}-streamscale-5d8f7c9b4-x2x7q",query="enrichment"'
OTHER = 'namespace="other",pod="other-streamscale-6c9-abcde",query="enrichment"'


def series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def firing(alert: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "exp_labels": {
            "severity": severity,
            "namespace": NAMESPACE,
            "query": "enrichment",
            **labels,
        }
    }


def alert_tests() -> list[dict[str, Any]]:
    """promtool unit tests of the chart's alerts (defaults: records lag 100,000, time lag
    60 s, sample age 120 s, each for 5 min; maxExecutors 12 in FULL, lagging at max above
    30 s for 15 min), on series labelled as a ServiceMonitor scrape labels them."""
    lag = "streamscale_records_lag"
    time_lag = "streamscale_time_lag_seconds"
    return [
        {  # 60,000 + 50,000 records behind: the sum is above 100,000; another release too
            "interval": "1m",
            "input_series": [
                series(lag, POD + ',topic="achats",partition="0"', "60000x20"),
                series(lag, POD + ',topic="achats",partition="1"', "50000x20"),
                series(lag, OTHER + ',topic="achats",partition="0"', "900000x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "StreamscaleRecordsLagHigh", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "StreamscaleRecordsLagHigh",
                    "exp_alerts": [firing("StreamscaleRecordsLagHigh", "warning")],
                },
            ],
        },
        {  # 90,000 records behind in all: below the threshold
            "interval": "1m",
            "input_series": [
                series(lag, POD + ',topic="achats",partition="0"', "45000x20"),
                series(lag, POD + ',topic="achats",partition="1"', "45000x20"),
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "StreamscaleRecordsLagHigh", "exp_alerts": []}
            ],
        },
        {  # the worst partition 90 s behind, at the maximum of 12 executors for 20 min
            "interval": "1m",
            "input_series": [
                series(time_lag, POD + ',topic="achats",partition="0"', "90x25"),
                series(time_lag, POD + ',topic="achats",partition="1"', "2x25"),
                series("streamscale_executors", POD + ',state="target"', "12x25"),
                series("streamscale_executors", POD + ',state="running"', "12x25"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "StreamscaleTimeLagHigh",
                    "exp_alerts": [firing("StreamscaleTimeLagHigh", "critical")],
                },
                {
                    "eval_time": "10m",
                    "alertname": "StreamscaleLaggingAtMaxExecutors",
                    "exp_alerts": [],
                },
                {
                    "eval_time": "20m",
                    "alertname": "StreamscaleLaggingAtMaxExecutors",
                    "exp_alerts": [firing("StreamscaleLaggingAtMaxExecutors", "warning")],
                },
            ],
        },
        {  # behind, but the autoscaler can still add executors (target 4 of 12)
            "interval": "1m",
            "input_series": [
                series(time_lag, POD + ',topic="achats",partition="0"', "90x25"),
                series("streamscale_executors", POD + ',state="target"', "4x25"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "StreamscaleLaggingAtMaxExecutors",
                    "exp_alerts": [],
                },
            ],
        },
        {  # no lag sample for 5 min (the age grows), and the scrape target down
            "interval": "1m",
            "input_series": [
                series("streamscale_sample_age_seconds", POD, "0+60x20"),
                series(
                    "up",
                    f'namespace="{NAMESPACE}",pod="{RELEASE}-streamscale-5d8f7c9b4-x2x7q"',
                    "0x20",
                ),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "StreamscaleLagSignalStale",
                    "exp_alerts": [firing("StreamscaleLagSignalStale", "warning")],
                },
                {
                    "eval_time": "10m",
                    "alertname": "StreamscaleMetricsDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "warning",
                                "namespace": NAMESPACE,
                                "pod": f"{RELEASE}-streamscale-5d8f7c9b4-x2x7q",
                            }
                        }
                    ],
                },
            ],
        },
    ]


def test_promtool_unit_tests_the_alerts(promtool: str, render: Render, tmp_path: Path) -> None:
    """The alerts fire on the series they are meant for, and only then (annotations are left
    out here: promtool would compare their rendered text; ``check rules`` parses them)."""
    rule = one(render(FULL), "PrometheusRule")
    groups = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in rule["spec"]["groups"]
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": alert_tests()}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


# --------------------------------------------------------------------------- the conf transport

CONF_PROBE = """
import json, sys
from pathlib import Path
from streamscale.settings import Settings
from streamscale.spark import session, stop

settings = Settings(spark_master="local[1]")
spark = session(settings, app_name="chart-conf", log_file=Path(sys.argv[1]))
try:
    print(json.dumps(dict(spark.sparkContext.getConf().getAll())))
finally:
    stop(spark)
"""


def kubernetes_env(container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as the node agent gives it (the kubelet's rules: field
    references resolved for a pod named ``pod_name`` on loopback, ``$(VAR)`` expanded)."""
    from streamscale.kube.pods import container_env

    pod = {"metadata": {"name": pod_name}}
    return container_env(pod, container, {}, lambda *_: None, lambda *_: None)


def test_pyspark_reads_the_charts_spark_conf_and_the_session_settings_win(
    render: Render, tmp_path: Path
) -> None:
    """The chart hands Spark its settings through SPARK_CONF_DIR (spark-defaults.conf) and
    PYSPARK_SUBMIT_ARGS; a real PySpark session built by streamscale.spark.session in a child
    process (a JVM of its own, local mode, loopback only) reads them, and the session's own
    settings win over the file. Ports are free ones, the master a closed loopback port: if
    the file won, nothing would leave the machine."""
    import json
    import os
    import sys

    driver_port, block_port = free_ports(2)
    values = {
        **REQUIRED,
        "spark": {
            "master": "k8s://https://127.0.0.1:1",
            "driverPort": driver_port,
            "blockManagerPort": block_port,
            "executor": {"memory": "1g"},
            "conf": {"spark.driver.bindAddress": "127.0.0.1"},
        },
    }
    objects = render(values)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    data = one(objects, "ConfigMap")["data"]
    (conf_dir / "spark-defaults.conf").write_text(data["spark-defaults.conf"])
    pod_env = kubernetes_env(driver_container(objects), "orders-streamscale-7d9c-x2x7q")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCALE_", "SPARK_"))}
    env.update(
        SPARK_CONF_DIR=str(conf_dir),
        PYSPARK_SUBMIT_ARGS=pod_env["PYSPARK_SUBMIT_ARGS"],
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])),
    )
    for key in ("STREAMSCALE_JARS_DIR",):
        if key in os.environ:
            env[key] = os.environ[key]
    done = subprocess.run(
        [sys.executable, "-c", CONF_PROBE, str(tmp_path / "driver.log")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    conf = json.loads(done.stdout.strip().splitlines()[-1])
    # from spark-defaults.conf
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.kubernetes.container.image"] == f"{IMAGE}:0.1.0"
    assert conf["spark.kubernetes.executor.label.app.kubernetes.io/component"] == "executor"
    assert conf["spark.driver.port"] == str(driver_port)
    assert conf["spark.driver.blockManager.port"] == str(block_port)
    # from PYSPARK_SUBMIT_ARGS, $(POD_NAME) expanded as Kubernetes does
    assert conf["spark.kubernetes.driver.pod.name"] == "orders-streamscale-7d9c-x2x7q"
    # the session's own settings win over the file
    assert conf["spark.master"] == "local[1]"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"


SECURED = {
    **REQUIRED,
    "kafka": {
        "bootstrapServers": "kafka-0.kafka:9093",
        "security": {
            "protocol": "SASL_SSL",
            "saslUsername": "pipeline",
            "passwordSecret": {"name": "kafka-pipeline"},
            "caSecret": {"name": "kafka-ca", "key": "ca.crt"},
        },
    },
}


def test_a_secured_clusters_secrets_are_mounted_files_the_settings_read(
    render: Render, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka.security wires the SASL password and the CA from Secrets mounted as files (the
    password readable by the owner only, the CA in every executor too, for Spark's
    connector), and the driver's settings read them: the password itself is in no object."""
    from streamscale.settings import Settings

    objects = render(SECURED)
    container = driver_container(objects)
    env = env_of(container)
    assert env["STREAMSCALE_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["STREAMSCALE_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert "STREAMSCALE_SASL_PASSWORD" not in env
    password_file = Path(env["STREAMSCALE_SASL_PASSWORD_FILE"])
    ca_file = Path(env["STREAMSCALE_SSL_CA_LOCATION"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {
        v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    for volume, path, secret, key, mode in (
        ("kafka-password", password_file, "kafka-pipeline", "password", 0o400),
        ("kafka-ca", ca_file, "kafka-ca", "ca.crt", 0o444),
    ):
        assert mounts[volume]["readOnly"] is True
        assert path == Path(mounts[volume]["mountPath"]) / key
        assert volumes[volume]["secret"] == {
            "secretName": secret, "defaultMode": mode, "items": [{"key": key, "path": key}]
        }  # fmt: skip
    conf = spark_defaults(objects)
    assert conf["spark.kubernetes.executor.secrets.kafka-ca"] == str(ca_file.parent)
    # The settings of the driver, with the Secrets' files where the pod has them.
    (tmp_path / "password").write_text("from-the-secret\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    for name, value in env.items():
        if name.startswith("STREAMSCALE_") and isinstance(value, str):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("STREAMSCALE_SASL_PASSWORD_FILE", str(tmp_path / "password"))
    monkeypatch.setenv("STREAMSCALE_SSL_CA_LOCATION", str(tmp_path / "ca.crt"))
    settings = Settings()
    assert settings.kafka_config()["sasl.password"] == "from-the-secret"
    assert 'password="from-the-secret"' in settings.kafka_options()["kafka.sasl.jaas.config"]
    assert "from-the-secret" not in yaml.safe_dump_all(objects)
    # Without security, none of it is rendered.
    plain = render(REQUIRED)
    assert not any("kafka" in m["name"] for m in driver_container(plain)["volumeMounts"])
    assert not any(k.startswith("spark.kubernetes.executor.secrets") for k in spark_defaults(plain))
