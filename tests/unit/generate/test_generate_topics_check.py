"""The generator's check of its topics before it produces, on a stand-in producer whose
metadata answers are scripted (the real broker: tests/integration/generate)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from streamscale.generate.producer import GenerateError, check_topics


class ScriptedMetadata:
    """``list_topics`` answers with the topic sets of ``answers`` in turn, then the last."""

    def __init__(self, *answers: set[str]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def list_topics(self, timeout: float) -> Any:
        topics = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return SimpleNamespace(topics={t: SimpleNamespace(error=None) for t in topics})


def test_a_topic_the_asked_broker_learns_late_is_found() -> None:
    """Just created, or asked of a broker just restarted: unknown for a moment."""
    producer = ScriptedMetadata(set(), set(), {"a", "b"})
    check_topics(producer, ["a", "b"], "127.0.0.1:9092", 5, grace_s=5)  # type: ignore[arg-type]
    assert producer.calls == 3


def test_a_missing_topic_is_one_clear_error_after_the_grace() -> None:
    producer = ScriptedMetadata({"a"})
    with pytest.raises(GenerateError, match=r"topic 'b' does not exist on 127.0.0.1:9092: create"):
        check_topics(producer, ["a", "b"], "127.0.0.1:9092", 5, grace_s=0.3)  # type: ignore[arg-type]
    assert producer.calls >= 2
