"""Shared test configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

STORIES = ("faults", "hosts", "kube", "test_demo.py")
"""Integration scenarios that each drive a whole system through a story of faults or scale
events (tests/integration/...). Under ``pytest -n 2 --dist loadgroup`` (``make test``) they
run one after the other on one worker, never two at once, while the other worker takes the
rest: every other integration module whole (its module fixtures started once), and the unit
tests one by one."""

INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``xdist_group`` of every integration test (no effect without ``-n``)."""
    for item in items:
        path = Path(str(item.path))
        if INTEGRATION not in path.parents:
            continue
        within = path.relative_to(INTEGRATION)
        group = "stories" if within.parts[0] in STORIES else within.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
