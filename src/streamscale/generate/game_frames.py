"""Game-frame records: arcade machines' frames and their approvals (pure).

Key and value shapes and the hit encoding are those of :mod:`streamscale.pipelines.hits`.
A run sets up 10-35 machines (distinct 6-digit ids, a random zone and game each), then for
each frame picks a machine uniformly and 1-5 hits with these weights: key X:O 1:1;
direction UP 4, RIGHT 3, DOWN 2, LEFT 1; impactType Fatal 1, Critical 2, Special 2,
Direct 10, Missed 5; level Pro:Inter:NewBie 1:1:1; impact uniform 42-209.

Event time: frame ``i`` is stamped ``start_ms + round(1000 * schedule.time_of(i))``,
raised to one millisecond after the machine's previous frame when needed, so that a header
(ts, machine, zone) identifies one frame; in a burst the timestamps therefore run ahead of
the wall clock by up to frames / (machines * 1000) seconds. The request goes to the
request topic with that Kafka timestamp. With probability 100/101 an approval (same key and
value bytes) goes to the approval topic with Kafka timestamp ``ts + delay``, ``delay``
uniform 0-2000 ms; it is emitted once the generated event time reaches ``ts + delay``, so
approvals follow their requests by about the delay in wall time too, and at most a few
seconds of approvals are ever pending.

With ``bad_fraction`` > 0, that fraction of frames is spoiled (still requested and approved
as usual), one of :data:`BAD_KINDS` chosen uniformly: a hit of wrong length, with a
non-hex digit, with an unknown key code or with impact 255; a body that is truncated JSON,
lacks ``hits`` or has ``hits`` as a string; a key that is not JSON or is null.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from streamscale.errors import ConfigError
from streamscale.generate import Record
from streamscale.generate.profiles import Schedule
from streamscale.pipelines import hits as codec

MACHINES_MIN = 10
MACHINES_MAX = 35
APPROVAL_PROBABILITY = 100 / 101
APPROVAL_DELAY_MAX_MS = 2000

KEY_WEIGHTS: Mapping[str, int] = {"X": 1, "O": 1}
DIRECTION_WEIGHTS: Mapping[str, int] = {"UP": 4, "RIGHT": 3, "DOWN": 2, "LEFT": 1}
IMPACT_TYPE_WEIGHTS: Mapping[str, int] = {
    "Fatal": 1,
    "Critical": 2,
    "Special": 2,
    "Direct": 10,
    "Missed": 5,
}
LEVEL_WEIGHTS: Mapping[str, int] = {"Pro": 1, "Inter": 1, "NewBie": 1}

BAD_KINDS: tuple[str, ...] = (
    "hit-length",
    "hit-hex",
    "hit-code",
    "hit-impact",
    "body-not-json",
    "body-missing-hits",
    "body-wrong-type",
    "key-not-json",
    "key-null",
)

# Every impact value's two hex digits, and the middle four hex digits (key, direction,
# impactType, level) repeated by weight: one uniform index draws a weighted combination.
_IMPACT_HEX = tuple(f"{i:02X}" for i in range(codec.IMPACT_MIN, codec.IMPACT_MAX + 1))


def _by_weight(weights: Mapping[str, int]) -> list[str]:
    return [name for name, weight in weights.items() for _ in range(weight)]


_MIDDLE_HEX = tuple(
    f"{codec.KEY_CODES[k]:X}{codec.DIRECTION_CODES[d]:X}"
    f"{codec.IMPACT_TYPE_CODES[t]:X}{codec.LEVEL_CODES[lv]:X}"
    for k, d, t, lv in itertools.product(
        _by_weight(KEY_WEIGHTS),
        _by_weight(DIRECTION_WEIGHTS),
        _by_weight(IMPACT_TYPE_WEIGHTS),
        _by_weight(LEVEL_WEIGHTS),
    )
)


@dataclass(frozen=True)
class Machine:
    """An arcade machine: 6-digit id, zone and the one game it runs."""

    id: str
    zone: codec.Zone
    game: str


def make_machines(rng: random.Random, count: int | None = None) -> list[Machine]:
    """``count`` machines (default: 10-35 drawn from ``rng``) with distinct 6-digit ids:
    100000-999999, and above 900,000 machines 000000-999999 (leading zeros) for up to 10⁶."""
    if count is None:
        count = rng.randint(MACHINES_MIN, MACHINES_MAX)
    if not 1 <= count <= 1_000_000:
        raise ConfigError(f"--machines must be within 1-1000000, got {count}")
    ids = rng.sample(range(100_000 if count <= 900_000 else 0, 1_000_000), count)
    return [Machine(f"{mid:06d}", rng.choice(codec.ZONES), rng.choice(codec.GAMES)) for mid in ids]


@dataclass
class FrameStats:
    """What a game-frame run generated so far (updated while records are drawn)."""

    frames: int = 0
    approvals: int = 0
    bad: int = 0


def _spoil(
    rng: random.Random, kind: str, key: str, body: str, hits: list[str], prefix: str
) -> tuple[str | None, str]:
    """(key, body) of a frame spoiled the ``kind`` way."""
    if kind.startswith("hit-"):
        at = int(rng.random() * len(hits))
        hit = hits[at]
        hits[at] = {
            "hit-length": hit[:6],
            "hit-hex": hit[:3] + "G" + hit[4:],
            "hit-code": hit[:2] + "0" + hit[3:],
            "hit-impact": "FF" + hit[2:],
        }[kind]
        return key, prefix + '","'.join(hits) + '"]}'
    if kind == "body-not-json":
        return key, body[: len(body) // 2]
    if kind == "body-missing-hits":
        return key, prefix[: prefix.index(',"hits"')] + "}"
    if kind == "body-wrong-type":
        return key, prefix[:-2] + '"' + hits[0] + '"}'
    if kind == "key-not-json":
        return "frame " + key, body
    return None, body  # key-null


class GameFrames:
    """Seeded game-frame records for a schedule; iterate :meth:`records` once."""

    def __init__(
        self,
        rng: random.Random,
        schedule: Schedule,
        *,
        start_ms: int,
        request_topic: str,
        approval_topic: str,
        machines: list[Machine] | None = None,
        bad_fraction: float = 0.0,
    ) -> None:
        if not 0.0 <= bad_fraction <= 1.0:
            raise ConfigError(f"--bad-fraction must be within 0-1, got {bad_fraction}")
        self.rng = rng
        self.schedule = schedule
        self.start_ms = start_ms
        self.request_topic = request_topic
        self.approval_topic = approval_topic
        self.machines = machines if machines is not None else make_machines(rng)
        self.bad_fraction = bad_fraction
        self.stats = FrameStats()

    def records(self) -> Iterator[Record]:
        """Requests (counted) and approvals (not counted), approvals in event-time order."""
        rand = self.rng.random
        machines = self.machines
        n_machines = len(machines)
        # Per machine: the key's tail, the body's head, the game's hex code, last ts.
        key_tails = [f',"machine":"{m.id}","zone":"{m.zone}"}}' for m in machines]
        body_heads = [f'{{"game":"{m.game}","hits":["' for m in machines]
        game_hex = [f"{codec.GAME_CODES[m.game]:02X}" for m in machines]
        last_ts = [-1] * n_machines
        impacts, n_impacts = _IMPACT_HEX, len(_IMPACT_HEX)
        middles, n_middles = _MIDDLE_HEX, len(_MIDDLE_HEX)
        pending: list[tuple[int, int, str | None, str]] = []
        time_of = self.schedule.time_of
        start_ms = self.start_ms
        rq, rs = self.request_topic, self.approval_topic
        bad_fraction = self.bad_fraction
        stats = self.stats
        clock = start_ms
        for i in range(self.schedule.total):
            m = int(rand() * n_machines)
            ts = start_ms + round(time_of(i) * 1000.0)
            if ts <= last_ts[m]:
                ts = last_ts[m] + 1
            last_ts[m] = ts
            if ts > clock:
                clock = ts
                while pending and pending[0][0] <= clock:
                    due, _, pkey, pbody = heapq.heappop(pending)
                    stats.approvals += 1
                    yield (rs, pkey, pbody, due, False)
            g = game_hex[m]
            hits = [
                impacts[int(rand() * n_impacts)] + middles[int(rand() * n_middles)] + g
                for _ in range(int(rand() * 5) + 1)
            ]
            head = body_heads[m]
            body = head + '","'.join(hits) + '"]}'
            key: str | None = '{"ts":' + str(ts) + key_tails[m]
            if bad_fraction and rand() < bad_fraction:
                kind = BAD_KINDS[int(rand() * len(BAD_KINDS))]
                assert key is not None
                key, body = _spoil(self.rng, kind, key, body, hits, head)
                stats.bad += 1
            stats.frames += 1
            yield (rq, key, body, ts, True)
            if rand() < APPROVAL_PROBABILITY:
                due = ts + int(rand() * (APPROVAL_DELAY_MAX_MS + 1))
                heapq.heappush(pending, (due, i, key, body))
        while pending:
            due, _, pkey, pbody = heapq.heappop(pending)
            stats.approvals += 1
            yield (rs, pkey, pbody, due, False)
