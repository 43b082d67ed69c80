"""The hit codec: round trip, known vectors, every malformed input class, frame JSON."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscale.pipelines.hits import (
    DIRECTION_CODES,
    GAME_CODES,
    GAMES,
    HIT_DECODE_REASONS,
    HIT_LAYOUT,
    IMPACT_MAX,
    IMPACT_MIN,
    IMPACT_TYPE_CODES,
    KEY_CODES,
    LEVEL_CODES,
    ZONES,
    FrameBody,
    FrameDecodeError,
    FrameHeader,
    Hit,
    HitDecodeError,
    body_json,
    decode_hit,
    encode_hit,
    header_json,
    parse_body,
    parse_header,
)

hits = st.builds(
    Hit,
    impact=st.integers(IMPACT_MIN, IMPACT_MAX),
    key=st.sampled_from(list(KEY_CODES)),
    direction=st.sampled_from(list(DIRECTION_CODES)),
    impact_type=st.sampled_from(list(IMPACT_TYPE_CODES)),
    level=st.sampled_from(list(LEVEL_CODES)),
    game=st.sampled_from(GAMES),
)


@given(hits)
def test_round_trip(hit: Hit) -> None:
    encoded = encode_hit(hit)
    assert len(encoded) == 8
    assert encoded == encoded.upper()
    int(encoded, 16)
    assert decode_hit(encoded) == hit
    assert decode_hit(encoded.lower()) == hit
    assert decode_hit(encoded.encode("ascii")) == hit


@given(st.integers(0, 0xFFFFFFFF))
def test_every_8_digit_hex_decodes_or_says_why(value: int) -> None:
    text = f"{value:08X}"
    try:
        hit = decode_hit(text)
    except HitDecodeError as exc:
        assert exc.reason in HIT_DECODE_REASONS[3:]  # type, length and hex are fine here
    else:
        assert encode_hit(hit) == text


@given(
    st.one_of(
        st.text(),
        st.text(alphabet="0123456789abcdefABCDEF", min_size=6, max_size=10),
        st.binary(),
        st.none(),
        st.integers(),
        st.floats(),
        st.lists(st.text(max_size=3)),
        st.dictionaries(st.text(max_size=3), st.integers()),
    )
)
def test_anything_else_decodes_or_raises_hit_decode_error(data: Any) -> None:
    try:
        decode_hit(data)
    except HitDecodeError as exc:
        assert exc.reason in HIT_DECODE_REASONS
        assert exc.reason in str(exc)


KNOWN = [
    ("2A114101", Hit(42, "X", "UP", "Direct", "Pro", "NeonBrawl")),
    ("D1223201", Hit(209, "O", "DOWN", "Special", "Inter", "NeonBrawl")),
    ("7D243308", Hit(125, "O", "LEFT", "Special", "NewBie", "ShadowBlade")),
    ("64132205", Hit(100, "X", "RIGHT", "Critical", "Inter", "SkyRonin")),
    ("c8115203", Hit(200, "X", "UP", "Missed", "Inter", "DragonDojo")),
]


@pytest.mark.parametrize(("text", "hit"), KNOWN)
def test_known_vectors(text: str, hit: Hit) -> None:
    assert decode_hit(text) == hit
    assert encode_hit(hit) == text.upper()


MALFORMED: list[tuple[object, str]] = [
    (None, "type"),
    (42, "type"),
    (["2A114101"], "type"),
    ("", "length"),
    ("2A11410", "length"),
    ("2A1141010", "length"),
    (b"2A11410", "length"),
    ("2A11G101", "hex"),
    ("0x114101", "hex"),
    ("2A_14101", "hex"),
    (" 2A11410", "hex"),
    ("2A11410\n", "hex"),
    ("+2A11410", "hex"),
    ("2A11410é", "hex"),
    ("２A114101", "hex"),  # full-width digit
    (b"\xff" * 8, "hex"),
    ("00000000", "impact"),
    ("29114101", "impact"),
    ("D2114101", "impact"),
    ("FF114101", "impact"),
    ("2A014101", "key"),
    ("2A314101", "key"),
    ("2AF14101", "key"),
    ("2A104101", "direction"),
    ("2A154101", "direction"),
    ("2A110101", "impactType"),
    ("2A116101", "impactType"),
    ("2A114001", "level"),
    ("2A114401", "level"),
    ("2A114100", "game"),
    ("2A114109", "game"),
    ("2A1141FF", "game"),
]


@pytest.mark.parametrize(("data", "reason"), MALFORMED)
def test_malformed_inputs_say_why(data: object, reason: str) -> None:
    with pytest.raises(HitDecodeError) as info:
        decode_hit(data)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    "hit",
    [
        Hit(41, "X", "UP", "Direct", "Pro", "NeonBrawl"),
        Hit(210, "X", "UP", "Direct", "Pro", "NeonBrawl"),
        Hit(42, "Z", "UP", "Direct", "Pro", "NeonBrawl"),  # type: ignore[arg-type]
        Hit(42, "X", "NORTH", "Direct", "Pro", "NeonBrawl"),  # type: ignore[arg-type]
        Hit(42, "X", "UP", "Glancing", "Pro", "NeonBrawl"),  # type: ignore[arg-type]
        Hit(42, "X", "UP", "Direct", "Guru", "NeonBrawl"),  # type: ignore[arg-type]
        Hit(42, "X", "UP", "Direct", "Pro", "Tetris"),
        Hit(True, "X", "UP", "Direct", "Pro", "NeonBrawl"),
    ],
)
def test_encode_rejects_out_of_range_hits(hit: Hit) -> None:
    with pytest.raises(ValueError):
        encode_hit(hit)


def test_code_tables_fit_their_widths_and_never_use_zero() -> None:
    for _, _, width, table in HIT_LAYOUT:
        if table is None:
            assert 16**width > IMPACT_MAX
            continue
        codes = list(table.values())
        assert len(set(codes)) == len(codes)
        assert min(codes) >= 1
        assert max(codes) < 16**width
    assert list(GAME_CODES) == list(GAMES)


def test_as_json_dict_uses_pipeline_field_names() -> None:
    assert KNOWN[0][1].as_json_dict() == {
        "impact": 42,
        "key": "X",
        "direction": "UP",
        "impactType": "Direct",
        "level": "Pro",
        "game": "NeonBrawl",
    }


# --- frames ------------------------------------------------------------------------------

headers = st.builds(
    FrameHeader,
    ts=st.integers(0, 2**53),
    machine=st.from_regex(r"[0-9]{6}", fullmatch=True),
    zone=st.sampled_from(ZONES),
)
bodies = st.builds(
    FrameBody,
    game=st.sampled_from(GAMES),
    hits=st.lists(hits.map(encode_hit), min_size=1, max_size=5).map(tuple),
)


@given(headers)
def test_header_round_trip(header: FrameHeader) -> None:
    text = header_json(header)
    assert text == json.dumps(
        {"ts": header.ts, "machine": header.machine, "zone": header.zone}, separators=(",", ":")
    )
    assert parse_header(text) == header
    assert parse_header(text.encode()) == header


@given(bodies)
def test_body_round_trip(body: FrameBody) -> None:
    assert parse_body(body_json(body)) == body
    assert parse_body(body_json(body).encode()) == body


def test_documented_examples() -> None:
    header = parse_header('{"ts":1767225600000,"machine":"123456","zone":"EU"}')
    assert header == FrameHeader(1767225600000, "123456", "EU")
    body = parse_body('{"game":"NeonBrawl","hits":["2A114101","D1223201"]}')
    assert [decode_hit(h).game for h in body.hits] == ["NeonBrawl", "NeonBrawl"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "json"),
        (b"\xff\xfe", "json"),
        ("not json", "json"),
        ("[1,2]", "json"),
        ('{"machine":"123456","zone":"EU"}', "ts"),
        ('{"ts":"1","machine":"123456","zone":"EU"}', "ts"),
        ('{"ts":true,"machine":"123456","zone":"EU"}', "ts"),
        ('{"ts":-1,"machine":"123456","zone":"EU"}', "ts"),
        ('{"ts":1.5,"machine":"123456","zone":"EU"}', "ts"),
        ('{"ts":1,"machine":123456,"zone":"EU"}', "machine"),
        ('{"ts":1,"machine":"12345","zone":"EU"}', "machine"),
        ('{"ts":1,"machine":"1234567","zone":"EU"}', "machine"),
        ('{"ts":1,"machine":"123456","zone":"FR"}', "zone"),
        ('{"ts":1,"machine":"123456","zone":["EU"]}', "zone"),
        ('{"ts":1,"machine":"123456"}', "zone"),
    ],
)
def test_malformed_headers(data: object, reason: str) -> None:
    with pytest.raises(FrameDecodeError) as info:
        parse_header(data)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ('{"game":"NeonBrawl","hits":["2A114101"', "json"),
        ("3", "json"),
        ('{"hits":["2A114101"]}', "game"),
        ('{"game":["NeonBrawl"],"hits":["2A114101"]}', "game"),
        ('{"game":"Tetris","hits":["2A114101"]}', "game"),
        ('{"game":"NeonBrawl"}', "hits"),
        ('{"game":"NeonBrawl","hits":"2A114101"}', "hits"),
        ('{"game":"NeonBrawl","hits":[]}', "hits"),
        (
            '{"game":"NeonBrawl","hits":["2A114101","2A114101","2A114101","2A114101",'
            '"2A114101","2A114101"]}',
            "hits",
        ),
        ('{"game":"NeonBrawl","hits":[42]}', "hits"),
    ],
)
def test_malformed_bodies(data: object, reason: str) -> None:
    with pytest.raises(FrameDecodeError) as info:
        parse_body(data)
    assert info.value.reason == reason


@given(st.one_of(st.text(), st.binary(), st.none(), st.integers()))
def test_frame_parsers_never_raise_anything_else(data: Any) -> None:
    for parse in (parse_header, parse_body):
        with contextlib.suppress(FrameDecodeError):
            parse(data)
