"""The group committer's listener logic on recorded progress events; its commit client is an
in-memory recorder injected in place of KafkaAdmin (the real one: tests/integration/kafka/
test_commits.py)."""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent

from streamscale.kafka import commits
from streamscale.kafka.commits import GroupCommitter
from streamscale.kafka.offsets import TopicPartition

CONNECTOR: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "lag" / "progress_kafka_connector.json").read_text()
)
RUN = CONNECTOR[0]["runId"]
QID = CONNECTOR[0]["id"]
CONF = {"bootstrap.servers": "127.0.0.1:9092"}


class Recorder:
    """Commits into a list; fails while ``failing`` is set."""

    def __init__(self, conf: Mapping[str, str], log: list[Any]) -> None:
        self.conf = dict(conf)
        self.log = log
        self.failing = threading.Event()
        self.failure = "coordinator not available"
        self.closed = False

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        if self.failing.is_set():
            raise RuntimeError(self.failure)
        self.log.append((self.conf["bootstrap.servers"], group, dict(offsets)))

    def close(self) -> None:
        self.closed = True


def _committer(**kwargs: Any) -> tuple[GroupCommitter, list[Any], list[Recorder]]:
    log: list[Any] = []
    admins: list[Recorder] = []

    def make(conf: Mapping[str, str]) -> Recorder:
        admins.append(Recorder(conf, log))
        return admins[-1]

    return GroupCommitter(CONF, make_admin=make, **kwargs), log, admins


def _event(progress: dict[str, Any]) -> Any:
    return QueryProgressEvent.fromJson({"progress": copy.deepcopy(progress)})


def _tp(p: int) -> TopicPartition:
    return TopicPartition("probe", p)


def test_commits_each_batch_what_moved() -> None:
    committer, log, admins = _committer()
    for progress in CONNECTOR:
        committer.onQueryProgress(_event(progress))
    assert committer.wait_for_batch(RUN, 3, timeout_s=10)
    # Batches may coalesce on the worker; offsets only go forward, none is committed twice,
    # and the last commit is the caught-up position.
    final: dict[TopicPartition, int] = {}
    seen: set[tuple[TopicPartition, int]] = set()
    for servers, group, offsets in log:
        assert (servers, group) == ("127.0.0.1:9092", "streamscale-probeq")
        for tp, off in offsets.items():
            assert (tp, off) not in seen
            seen.add((tp, off))
            assert off > final.get(tp, -1)
            final[tp] = off
    assert final == {_tp(0): 50, _tp(1): 10, _tp(2): 0}
    assert committer.commits == len(log) and committer.failures == 0
    committer.close()
    assert [a.closed for a in admins] == [True]


def test_group_and_cluster_from_the_query_sources() -> None:
    execution = object()
    options = {"kafka.bootstrap.servers": "127.0.0.2:9092", "kafka.group.id": "mine"}

    def read_sources(found: Any) -> list[tuple[str, dict[str, str]]]:
        assert found is execution
        return [("KafkaV2[Subscribe[probe]]", options)]

    committer, log, _ = _committer(
        find_query=lambda qid: execution if qid == QID else None, read_sources=read_sources
    )
    committer.onQueryStarted(SimpleNamespace(id=uuid.UUID(QID), runId=uuid.UUID(RUN)))
    committer.onQueryProgress(_event(CONNECTOR[0]))
    assert committer.wait_for_batch(RUN, 0, timeout_s=10)
    assert log == [("127.0.0.2:9092", "mine", {_tp(0): 16, _tp(1): 3, _tp(2): 0})]
    committer.close()


def test_a_failed_commit_is_counted_and_retried_with_the_next_batch() -> None:
    committer, log, admins = _committer()
    committer.onQueryProgress(_event(CONNECTOR[0]))
    assert committer.wait_for_batch(RUN, 0, timeout_s=10)
    admins[0].failing.set()
    committer.onQueryProgress(_event(CONNECTOR[1]))
    assert committer.wait_for_batch(RUN, 1, timeout_s=10)  # handled, though failed
    assert committer.failures == 1
    admins[0].failing.clear()
    committer.onQueryProgress(_event(CONNECTOR[2]))
    assert committer.wait_for_batch(RUN, 2, timeout_s=10)
    assert log[-1][2] == {_tp(0): 48, _tp(1): 9}  # partition 2 did not move since batch 0
    committer.close()


def test_a_refused_group_is_warned_in_the_refusals_one_line_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    committer, log, admins = _committer()
    committer.onQueryProgress(_event(CONNECTOR[0]))
    assert committer.wait_for_batch(RUN, 0, timeout_s=10)
    admins[0].failure = (
        'KafkaError{code=GROUP_AUTHORIZATION_FAILED,val=30,str="Broker: Group authorization '
        'failed"}'
    )
    admins[0].failing.set()
    with caplog.at_level(logging.WARNING, logger=commits.log.name):
        committer.onQueryProgress(_event(CONNECTOR[1]))
        assert committer.wait_for_batch(RUN, 1, timeout_s=10)
    (warning,) = [r.getMessage() for r in caplog.records if "could not commit" in r.getMessage()]
    assert "GROUP_AUTHORIZATION_FAILED on group streamscale-*: grant READ" in warning, warning
    admins[0].failing.clear()  # the ACL granted: the next batch's commit catches up
    committer.onQueryProgress(_event(CONNECTOR[2]))
    assert committer.wait_for_batch(RUN, 2, timeout_s=10)
    assert log[-1][2] == {_tp(0): 48, _tp(1): 9}
    committer.close()


def test_a_new_run_commits_from_its_checkpoint_even_behind() -> None:
    committer, log, _ = _committer()
    committer.onQueryProgress(_event(CONNECTOR[3]))
    assert committer.wait_for_batch(RUN, 3, timeout_s=10)
    again = copy.deepcopy(CONNECTOR[0])
    again["runId"] = str(uuid.uuid4())
    committer.onQueryProgress(_event(again))
    assert committer.wait_for_batch(again["runId"], 0, timeout_s=10)
    assert [entry[2] for entry in log] == [
        {_tp(0): 50, _tp(1): 10, _tp(2): 0},
        {_tp(0): 16, _tp(1): 3, _tp(2): 0},
    ]
    committer.close()


def test_queries_without_kafka_are_handled_at_once() -> None:
    committer, log, _ = _committer()
    progress = copy.deepcopy(CONNECTOR[0])
    progress["sources"][0]["description"] = "RateStreamV2[rowsPerSecond=5]"
    committer.onQueryProgress(_event(progress))
    assert committer.wait_for_batch(RUN, 0, timeout_s=0)
    assert log == []
    committer.close()


def test_wait_for_times_out_on_a_batch_never_seen() -> None:
    committer, _, _ = _committer()
    assert not committer.wait_for_batch("unknown-run", 0, timeout_s=0.05)
    assert committer.wait_for(SimpleNamespace(lastProgress=None, runId="r"))


def test_callbacks_never_raise() -> None:
    def broken(_qid: str) -> Any:
        raise RuntimeError("py4j gone")

    committer, log, _ = _committer(find_query=broken)
    committer.onQueryStarted(SimpleNamespace(id="x", runId="y"))
    committer.onQueryProgress(SimpleNamespace(progress=None))
    assert committer.errors == 2
    committer.onQueryProgress(_event(CONNECTOR[0]))  # options unreadable: the defaults
    assert committer.wait_for_batch(RUN, 0, timeout_s=10)
    assert log[0][1] == "streamscale-probeq"
    committer.onQueryIdle(SimpleNamespace(id="x"))
    committer.onQueryTerminated(SimpleNamespace(id=uuid.UUID(QID), runId=uuid.UUID(RUN)))
    committer.close()


def test_clients_of_finished_queries_are_closed() -> None:
    committer, _, admins = _committer()
    committer.onQueryProgress(_event(CONNECTOR[0]))
    assert committer.wait_for_batch(RUN, 0, timeout_s=10)
    assert not admins[0].closed
    committer.onQueryTerminated(SimpleNamespace(id=uuid.UUID(QID), runId=uuid.UUID(RUN)))
    deadline = time.monotonic() + 10
    while not admins[0].closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert admins[0].closed
    committer.close()


def test_a_closed_committer_is_not_waited_for_again_at_exit() -> None:
    """Brokers gone: ``close`` waits its bound once; the flush at exit does not wait again."""
    release = threading.Event()
    committer, _, admins = _committer()
    commits._live.add(committer)
    committer.onQueryProgress(_event(CONNECTOR[0]))
    deadline = time.monotonic() + 10
    while not admins and time.monotonic() < deadline:
        time.sleep(0.01)
    admins[0].commit = lambda group, offsets: release.wait(10)  # type: ignore[method-assign]
    committer.onQueryProgress(_event(CONNECTOR[1]))
    began = time.monotonic()
    committer.close(timeout_s=0.2)
    commits._flush_at_exit()
    assert time.monotonic() - began < 2
    release.set()
