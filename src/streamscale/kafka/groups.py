"""Consumer groups of streaming queries, and what a batch commits to them (pure, no I/O).

The group of a query (:func:`group_id`, the one definition: :mod:`streamscale.kafka.commits`
commits to it and the ``group`` label of the ``kafka_consumergroup_*`` metrics names it
through :func:`query_group`): ``kafka.group.id`` of its source if set, else
``<groupIdPrefix>-<name>`` with the source's ``groupIdPrefix`` (default ``streamscale``) and
as name the source's ``queryName`` option (the ``streamscale-kafka`` source's own), else the
query's name, else its id.

What a committed batch commits (:func:`batch_commits`): each Kafka source's ``endOffset`` of
the progress event (the batch's processed offsets: next offset to read per partition), to the
group and cluster of that source (:class:`CommitTarget`, from :func:`targets_for`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamscale.kafka.offsets import Offsets, TopicPartition
from streamscale.lag.model import is_kafka_description, parse_offsets
from streamscale.settings import JAVA_AND_LIBRDKAFKA_KEYS, librdkafka_from_java

DEFAULT_GROUP_PREFIX = "streamscale"

JAVA_CLIENT_KEYS = JAVA_AND_LIBRDKAFKA_KEYS
"""``kafka.*`` keys of Spark's connector (Java client) that librdkafka takes as they are."""

PYTHON_STREAM = "PythonMicroBatchStream"
"""In a progress description: a Python data source, whose ``kafka.*`` keys are librdkafka's."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def group_id(options: Mapping[str, str], query_name: str | None, query_id: str) -> str:
    """The consumer group a query's source commits to (options are case-insensitive)."""
    opts = _lower(options)
    explicit = opts.get("kafka.group.id")
    if explicit:
        return explicit
    prefix = opts.get("groupidprefix") or DEFAULT_GROUP_PREFIX
    name = opts.get("queryname") or query_name or query_id
    return f"{prefix}-{name}"


def _servers(text: str | None) -> frozenset[str]:
    return frozenset(s.strip() for s in (text or "").split(",") if s.strip())


def connection(
    options: Mapping[str, str], *, librdkafka_keys: bool, fallback: Mapping[str, str]
) -> dict[str, str]:
    """librdkafka connection keys for committing a source's group.

    ``fallback`` (the committer's own connection, credentials included) when the source names
    no servers or the same ones; else the source's ``kafka.*`` keys: all of them for the
    ``streamscale-kafka`` source (``librdkafka_keys``, minus ``group.id``), for Spark's
    connector its Java keys as librdkafka's (:func:`~streamscale.settings.librdkafka_from_java`:
    the JAAS line's credentials and a PEM trust store too).
    """
    kafka = {k[len("kafka.") :]: v for k, v in _lower(options).items() if k.startswith("kafka.")}
    servers = _servers(kafka.get("bootstrap.servers"))
    if not servers or servers == _servers(fallback.get("bootstrap.servers")):
        return dict(fallback)
    if librdkafka_keys:
        return {k: v for k, v in kafka.items() if k != "group.id"}
    return librdkafka_from_java(kafka)


@dataclass(frozen=True)
class CommitTarget:
    """A consumer group on one cluster (``conf``: sorted librdkafka connection keys)."""

    group: str
    conf: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, group: str, conf: Mapping[str, str]) -> CommitTarget:
        return cls(group, tuple(sorted(conf.items())))

    @property
    def config(self) -> dict[str, str]:
        return dict(self.conf)

    @property
    def servers(self) -> str:
        return self.config.get("bootstrap.servers", "?")


def match_sources(
    descriptions: Sequence[str], found: Sequence[tuple[str, Mapping[str, str]]]
) -> list[Mapping[str, str] | None]:
    """The options of each progress source: those of the next JVM source with the same
    description (progress lists each distinct stream once, in plan order); None if none."""
    unused = list(found)
    out: list[Mapping[str, str] | None] = []
    for description in descriptions:
        index = next((i for i, (d, _) in enumerate(unused) if d == description), None)
        out.append(None if index is None else unused.pop(index)[1])
    return out


def targets_for(
    progress: Mapping[str, Any],
    found: Sequence[tuple[str, Mapping[str, str]]],
    fallback: Mapping[str, str],
    *,
    is_kafka: Callable[[str], bool] = is_kafka_description,
) -> list[CommitTarget | None]:
    """Where each source of ``progress`` commits (None: not a Kafka source).

    ``found`` are ``(description, options)`` of the query's sources as read from the JVM; a
    Kafka source missing from it commits by the defaults to the ``fallback`` cluster.
    """
    sources = list(progress.get("sources") or ())
    descriptions = [str(s.get("description", "")) for s in sources]
    name = progress.get("name")
    qid = str(progress.get("id"))
    out: list[CommitTarget | None] = []
    for description, options in zip(descriptions, match_sources(descriptions, found), strict=True):
        if not is_kafka(description):
            out.append(None)
            continue
        opts = options or {}
        conf = connection(opts, librdkafka_keys=PYTHON_STREAM in description, fallback=fallback)
        out.append(CommitTarget.of(group_id(opts, str(name) if name else None, qid), conf))
    return out


def batch_commits(
    progress: Mapping[str, Any], targets: Sequence[CommitTarget | None]
) -> dict[CommitTarget, Offsets]:
    """The processed offsets of the batch of ``progress`` per target: each Kafka source's
    ``endOffset`` (``targets`` aligned with its sources); two sources of one target and topic
    commit the smaller offset (what both have processed)."""
    out: dict[CommitTarget, Offsets] = {}
    for source, target in zip(progress.get("sources") or (), targets, strict=False):
        if target is None:
            continue
        offsets = parse_offsets(source.get("endOffset"))
        if offsets is None:
            continue
        merged = out.setdefault(target, {})
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                continue
            tp = TopicPartition(topic, partition)
            merged[tp] = min(offset, merged.get(tp, offset))
    return {t: o for t, o in out.items() if o}


def moved_forward(offsets: Mapping[TopicPartition, int], committed: Offsets) -> Offsets:
    """The offsets not yet committed at that value or beyond."""
    return {tp: o for tp, o in offsets.items() if committed.get(tp, -1) < o}


# ---------------------------------------------------------------------- the group of a query
_groups_lock = threading.Lock()
_query_groups: dict[str, str] = {}
MAX_REMEMBERED = 10_000


def remember_group(query: str, group: str) -> None:
    """Record the group resolved for a query label (its name, or id when unnamed)."""
    with _groups_lock:
        if len(_query_groups) >= MAX_REMEMBERED and query not in _query_groups:
            _query_groups.pop(next(iter(_query_groups)))
        _query_groups[query] = group


def query_group(query: str) -> str:
    """The consumer group of a query label: as resolved from its source by a committer of this
    process, else as :func:`group_id` names it with no source option."""
    with _groups_lock:
        found = _query_groups.get(query)
    return found if found is not None else group_id({}, query, query)
