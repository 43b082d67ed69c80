"""The multi-host harness as a session fixture: seven hosts (network namespaces) on one bridge,
three Kafka brokers, a Spark Master and two Workers started on theirs; the driver's host is
left for the tests, which run the driver there as a child process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parent.parent / "faults"
if str(FAULTS) not in sys.path:  # the fault suite's building blocks (scenarios, the pipeline)
    sys.path.insert(0, str(FAULTS))

from cluster_hosts import Hosts, hosts_cluster  # noqa: E402
from netns import Network, unavailable  # noqa: E402


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    """Skipped only where namespaces cannot be made (not root, no ``ip``)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with hosts_cluster(tmp_path_factory.mktemp("hosts")) as running:
        yield running
    left = Network().leftovers()
    assert left == [], f"namespaces or links left behind: {left}"
