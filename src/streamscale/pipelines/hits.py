"""The hit codec and the game-frame record model (pure: no pyspark, no Kafka, no I/O).

A hit travels as a fixed-width hex string of 8 characters (4 bytes), one code per field
value, so that a whole column of hits decodes with fixed offsets and lookup tables
(:func:`.frame_batches.decode_hit_texts`, generated from :data:`HIT_LAYOUT`)::

    position (1-based)  1-2      3    4          5           6      7-8
    field               impact   key  direction  impactType  level  game
    width (hex chars)   2        1    1          1           1      2

- ``impact``: the value itself, 42-209, as two hex digits (``2A``-``D1``).
- ``key``: X=1 O=2 · ``direction``: UP=1 DOWN=2 RIGHT=3 LEFT=4 ·
  ``impactType``: Fatal=1 Critical=2 Special=3 Direct=4 Missed=5 · ``level``: Pro=1 Inter=2
  NewBie=3 · ``game``: the code of a fixed catalogue (:data:`GAMES`: NeonBrawl=01 ...
  ShadowBlade=08).
- Code 0 is never valid, so an all-zero hit is rejected. The encoder writes upper-case hex;
  the decoder accepts either case.

Example: ``encode_hit(Hit(42, "X", "UP", "Direct", "Pro", "NeonBrawl")) == "2A114101"``.

Decoding anything else raises :class:`HitDecodeError` with a stable ``reason`` (checked in
this order): ``type`` (not a string), ``length`` (not 8 characters), ``hex`` (not hex
digits), ``impact`` (outside 42-209), ``key``, ``direction``, ``impactType``, ``level``,
``game`` (unknown code).

A game frame is one Kafka record (on ``GAME-FRAME-RQ``; its approval, byte-identical, on
``GAME-FRAME-RS``). Both are compact JSON (no spaces, this key order):

- key, the frame header: ``{"ts":1767225600000,"machine":"123456","zone":"EU"}`` —
  ``ts`` event time in epoch milliseconds (int, also the Kafka record timestamp of the
  request), ``machine`` a 6-digit id as a string (leading zeros kept), ``zone`` one of
  EU|US|ZG|AU. A machine never repeats a ``ts``, so the header identifies the frame.
- value, the frame body: ``{"game":"NeonBrawl","hits":["2A114101","D1223201"]}`` —
  ``game`` the machine's game (a :data:`GAMES` name, the same as each hit's game),
  ``hits`` 1-5 hit strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, cast

from streamscale.errors import RecordError

Key = Literal["X", "O"]
Direction = Literal["UP", "DOWN", "RIGHT", "LEFT"]
ImpactType = Literal["Fatal", "Critical", "Special", "Direct", "Missed"]
Level = Literal["Pro", "Inter", "NewBie"]
Zone = Literal["EU", "US", "ZG", "AU"]

IMPACT_MIN: Final = 42
IMPACT_MAX: Final = 209
HIT_HEX_LENGTH: Final = 8
HITS_PER_FRAME_MIN: Final = 1
HITS_PER_FRAME_MAX: Final = 5
MACHINE_ID_DIGITS: Final = 6

KEY_CODES: Final[Mapping[str, int]] = MappingProxyType({"X": 1, "O": 2})
DIRECTION_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {"UP": 1, "DOWN": 2, "RIGHT": 3, "LEFT": 4}
)
IMPACT_TYPE_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {"Fatal": 1, "Critical": 2, "Special": 3, "Direct": 4, "Missed": 5}
)
LEVEL_CODES: Final[Mapping[str, int]] = MappingProxyType({"Pro": 1, "Inter": 2, "NewBie": 3})
GAMES: Final[tuple[str, ...]] = (
    "NeonBrawl",
    "IronFist",
    "DragonDojo",
    "StreetKing",
    "SkyRonin",
    "PixelSumo",
    "ThunderKick",
    "ShadowBlade",
)
GAME_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {name: code for code, name in enumerate(GAMES, start=1)}
)
ZONES: Final[tuple[Zone, ...]] = ("EU", "US", "ZG", "AU")

# (JSON field name, 1-based start, width in hex characters, code table or None for impact)
HIT_LAYOUT: Final[tuple[tuple[str, int, int, Mapping[str, int] | None], ...]] = (
    ("impact", 1, 2, None),
    ("key", 3, 1, KEY_CODES),
    ("direction", 4, 1, DIRECTION_CODES),
    ("impactType", 5, 1, IMPACT_TYPE_CODES),
    ("level", 6, 1, LEVEL_CODES),
    ("game", 7, 2, GAME_CODES),
)
HIT_DECODE_REASONS: Final[tuple[str, ...]] = (
    "type",
    "length",
    "hex",
    *(name for name, _, _, _ in HIT_LAYOUT),
)

_HEX8 = re.compile(r"[0-9A-Fa-f]{8}")
_MACHINE = re.compile(r"[0-9]{6}")


class HitDecodeError(RecordError):
    """A hit string that does not decode; ``reason`` is one of :data:`HIT_DECODE_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"undecodable hit ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


class FrameDecodeError(RecordError):
    """A frame key or body that is not the documented JSON; ``reason`` names what is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"malformed frame ({reason}): {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Hit:
    """One decoded hit (JSON field ``impactType`` is ``impact_type`` here)."""

    impact: int
    key: Key
    direction: Direction
    impact_type: ImpactType
    level: Level
    game: str

    def as_json_dict(self) -> dict[str, object]:
        """The hit with the JSON field names the pipelines use."""
        return {
            "impact": self.impact,
            "key": self.key,
            "direction": self.direction,
            "impactType": self.impact_type,
            "level": self.level,
            "game": self.game,
        }


def _code_hex(table: Mapping[str, int], value: str, width: int, field: str) -> str:
    code = table.get(value)
    if code is None:
        raise RecordError(f"{field} {value!r} is not one of {', '.join(table)}")
    return f"{code:0{width}X}"


def encode_hit(hit: Hit) -> str:
    """The 8-character upper-case hex form of ``hit``; ValueError if a field is out of range."""
    if type(hit.impact) is not int or not IMPACT_MIN <= hit.impact <= IMPACT_MAX:
        raise RecordError(f"impact {hit.impact!r} is not an int in {IMPACT_MIN}-{IMPACT_MAX}")
    return (
        f"{hit.impact:02X}"
        + _code_hex(KEY_CODES, hit.key, 1, "key")
        + _code_hex(DIRECTION_CODES, hit.direction, 1, "direction")
        + _code_hex(IMPACT_TYPE_CODES, hit.impact_type, 1, "impactType")
        + _code_hex(LEVEL_CODES, hit.level, 1, "level")
        + _code_hex(GAME_CODES, hit.game, 2, "game")
    )


def _by_hex(table: Mapping[str, int], width: int) -> dict[str, str]:
    return {f"{code:0{width}X}": name for name, code in table.items()}


_KEY_BY_HEX = _by_hex(KEY_CODES, 1)
_DIRECTION_BY_HEX = _by_hex(DIRECTION_CODES, 1)
_IMPACT_TYPE_BY_HEX = _by_hex(IMPACT_TYPE_CODES, 1)
_LEVEL_BY_HEX = _by_hex(LEVEL_CODES, 1)
_GAME_BY_HEX = _by_hex(GAME_CODES, 2)


def decode_hit(data: object) -> Hit:
    """Decode a hit string (or its ASCII bytes); :class:`HitDecodeError` for anything else."""
    if isinstance(data, bytes | bytearray | memoryview):
        text = bytes(data).decode("latin-1")
    elif isinstance(data, str):
        text = data
    else:
        raise HitDecodeError("type", f"expected a hex string, got {type(data).__name__}")
    if len(text) != HIT_HEX_LENGTH:
        raise HitDecodeError("length", f"{text[:32]!r} has {len(text)} characters, not 8")
    if _HEX8.fullmatch(text) is None:
        raise HitDecodeError("hex", f"{text!r} is not 8 hex digits")
    text = text.upper()
    impact = int(text[0:2], 16)
    if not IMPACT_MIN <= impact <= IMPACT_MAX:
        raise HitDecodeError("impact", f"{text!r}: impact {impact} outside 42-209")
    key = _KEY_BY_HEX.get(text[2])
    if key is None:
        raise HitDecodeError("key", f"{text!r}: unknown key code {text[2]}")
    direction = _DIRECTION_BY_HEX.get(text[3])
    if direction is None:
        raise HitDecodeError("direction", f"{text!r}: unknown direction code {text[3]}")
    impact_type = _IMPACT_TYPE_BY_HEX.get(text[4])
    if impact_type is None:
        raise HitDecodeError("impactType", f"{text!r}: unknown impactType code {text[4]}")
    level = _LEVEL_BY_HEX.get(text[5])
    if level is None:
        raise HitDecodeError("level", f"{text!r}: unknown level code {text[5]}")
    game = _GAME_BY_HEX.get(text[6:8])
    if game is None:
        raise HitDecodeError("game", f"{text!r}: unknown game code {text[6:8]}")
    return Hit(
        impact,
        cast(Key, key),
        cast(Direction, direction),
        cast(ImpactType, impact_type),
        cast(Level, level),
        game,
    )


# --- Frames ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The frame header, which is the Kafka key of both the request and its approval."""

    ts: int
    machine: str
    zone: Zone


@dataclass(frozen=True, slots=True)
class FrameBody:
    """The frame body (the Kafka value): the machine's game and 1-5 hit strings."""

    game: str
    hits: tuple[str, ...]


def header_json(header: FrameHeader) -> str:
    """The compact JSON key of a frame, exactly as the generator writes it."""
    return f'{{"ts":{header.ts},"machine":"{header.machine}","zone":"{header.zone}"}}'


def body_json(body: FrameBody) -> str:
    """The compact JSON value of a frame, exactly as the generator writes it."""
    return json.dumps({"game": body.game, "hits": list(body.hits)}, separators=(",", ":"))


def _json_object(data: object, what: str) -> dict[str, object]:
    if isinstance(data, bytes | bytearray | memoryview):
        raw: str | bytes = bytes(data)
    elif isinstance(data, str):
        raw = data
    else:
        raise FrameDecodeError("json", f"{what} is {type(data).__name__}, not JSON text")
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise FrameDecodeError("json", f"{what} is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise FrameDecodeError("json", f"{what} is not a JSON object")
    return parsed


def parse_header(data: object) -> FrameHeader:
    """Parse a frame key; :class:`FrameDecodeError` (reason json|ts|machine|zone) if invalid."""
    return header_of(_json_object(data, "frame key"))


def header_of(obj: Mapping[str, object]) -> FrameHeader:
    """The header of a parsed frame key; :class:`FrameDecodeError` (reason ts|machine|zone)
    if a field is missing, of the wrong type or invalid."""
    ts = obj.get("ts")
    if type(ts) is not int or ts < 0:
        raise FrameDecodeError("ts", f"ts {ts!r} is not a non-negative integer")
    machine = obj.get("machine")
    if not isinstance(machine, str) or _MACHINE.fullmatch(machine) is None:
        raise FrameDecodeError("machine", f"machine {machine!r} is not a 6-digit string")
    zone = obj.get("zone")
    if zone not in ZONES:
        raise FrameDecodeError("zone", f"zone {zone!r} is not one of {', '.join(ZONES)}")
    return FrameHeader(ts, machine, zone)


def parse_body(data: object) -> FrameBody:
    """Parse a frame value; :class:`FrameDecodeError` (reason json|game|hits) if invalid.

    Hits are not decoded here: each is decoded (or rejected) on its own by :func:`decode_hit`.
    """
    obj = _json_object(data, "frame body")
    game = obj.get("game")
    if not isinstance(game, str) or game not in GAME_CODES:
        raise FrameDecodeError("game", f"game {game!r} is not in the catalogue")
    hits = obj.get("hits")
    if (
        not isinstance(hits, list)
        or not HITS_PER_FRAME_MIN <= len(hits) <= HITS_PER_FRAME_MAX
        or not all(isinstance(h, str) for h in hits)
    ):
        raise FrameDecodeError("hits", "hits is not a list of 1-5 strings")
    return FrameBody(game, tuple(cast(list[str], hits)))
