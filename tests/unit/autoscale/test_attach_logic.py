"""What ``streamscale.attach`` checks of the session it is given, without a session."""

from __future__ import annotations

import pytest

from streamscale.autoscale.attach import waits_for_locality


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
