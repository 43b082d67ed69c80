"""The generators refuse records the topic would delete at once (older than its retention)."""

from __future__ import annotations

from streamscale.generate.producer import DAY_MS, retention_problem

NOW = 1_795_000_000_000
WEEK = {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)}


def test_records_within_retention_pass() -> None:
    assert retention_problem("t", WEEK, NOW, NOW) is None
    assert retention_problem("t", WEEK, NOW - 7 * DAY_MS, NOW) is None


def test_records_older_than_retention_are_refused_in_one_line() -> None:
    problem = retention_problem("GAME-FRAME-RQ", WEEK, NOW - 300 * DAY_MS, NOW)
    assert problem is not None
    assert "\n" not in problem
    assert "300.0 days old" in problem
    assert "GAME-FRAME-RQ keeps records (retention.ms=604800000, 7 days)" in problem
    assert "--start-ms" in problem


def test_unlimited_or_compacted_topics_keep_old_records() -> None:
    old = NOW - 1000 * DAY_MS
    assert retention_problem("t", {"retention.ms": "-1"}, old, NOW) is None
    assert (
        retention_problem("t", {"cleanup.policy": "compact", "retention.ms": "1"}, old, NOW) is None
    )
    assert retention_problem(
        "t", {"cleanup.policy": "compact,delete", "retention.ms": "1"}, old, NOW
    )
