"""Game frames: determinism, exact JSON shapes, weights, approvals, spoiled frames."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from streamscale.generate import Record
from streamscale.generate.game_frames import (
    APPROVAL_DELAY_MAX_MS,
    BAD_KINDS,
    DIRECTION_WEIGHTS,
    IMPACT_TYPE_WEIGHTS,
    KEY_WEIGHTS,
    LEVEL_WEIGHTS,
    GameFrames,
    make_machines,
)
from streamscale.generate.profiles import make_schedule
from streamscale.pipelines.hits import (
    GAMES,
    ZONES,
    FrameBody,
    FrameDecodeError,
    HitDecodeError,
    body_json,
    decode_hit,
    header_json,
    parse_body,
    parse_header,
)

START = 1_767_225_600_000


def generate(
    seed: int, count: int, *, profile: str = "steady", rate: float = 1000, bad: float = 0.0
) -> tuple[GameFrames, list[Record]]:
    schedule = make_schedule(profile, rate=rate, count=count)
    frames = GameFrames(
        random.Random(seed),
        schedule,
        start_ms=START,
        request_topic="RQ",
        approval_topic="RS",
        bad_fraction=bad,
    )
    return frames, list(frames.records())


@pytest.fixture(scope="module")
def large() -> tuple[GameFrames, list[Record]]:
    return generate(2024, 30_000)


def test_same_seed_same_records() -> None:
    assert generate(5, 500)[1] == generate(5, 500)[1]
    assert generate(5, 500)[1] != generate(6, 500)[1]


def test_machines() -> None:
    counts = set()
    for seed in range(200):
        machines = make_machines(random.Random(seed))
        counts.add(len(machines))
        assert 10 <= len(machines) <= 35
        assert len({m.id for m in machines}) == len(machines)
        for m in machines:
            assert len(m.id) == 6 and m.id.isdigit() and m.id[0] != "0"
            assert m.zone in ZONES
            assert m.game in GAMES
    assert min(counts) <= 12 and max(counts) >= 33
    assert len(make_machines(random.Random(1), 3)) == 3
    with pytest.raises(ValueError):
        make_machines(random.Random(1), 0)
    with pytest.raises(ValueError, match="1-1000000"):
        make_machines(random.Random(1), 1_000_001)


def test_a_million_machines_take_every_six_digit_id() -> None:
    ids = {m.id for m in make_machines(random.Random(3), 1_000_000)}
    assert len(ids) == 1_000_000
    assert all(len(i) == 6 and i.isdigit() for i in ids)
    assert "000000" in ids


def test_requests_are_exact_compact_json_with_event_time(
    large: tuple[GameFrames, list[Record]],
) -> None:
    frames, out = large
    machines = {m.id: m for m in frames.machines}
    requests = [r for r in out if r[0] == "RQ"]
    assert len(requests) == 30_000 == frames.stats.frames
    assert all(r[4] is True for r in requests)
    headers = set()
    for _, key, value, timestamp, _ in requests:
        header = parse_header(key)
        assert header_json(header) == key  # byte-exact compact form
        assert timestamp == header.ts
        machine = machines[header.machine]
        assert header.zone == machine.zone
        body = parse_body(value)
        assert body_json(body) == value
        assert body.game == machine.game
        assert all(decode_hit(h).game == body.game for h in body.hits)
        headers.add(key)
    assert len(headers) == len(requests)  # a header identifies one frame


def test_steady_event_time_follows_the_schedule(large: tuple[GameFrames, list[Record]]) -> None:
    requests = [r for r in large[1] if r[0] == "RQ"]
    # 1000 frames/s: frame i at START + i ms, bumped by at most a few ms for same-machine ties.
    lags = [r[3] - (START + i) for i, r in enumerate(requests)]
    assert min(lags) == 0
    assert max(lags) <= 10


def test_burst_headers_stay_unique() -> None:
    frames, out = generate(9, 20_000, profile="burst")
    requests = [r for r in out if r[0] == "RQ"]
    assert len({r[1] for r in requests}) == 20_000
    per_machine = len(requests) / len(frames.machines)
    assert max(r[3] for r in requests) - START < 3 * per_machine


def test_approvals(large: tuple[GameFrames, list[Record]]) -> None:
    frames, out = large
    requests = {r[1]: r for r in out if r[0] == "RQ"}
    request_position = {r[1]: i for i, r in enumerate(out) if r[0] == "RQ"}
    approvals = [r for r in out if r[0] == "RS"]
    assert len(approvals) == frames.stats.approvals
    missing = 30_000 - len(approvals)
    assert 30_000 / 101 * 0.6 < missing < 30_000 / 101 * 1.4
    next_request_ts = None  # event time of the next request, scanning backwards
    for position in range(len(out) - 1, -1, -1):
        _, key, value, timestamp, counted = out[position]
        if counted:
            next_request_ts = timestamp
            continue
        request = requests[key]
        assert value == request[2]
        assert 0 <= timestamp - request[3] <= APPROVAL_DELAY_MAX_MS
        assert request_position[key] < position
        if next_request_ts is not None:  # emitted once event time reached its due time
            assert timestamp <= next_request_ts
    delays = [r[3] - requests[r[1]][3] for r in approvals]
    assert sum(delays) / len(delays) == pytest.approx(1000, rel=0.05)
    assert len({r[1] for r in approvals}) == len(approvals)


def test_weights(large: tuple[GameFrames, list[Record]]) -> None:
    bodies = [parse_body(r[2]) for r in large[1] if r[0] == "RQ"]
    sizes = Counter(len(b.hits) for b in bodies)
    assert set(sizes) == {1, 2, 3, 4, 5}
    for size in range(1, 6):
        assert sizes[size] / len(bodies) == pytest.approx(0.2, abs=0.015)
    hits = [decode_hit(h) for b in bodies for h in b.hits]
    assert len(hits) > 80_000

    def check(field: str, weights: dict[str, int] | object) -> None:
        assert isinstance(weights, dict)
        seen = Counter(getattr(h, field) for h in hits)
        total = sum(weights.values())
        assert set(seen) == set(weights)
        for value, weight in weights.items():
            assert seen[value] / len(hits) == pytest.approx(weight / total, abs=0.01), value

    check("key", dict(KEY_WEIGHTS))
    check("direction", dict(DIRECTION_WEIGHTS))
    check("impact_type", dict(IMPACT_TYPE_WEIGHTS))
    check("level", dict(LEVEL_WEIGHTS))
    impacts = [h.impact for h in hits]
    assert min(impacts) == 42 and max(impacts) == 209
    assert sum(impacts) / len(impacts) == pytest.approx((42 + 209) / 2, abs=1)
    assert len(set(impacts)) == 168


def test_no_bad_records_by_default(large: tuple[GameFrames, list[Record]]) -> None:
    assert large[0].stats.bad == 0


def _outcome(key: str | None, value: str | None) -> str:
    if key is None:
        return "key-null"
    try:
        parse_header(key)
    except FrameDecodeError:
        return "key-not-json"
    try:
        body: FrameBody = parse_body(value)
    except FrameDecodeError as exc:
        return {"json": "body-not-json", "hits": "body-missing-or-wrong-type"}[exc.reason]
    reasons = []
    for hit in body.hits:
        try:
            decode_hit(hit)
        except HitDecodeError as exc:
            reasons.append(exc.reason)
    assert len(reasons) == 1  # exactly one spoiled hit
    return {"length": "hit-length", "hex": "hit-hex", "key": "hit-code", "impact": "hit-impact"}[
        reasons[0]
    ]


def test_spoiled_frames_cover_every_kind() -> None:
    frames, out = generate(3, 2000, bad=1.0)
    assert frames.stats.bad == frames.stats.frames == 2000
    outcomes = Counter(_outcome(r[1], r[2]) for r in out if r[0] == "RQ")
    expected = {k for k in BAD_KINDS if not k.startswith("body-")}
    expected |= {"body-not-json", "body-missing-or-wrong-type"}
    assert set(outcomes) == expected
    assert outcomes["body-missing-or-wrong-type"] == pytest.approx(2 * 2000 / 9, rel=0.25)
    # Spoiled frames are approved like any other, byte for byte.
    requests = {(r[1], r[2]) for r in out if r[0] == "RQ"}
    assert all((r[1], r[2]) in requests for r in out if r[0] == "RS")


def test_bad_fraction() -> None:
    frames, _ = generate(4, 10_000, bad=0.1)
    assert frames.stats.bad / 10_000 == pytest.approx(0.1, abs=0.015)
    with pytest.raises(ValueError):
        generate(4, 10, bad=1.5)
