"""Input-rate traces for the simulator: built-in shapes and CSV files.

A trace is a step function: from each point's second on, records arrive at its rate until the
next point. Built-in traces are sized for the simulator's default scenario (1 000 records/s
per executor, 8 partitions, 1..8 executors), so that every one of them needs scaling:

- ``step``: 1 000 rec/s, a step to 4 500 rec/s at 120 s, back to 1 000 rec/s at 720 s;
- ``ramp``: 500 rec/s rising linearly to 6 500 rec/s over 10 minutes, held 5 minutes, then
  falling back over 5 minutes;
- ``spikes``: 1 500 rec/s with four 30-second spikes to 6 000 rec/s, 5 minutes apart;
- ``diurnal``: two compressed "days" of 20 minutes, a sine between 1 000 and 6 000 rec/s;
- ``demo``: the profile of ``streamscale demo`` with its defaults (game sessions: 800 frames/s,
  each frame a request and, 100 times in 101, an approval — 1 592 records/s — for 36 s, a burst
  of 450 000 frames produced in about 10 s, 800 frames/s for 72 s, then nothing until 240 s);
  it comes with its own cluster (``simulator.SCENARIOS``): 8 topic-partitions, 1..2
  executors;
- ``stateful``: 1 500 rec/s with three 3-minute surges to 4 500 rec/s, 10 minutes apart, on a
  query whose state grows with what it processes: each change of the executor count reloads
  the state that moves, so the rescale pause grows from 5 s to about 45 s over the trace
  (its own cluster, ``simulator.SCENARIOS``).

A CSV trace has the header ``t_seconds,input_rate``; rows give the rate (records/s) from that
second on, with strictly increasing non-negative seconds starting at 0. The last rate holds
for ``tail_s`` seconds (default 300) so that the end of the trace shows the drain.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamscale.errors import ConfigError


class TraceError(ConfigError):
    """A trace that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Trace:
    """Input rate as a step function of time, for ``duration_s`` seconds."""

    name: str
    points: tuple[tuple[float, float], ...]
    duration_s: int
    step_changes: int | None = None
    """Number of abrupt rate changes (None for continuous shapes): a decision budget."""

    def __post_init__(self) -> None:
        if not self.points or self.points[0][0] != 0:
            raise TraceError(f"{self.name}: a trace starts with a point at t_seconds 0")
        if self.duration_s < 1:
            raise TraceError(f"{self.name}: duration must be >= 1 s")

    def rate_at(self, t: float) -> float:
        """Records/s at second ``t``."""
        rate = self.points[0][1]
        for start, value in self.points:
            if start > t:
                break
            rate = value
        return rate

    def per_second(self) -> tuple[float, ...]:
        """Rate of each whole second of the trace (index = second)."""
        rates: list[float] = []
        index = 0
        for second in range(self.duration_s):
            while index + 1 < len(self.points) and self.points[index + 1][0] <= second:
                index += 1
            rates.append(self.points[index][1])
        return tuple(rates)


def _sampled(
    name: str, duration_s: int, fn: Callable[[int], float], changes: int | None = None
) -> Trace:
    points = tuple((float(t), round(fn(t), 3)) for t in range(duration_s))
    return Trace(name, points, duration_s, changes)


def step() -> Trace:
    """One step up and one step down."""
    return Trace("step", ((0, 1000.0), (120, 4500.0), (720, 1000.0)), 1320, step_changes=2)


def ramp() -> Trace:
    """A slow rise, a plateau and a slow fall."""

    def rate(t: int) -> float:
        if t < 60:
            return 500.0
        if t < 660:
            return 500.0 + 6000.0 * (t - 60) / 600
        if t < 960:
            return 6500.0
        if t < 1260:
            return 6500.0 - 6000.0 * (t - 960) / 300
        return 500.0

    return _sampled("ramp", 1500, rate)


def spikes() -> Trace:
    """Short bursts on a steady base (each spike is two step changes)."""
    points: list[tuple[float, float]] = [(0, 1500.0)]
    for start in (150, 450, 750, 1050):
        points += [(start, 6000.0), (start + 30, 1500.0)]
    return Trace("spikes", tuple(points), 1380, step_changes=8)


def diurnal() -> Trace:
    """Two compressed days: a sine between 1 000 and 6 000 records/s, period 20 minutes."""
    period = 1200

    def rate(t: int) -> float:
        return 3500.0 - 2500.0 * math.cos(2 * math.pi * t / period)

    return _sampled("diurnal", 2 * period, rate)


DEMO_RECORDS_PER_FRAME = 1 + 100 / 101
"""A request per frame and an approval for 100 frames in 101 (``generate.game_frames``)."""


def demo(
    frames_per_s: float = 800.0,
    steady_s: int = 36,
    burst_frames: int = 450_000,
    after_s: int = 72,
    burst_s: int = 10,
    duration_s: int = 240,
) -> Trace:
    """``streamscale demo``'s default load in records/s, from the pipeline's start (defaults:
    ``DemoOptions``, 240 s runs of which the first ~40 s start the broker and the cluster)."""
    steady = round(frames_per_s * DEMO_RECORDS_PER_FRAME, 3)
    burst = round(burst_frames * DEMO_RECORDS_PER_FRAME / burst_s, 3)
    points: tuple[tuple[float, float], ...] = (
        (0, steady),
        (steady_s, burst),
        (steady_s + burst_s, steady),
        (steady_s + burst_s + after_s, 0.0),
    )
    return Trace("demo", points, duration_s, step_changes=3)


def stateful() -> Trace:
    """Three surges on a steady base, 10 minutes apart, for a query whose state grows as it
    runs (its scenario, ``simulator.SCENARIOS``): the first surge is met when moving the state
    is cheap, the last when it costs tens of seconds a change."""
    points: list[tuple[float, float]] = [(0, 1500.0)]
    for start in (120, 720, 1320):
        points += [(start, 4500.0), (start + 180, 1500.0)]
    return Trace("stateful", tuple(points), 1800, step_changes=6)


BUILTIN: dict[str, Callable[[], Trace]] = {
    "step": step,
    "ramp": ramp,
    "spikes": spikes,
    "diurnal": diurnal,
    "demo": demo,
    "stateful": stateful,
}


def parse_csv(text: str, source: str = "<trace>", tail_s: int = 300) -> Trace:
    """Parse a CSV trace; raise :class:`TraceError` with ``source:line: problem``."""
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip() for c in rows[0]] != ["t_seconds", "input_rate"]:
        raise TraceError(f"{source}:1: the header must be 't_seconds,input_rate'")
    points: list[tuple[float, float]] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise TraceError(f"{source}:{line}: expected 2 columns, found {len(row)}")
        try:
            t, rate = float(row[0]), float(row[1])
        except ValueError:
            raise TraceError(f"{source}:{line}: not a number: {','.join(row)!r}") from None
        if not (math.isfinite(t) and math.isfinite(rate)) or t < 0 or rate < 0:
            raise TraceError(f"{source}:{line}: values must be finite and >= 0")
        if t != int(t):
            raise TraceError(f"{source}:{line}: t_seconds must be a whole second, got {row[0]}")
        if points and t <= points[-1][0]:
            raise TraceError(
                f"{source}:{line}: t_seconds must increase ({t:g} after {points[-1][0]:g})"
            )
        if not points and t != 0:
            raise TraceError(f"{source}:{line}: the first row must be at t_seconds 0")
        points.append((t, rate))
    if not points:
        raise TraceError(f"{source}: no data rows")
    return Trace(Path(source).stem, tuple(points), int(points[-1][0]) + tail_s)


def from_decision_log(
    records: Sequence[Mapping[str, Any]], name: str = "replay", tail_s: int = 0
) -> Trace:
    """The input of a real run, replayed from its decision log (``decisions.jsonl``).

    Second 0 is the first record with metrics. Between two records, records arrived at
    ``Δ(processed + lag) / Δt``: processed counts the records of the batches each record lists
    (those completed since the previous one), lag is the record's ``total_lag`` — so the
    trace is exact up to when the lag was sampled, and finer than the 30 s rate average the
    records also carry. Raises :class:`TraceError` when no record has metrics.
    """
    points: list[tuple[float, float]] = []
    processed = 0
    start: float | None = None
    previous: tuple[float, float] | None = None  # (time, arrived)
    try:
        for record in sorted(records, key=lambda r: float(r["time"])):
            processed += sum(int(batch[3]) for batch in record.get("batches") or ())
            lag = record.get("total_lag")
            if lag is None:
                continue
            now, arrived = float(record["time"]), processed + int(lag)
            if previous is None:
                start = now
            else:
                second = round(previous[0] - (start or now))
                rate = max(0.0, (arrived - previous[1]) / max(now - previous[0], 1e-3))
                if points and second <= points[-1][0]:
                    points.pop()
                points.append((float(second), round(rate, 3)))
            previous = (now, arrived)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceError(f"{name}: not a decision log record: {exc}") from None
    if previous is None or start is None or not points:
        raise TraceError(f"{name}: no two decision records with metrics to replay")
    end = round(previous[0] - start)
    return Trace(name, tuple(points), max(end, int(points[-1][0]) + 1) + tail_s)


def load(name_or_path: str, tail_s: int = 300) -> Trace:
    """A built-in trace by name, a CSV trace file, or a real run's decision log (a ``.jsonl``
    file: its input replayed, :func:`from_decision_log`)."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]()
    path = Path(name_or_path)
    if not path.is_file():
        names = ", ".join(BUILTIN)
        raise TraceError(f"{name_or_path}: not a built-in trace ({names}) nor a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{name_or_path}: cannot read: {exc}") from None
    if path.suffix == ".jsonl":
        return from_decision_log(parse_decision_log(text, name_or_path), path.stem)
    return parse_csv(text, str(path), tail_s)


def parse_decision_log(text: str, source: str = "<log>") -> list[dict[str, Any]]:
    """The records of a decision log's JSON lines; :class:`TraceError` (a ValueError) naming
    ``source`` and the line otherwise."""
    records = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{source}:{line_no}: not JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise TraceError(f"{source}:{line_no}: not a decision record")
        records.append(record)
    if not records:
        raise TraceError(f"{source}: no decision record")
    return records
