"""One real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and
one node agent per test session, stopped by PID at its end; an admin API client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streamscale.kube import controlplane as cp


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cp.ControlPlane]:
    data_dir = tmp_path_factory.mktemp("kube")
    with cp.control_plane(data_dir) as plane:
        yield plane


@pytest.fixture(scope="session")
def core(kube: cp.ControlPlane) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(kube.admin_kubeconfig)))
