"""Pure parts of the node agent (:mod:`streamscale.kube.pods`): env, expansion, fieldRefs,
commands, phases and statuses, on pods as the API server serves them (no process, no API)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.kube import pods
from streamscale.kube.pods import Outcome, PodSpecError

POD: dict[str, Any] = {
    "metadata": {
        "name": "orders-0",
        "namespace": "data",
        "uid": "u-1",
        "labels": {"app": "streamscale"},
        "annotations": {"a/b": "c"},
    },
    "spec": {"nodeName": "n1", "serviceAccountName": "orders"},
}


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("$(A)", {"A": "1"}, "1"),
        ("x-$(A)-$(B)", {"A": "1", "B": "2"}, "x-1-2"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(A)", {"A": "1"}, "$(A)"),
        ("$$", {}, "$"),
        ("$A", {"A": "1"}, "$A"),
        ("--conf spark.kubernetes.driver.pod.name=$(POD_NAME) pyspark-shell",
         {"POD_NAME": "d-1"}, "--conf spark.kubernetes.driver.pod.name=d-1 pyspark-shell"),
    ],
)  # fmt: skip
def test_expand(text: str, env: dict[str, str], expected: str) -> None:
    assert pods.expand(text, env) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40))
def test_expand_leaves_text_without_dollar_alone(text: str) -> None:
    assert pods.expand(text, {"A": "x"}) == text


@given(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=20))
def test_expand_substitutes_a_defined_name(name: str, value: str) -> None:
    assert pods.expand(f"<$({name})>", {name: value}) == f"<{value}>"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("metadata.name", "orders-0"),
        ("metadata.namespace", "data"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "streamscale"),
        ("metadata.annotations['a/b']", "c"),
        ("spec.nodeName", "n1"),
        ("spec.serviceAccountName", "orders"),
        ("status.podIP", "127.0.0.1"),
        ("status.hostIP", "127.0.0.1"),
    ],
)
def test_field_value(path: str, expected: str) -> None:
    assert pods.field_value(POD, path) == expected


def test_field_value_unknown_is_a_clear_error() -> None:
    with pytest.raises(PodSpecError, match="metadata.generation"):
        pods.field_value(POD, "metadata.generation")


def _lookup(kind: str, name: str, key: str) -> str | None:
    return {("configmap", "cm", "k"): "from-cm", ("secret", "s", "p"): "pw"}.get((kind, name, key))


def _keys(kind: str, name: str) -> dict[str, str] | None:
    return {("configmap", "cm"): {"k": "from-cm", "j": "J"}}.get((kind, name))


def test_container_env_in_kubernetes_order() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ARGS", "value": "name=$(POD_NAME) ip=$(POD_IP) later=$(LATER)"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
            {"name": "LATER", "value": "1"},
            {"name": "HOME", "value": "/override"},
        ],
    }
    env = pods.container_env(POD, container, {"HOME": "/h", "PATH": "/bin"}, _lookup, _keys)
    assert env == {
        "HOME": "/override",
        "PATH": "/bin",
        "CM_k": "from-cm",
        "CM_j": "J",
        "POD_NAME": "orders-0",
        "POD_IP": "127.0.0.1",
        "ARGS": "name=orders-0 ip=127.0.0.1 later=$(LATER)",
        "K": "from-cm",
        "P": "pw",
        "LATER": "1",
    }


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope"}}}, "nope"),
        ({"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}, "X"),
    ],
)
def test_container_env_refuses_what_it_cannot_resolve(item: dict[str, Any], message: str) -> None:
    with pytest.raises(PodSpecError, match=message):
        pods.container_env(POD, {"env": [item]}, {}, _lookup, _keys)


def test_container_env_optional_key_is_skipped() -> None:
    item = {
        "name": "X",
        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}},
    }
    assert "X" not in pods.container_env(POD, {"env": [item]}, {}, _lookup, _keys)


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        ({"command": ["ss"], "args": ["run", "$(P)"]}, ["ss", "run", "enrichment"]),
        ({"args": ["executor"]}, ["entry", "executor"]),
        ({}, ["entry"]),
        ({"command": ["sh", "-c", "echo $$HOME"]}, ["sh", "-c", "echo $HOME"]),
    ],
)  # fmt: skip
def test_container_argv(container: dict[str, Any], expected: list[str]) -> None:
    assert pods.container_argv(container, {"P": "enrichment"}, ["entry"]) == expected


def _out(code: int) -> Outcome:
    return Outcome(code, "t0", "t1")


@pytest.mark.parametrize(
    ("policy", "outcomes", "deleted", "expected"),
    [
        ("Never", [None], False, "Running"),
        ("Never", [_out(0)], False, "Succeeded"),
        ("Never", [_out(1)], False, "Failed"),
        ("Never", [_out(0), _out(143)], False, "Failed"),
        ("Never", [_out(0), None], False, "Running"),
        ("Always", [_out(0)], False, "Running"),
        ("Always", [_out(137)], True, "Failed"),
        ("OnFailure", [_out(0)], False, "Succeeded"),
        ("OnFailure", [_out(2)], False, "Running"),
        ("OnFailure", [_out(2)], True, "Failed"),
    ],
)
def test_phase(policy: str, outcomes: list[Outcome | None], deleted: bool, expected: str) -> None:
    assert pods.phase(policy, outcomes, deleted) == expected


def test_container_status_states() -> None:
    running = pods.container_status("c", "img", "u", 0, "t0", None)
    assert running["state"] == {"running": {"startedAt": "t0"}}
    assert running["ready"] is True
    ended = pods.container_status("c", "img", "u", 2, "t0", _out(143))
    assert ended["state"]["terminated"]["exitCode"] == 143
    assert ended["state"]["terminated"]["reason"] == "Error"
    assert (ended["ready"], ended["restartCount"]) == (False, 2)
    assert (
        pods.container_status("c", "i", "u", 0, None, _out(0))["state"]["terminated"]["reason"]
        == "Completed"
    )
    waiting = pods.container_status(
        "c", "i", "u", 0, None, None, ("CreateContainerConfigError", "m")
    )
    assert waiting["state"] == {"waiting": {"reason": "CreateContainerConfigError", "message": "m"}}


@pytest.mark.parametrize("ready", [True, False])
def test_pod_conditions(ready: bool) -> None:
    by_type = {c["type"]: c["status"] for c in pods.pod_conditions(ready, "t")}
    assert by_type["Ready"] == by_type["ContainersReady"] == ("True" if ready else "False")
    assert by_type["Initialized"] == "True"
