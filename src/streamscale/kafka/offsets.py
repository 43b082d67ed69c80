"""Offset arithmetic of the Kafka source: pure functions, no I/O.

Offsets are "next offset to read" per topic-partition. Their JSON form is Spark's Kafka
source's: ``{"topic": {"0": 123, "1": 456}}``; in ``startingOffsets`` JSON ``-2`` means
earliest and ``-1`` latest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from streamscale.errors import ConfigError

EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


Offsets = dict[TopicPartition, int]


class OffsetError(ConfigError):
    """Offsets that cannot be used as given (bad JSON, missing partitions, out of range)."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{tp: offset}`` → Spark's ``{"topic": {"partition": offset}}`` (sorted, stable)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(data: Mapping[str, Mapping[str, int]] | str) -> Offsets:
    """Spark's offsets JSON (a dict or its text) → ``{tp: offset}``."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise OffsetError(f"offsets are not valid JSON: {exc.msg}: {data!r}") from None
    if not isinstance(data, Mapping):
        raise OffsetError(f'offsets must be a JSON object {{"topic": {{"0": 1}}}}, got {data!r}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise OffsetError(f"offsets of topic {topic!r} must be an object, got {parts!r}")
        for partition, offset in parts.items():
            try:
                tp = TopicPartition(str(topic), int(partition))
            except ValueError:
                raise OffsetError(f"partition {partition!r} of {topic!r} is not an int") from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OffsetError(f"offset of {topic}-{partition} is not an int: {offset!r}")
            out[tp] = offset
    return out


def parse_assign(text: str) -> list[TopicPartition]:
    """The ``assign`` option: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetError(
            f'assign is not valid JSON ({exc.msg}): expected {{"t": [0, 1]}}'
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise OffsetError(f'assign must look like {{"topicA": [0, 1]}}, got {text!r}')
    tps = []
    for topic, parts in data.items():
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise OffsetError(f"assign: partition {p!r} of {topic!r} is not a natural number")
            tps.append(TopicPartition(topic, p))
    if not tps:
        raise OffsetError("assign names no partition")
    return sorted(set(tps))


def tp_names(tps: Iterable[TopicPartition]) -> str:
    """``topic-partition`` names, sorted, for messages."""
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


def resolve_specific(
    requested: Mapping[TopicPartition, int],
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> Offsets:
    """Resolve ``startingOffsets`` JSON over the known partitions (-2 earliest, -1 latest).

    Like Spark, every partition must be named: a partial map is an error that lists the
    missing ones rather than a silent guess.
    """
    wanted = set(partitions)
    missing = wanted - set(requested)
    if missing:
        raise OffsetError(f"startingOffsets names no offset for partitions {tp_names(missing)}")
    unknown = set(requested) - wanted
    if unknown:
        raise OffsetError(
            f"startingOffsets names partitions that are not read: {tp_names(unknown)}"
        )
    out: Offsets = {}
    for tp in sorted(wanted):
        offset = requested[tp]
        if offset == EARLIEST:
            out[tp] = earliest[tp]
        elif offset == LATEST:
            out[tp] = latest[tp]
        elif offset < 0:
            raise OffsetError(f"offset {offset} of {tp.topic}-{tp.partition} is negative")
        else:
            out[tp] = offset
    return out


@dataclass(frozen=True)
class OutOfRange:
    """A start offset outside a partition's ``[earliest, latest]``."""

    tp: TopicPartition
    offset: int
    earliest: int
    latest: int

    @property
    def lost(self) -> bool:
        """True when records were deleted before being read (offset below earliest)."""
        return self.offset < self.earliest

    def message(self) -> str:
        what = (
            f"records {self.offset}..{self.earliest - 1} are no longer available"
            if self.lost
            else f"offset {self.offset} is beyond the end offset {self.latest}"
        )
        return (
            f"offset out of range on topic {self.tp.topic} partition {self.tp.partition}: {what} "
            f"(available: {self.earliest}..{self.latest})"
        )


def out_of_range(
    offsets: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> list[OutOfRange]:
    """The partitions whose offset lies outside ``[earliest, latest]`` (known partitions only)."""
    bad = []
    for tp, offset in sorted(offsets.items()):
        if tp in earliest and tp in latest and not earliest[tp] <= offset <= latest[tp]:
            bad.append(OutOfRange(tp, offset, earliest[tp], latest[tp]))
    return bad


def largest_remainder(
    total: int, weights: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Share ``total`` units in proportion to integer ``weights`` so that shares sum exactly.

    Each share is at most its weight when ``total`` <= sum(weights). Ties go to the larger
    weight, then to the partition order, so the result is deterministic.
    """
    weight_sum = sum(weights.values())
    if weight_sum <= 0 or total <= 0:
        return {tp: 0 for tp in weights}
    total = min(total, weight_sum)
    shares = {tp: total * w // weight_sum for tp, w in weights.items()}
    left = total - sum(shares.values())
    order = sorted(
        weights, key=lambda tp: (-((total * weights[tp]) % weight_sum), -weights[tp], tp)
    )
    for tp in order[:left]:
        shares[tp] += 1
    return shares


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_records: int | None,
) -> Offsets:
    """End offsets of the next micro-batch under ``maxOffsetsPerTrigger``, as Spark's connector
    computes them, so that both sources cut the same batches.

    ``start`` must hold an offset for every partition of ``latest``. Each partition with a
    backlog gets ``max_records * backlog / total backlog`` records (in floating point): rounded
    down, except that a share below one is rounded up so that no partition starves; never past
    its latest offset. The shares may so sum to a little more or less than the limit. Partitions
    without a backlog (or whose latest offset lies before their start) end at their latest
    offset, as does every partition when there is no limit.
    """
    if max_records is None:
        return dict(latest)
    backlog = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] > start[tp]}
    total = float(sum(backlog.values()))
    if total < 1:
        return dict(latest)
    end = dict(latest)
    for tp, size in backlog.items():
        prorate = max_records * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        end[tp] = min(latest[tp], start[tp] + share)
    return end


def ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """Non-empty ``[start, end)`` ranges of a micro-batch, in partition order."""
    out = []
    for tp in sorted(end):
        s = start.get(tp, end[tp])
        if end[tp] > s:
            out.append(OffsetRange(tp.topic, tp.partition, s, end[tp]))
    return out


def planned_data_loss(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    added_earliest: Mapping[TopicPartition, int],
) -> list[str]:
    """What a planned micro-batch tells of lost records, as Spark's connector reports it.

    ``start`` and ``end`` are the batch's offsets; ``added_earliest`` the earliest offsets of
    partitions in ``end`` but not in ``start`` (new since the last batch). Lost: a partition of
    ``start`` gone from ``end`` (deleted), a new partition that does not start at offset 0
    (records deleted before the query saw it), an end offset below the start offset (a start
    offset beyond the available ones, or a topic deleted and re-created). Those ranges are not
    read; the next batch goes on from ``end``.
    """
    found = []
    gone = set(start) - set(end)
    if gone:
        found.append(f"partitions {tp_names(gone)} have been deleted")
    for tp, earliest in sorted(added_earliest.items()):
        if earliest != 0:
            found.append(
                f"added partition {tp.topic}-{tp.partition} starts at offset {earliest}, not 0"
            )
    for tp in sorted(set(start) & set(end)):
        if end[tp] < start[tp]:
            found.append(
                f"partition {tp.topic}-{tp.partition}: the end offset {end[tp]} is below the "
                f"start offset {start[tp]} (a start offset beyond the available offsets, or "
                "the topic deleted and re-created)"
            )
    return found


def _round_half_up(x: float) -> int:
    """``x`` to the nearest integer, halves up (Java's ``Math.round``, not Python's ``round``)."""
    down = math.floor(x)
    return down + 1 if x - down >= 0.5 else down


def _part_count(size: int, total: int, min_partitions: int) -> int:
    return max(_round_half_up(size / total * min_partitions), 1)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` contiguous pieces, sized against what is left so the remainder goes to
    the last pieces (10 in 3: 3, 3, 4); empty pieces dropped."""
    out = []
    remaining, begin = r.size, r.start
    for i in range(parts):
        size = remaining // (parts - i)
        remaining -= size
        stop = min(begin + size, r.end)
        if stop > begin:
            out.append(OffsetRange(r.topic, r.partition, begin, stop))
        begin = stop
    return out


def split_ranges(offset_ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark tasks of a micro-batch under ``minPartitions``, cut as Spark's connector cuts them.

    Empty ranges are dropped. With fewer non-empty ranges than ``min_partitions``, each range
    gets ``round(size / total * min_partitions)`` pieces (at least one); the ranges left whole
    that way are taken out and the others share the remaining ``min_partitions`` in proportion
    to their sizes. The result is *about* ``min_partitions`` tasks (rounding may give a few more
    or fewer), each record read exactly once.
    """
    non_empty = [r for r in offset_ranges if r.size > 0]
    if min_partitions is None or len(non_empty) >= min_partitions:
        return non_empty
    total = sum(r.size for r in non_empty)
    whole = {r.tp for r in non_empty if _part_count(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in non_empty if r.tp in whole)
    split_min = max(min_partitions - len(whole), 1)
    out: list[OffsetRange] = []
    for r in non_empty:
        parts = 1 if r.tp in whole else _part_count(r.size, split_total, split_min)
        out.extend(_divide(r, parts))
    return out


def check_co_partitioned(tps: Iterable[TopicPartition]) -> None:
    """Co-partitioned topics have the same number of partitions (as a Kafka Streams join
    requires); :class:`OffsetError` names the counts otherwise."""
    counts: dict[str, int] = {}
    for tp in tps:
        counts[tp.topic] = counts.get(tp.topic, 0) + 1
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{t} has {n}" for t, n in sorted(counts.items()))
        raise OffsetError(
            f"coPartitioned needs topics with the same number of partitions: {listed}; "
            "give them equal partition counts or drop coPartitioned"
        )


def co_partition(
    offset_ranges: list[OffsetRange], min_partitions: int | None
) -> list[tuple[OffsetRange, ...]]:
    """Ranges grouped by partition number: one Spark task reads partition ``p`` of every
    topic, so records with the same key in co-partitioned topics meet in one task.

    With ``min_partitions`` above the number of groups, groups get extra pieces in proportion
    to their largest range (a group never gets more pieces than that range has records) and
    each of a group's ranges is cut into that many contiguous near-equal pieces, piece ``i``
    of every topic read together: every record is read exactly once.
    """
    groups: dict[int, list[OffsetRange]] = {}
    for r in offset_ranges:
        if r.size > 0:
            groups.setdefault(r.partition, []).append(r)
    ordered = [tuple(sorted(groups[p])) for p in sorted(groups)]
    if min_partitions is None or len(ordered) >= min_partitions:
        return ordered
    sizes = {TopicPartition(str(i), 0): sum(r.size for r in g) for i, g in enumerate(ordered)}
    most = {tp: max(r.size for r in ordered[int(tp.topic)]) - 1 for tp in sizes}
    extra = largest_remainder(min(min_partitions, sum(sizes.values())) - len(ordered), most)
    out: list[tuple[OffsetRange, ...]] = []
    for i, group in enumerate(ordered):
        pieces = 1 + extra[TopicPartition(str(i), 0)]
        cut = [
            [r.start + math.floor(j * r.size / pieces) for j in range(pieces)] + [r.end]
            for r in group
        ]
        for j in range(pieces):
            piece = tuple(
                OffsetRange(r.topic, r.partition, b[j], b[j + 1])
                for r, b in zip(group, cut, strict=True)
                if b[j + 1] > b[j]
            )
            if piece:
                out.append(piece)
    return out
