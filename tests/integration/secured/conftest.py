"""One secured three-node cluster for the module that uses it (SASL_SSL with SCRAM-SHA-512,
mutual TLS between controllers, ACLs on), stopped when its tests end; its topics made by the
admin, and its clients' settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamscale.kafka import broker as embedded
from streamscale.kafka import security
from streamscale.settings import Settings


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.Broker]:
    data_dir = tmp_path_factory.mktemp("secured")
    with embedded.embedded_broker(data_dir, nodes=3, secure=True) as running:
        yield running
        embedded.stop(data_dir, grace_s=0)  # its data is thrown away: no controlled shutdown


def env_of(running: embedded.Broker, user: str) -> dict[str, str]:
    """The ``STREAMSCALE_*`` variables ``broker start --secure`` wrote for ``user``."""
    lines = security.files(running.data_dir).env(user).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


@pytest.fixture(scope="module")
def admin_settings(secured: embedded.Broker) -> Settings:
    return secured.client_settings(security.ADMIN)


@pytest.fixture(scope="module")
def pipeline_env(secured: embedded.Broker) -> dict[str, str]:
    return env_of(secured, security.PIPELINE)


@pytest.fixture(scope="module")
def admin_env(secured: embedded.Broker) -> dict[str, str]:
    return env_of(secured, security.ADMIN)


@pytest.fixture(scope="module")
def secret_bytes(secured: embedded.Broker) -> list[bytes]:
    """Every password of the cluster, as the bytes a leak would show."""
    found = security.load(secured.data_dir)
    return [found.keystore.encode(), *(p.encode() for p in found.users.values())]
