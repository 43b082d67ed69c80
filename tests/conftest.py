"""Shared test configuration."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

STORIES = ("faults", "hosts", "kube", "test_demo.py")
"""Integration scenarios that each drive a whole system through a story of faults or scale
events (``tests/integration/...``). Under ``pytest -n 2 --dist loadscope`` (``make test``)
they run one after the other on one worker, never two at once (the hosts' network namespaces
are the machine's, and each story is timed against a machine that runs one), while the other
worker takes the rest: every other integration module whole (its module fixtures started
once), and the unit tests one by one."""

INTEGRATION = "tests/integration/"


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: the stories' one, its module, or itself."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith(INTEGRATION):
        return nodeid
    return "stories" if path[len(INTEGRATION) :].split("/")[0] in STORIES else path


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadscope``: the scopes are :func:`work_unit`'s (pytest-xdist's own
    ``xdist_group`` marks do not reach its scheduler under pytest 9)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class StoriesApart(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return StoriesApart(config, log)
