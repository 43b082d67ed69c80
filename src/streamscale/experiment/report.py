"""The demo's report and live view: a run's timeline → summary, PNGs, interactive HTML.

The demo samples, once per interval, the lag model's snapshot of its query and the executor
counts into a :class:`TimelinePoint` (:func:`point_from_snapshot`) and keeps the autoscaler's
decisions (:class:`~streamscale.autoscale.controller.DecisionRecord`, or :class:`DecisionMark`).
This module turns them into

- :class:`LiveView`: a rich live panel on a terminal, one plain line per update otherwise;
- :func:`summarize`: the figures of ``summary.json`` (max, final lag, drain time, scale-outs…);
- :func:`write_report`: ``summary.json``, four PNGs and a self-contained ``report.html``.

A point without lag data (no snapshot yet, metrics missing or stale) keeps ``None`` in its lag
and rate fields: it is drawn as a shaded gap and never counted as zero lag, since an outage of
the signal is not a caught-up pipeline.

matplotlib and plotly are imported by :func:`write_report` only, so that the demo starts fast.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from streamscale.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from streamscale.lag.model import QuerySnapshot

SUMMARY_FILE = "summary.json"
HTML_FILE = "report.html"
PNG_FILES = ("lag_total.png", "lag_partitions.png", "executors.png", "rates.png")

_ARROWS = {"up": "↑", "down": "↓"}
_MPL_COLORS = {"up": "tab:green", "down": "tab:orange", "failed": "tab:red"}
_HTML_COLORS = {"up": "#2ca02c", "down": "#ff7f0e", "failed": "#d62728"}
_SERIES_COLORS = (
    "tab:blue",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
    "navy",
    "teal",
    "indigo",
)
"""Series colours, none of them the green, orange or red of the decision marks."""
_PLOTLY_COLORS = (
    "#1f77b4",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#7f7f7f",
    "#000080",
    "#008080",
    "#4b0082",
)
"""The same colours in hex, for plotly."""


# ----------------------------------------------------------------------------- timeline
class PartitionPoint(NamedTuple):
    """Lag of one topic-partition at one point of the timeline."""

    topic: str
    partition: int
    lag: int
    time_lag_s: float

    @property
    def key(self) -> str:
        """``"topic-partition"``, the name of the partition's series."""
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """What the run looked like ``t`` seconds after it started.

    ``total_lag`` None means no lag data at that moment (a gap, not zero lag); the rates are
    None then too. Executor counts are None when unknown.
    """

    t: float
    partitions: tuple[PartitionPoint, ...] = ()
    total_lag: int | None = None
    max_time_lag_s: float | None = None
    input_rate: float | None = None
    processed_rate: float | None = None
    executors_target: int | None = None
    executors_running: int | None = None

    @property
    def has_lag(self) -> bool:
        return self.total_lag is not None

    @property
    def lag(self) -> dict[str, int]:
        """Records lag per ``"topic-partition"``."""
        return {p.key: p.lag for p in self.partitions}


def point_from_snapshot(
    snapshot: QuerySnapshot | None,
    t: float,
    target: int | None,
    running: int | None,
    *,
    max_age_s: float | None = None,
) -> TimelinePoint:
    """A timeline point from a lag snapshot of the query and the executor counts.

    No snapshot, a snapshot without partitions, or (when ``max_age_s`` is given) one whose
    newest sample is older than ``max_age_s`` gives a point without lag data: a gap.
    """
    if (
        snapshot is None
        or not snapshot.partitions
        or (max_age_s is not None and snapshot.age_s > max_age_s)
    ):
        return TimelinePoint(t=t, executors_target=target, executors_running=running)
    return TimelinePoint(
        t=t,
        partitions=tuple(
            PartitionPoint(p.topic, p.partition, p.records_lag, p.time_lag_s)
            for p in snapshot.partitions
        ),
        total_lag=snapshot.total_lag,
        max_time_lag_s=snapshot.max_time_lag_s,
        input_rate=snapshot.input_rate,
        processed_rate=snapshot.processed_rate,
        executors_target=target,
        executors_running=running,
    )


# ---------------------------------------------------------------------------- decisions
@dataclass(frozen=True, slots=True)
class DecisionMark:
    """One autoscaler decision on the run's time axis.

    ``direction`` is up|down|none, ``outcome`` applied|held|failed (as in the decision log).
    """

    t: float
    direction: str
    desired: int
    reason: str
    outcome: str
    running: int | None = None

    @property
    def is_scaling(self) -> bool:
        """An attempted scale-out or scale-in (applied or failed), i.e. a mark on the plots."""
        return self.direction in _ARROWS and self.outcome in ("applied", "failed")

    @property
    def label(self) -> str:
        """Short label: ``↑2 scale_up_backlog`` (``failed`` appended when it failed)."""
        text = f"{_ARROWS.get(self.direction, '·')}{self.desired} {self.reason}"
        return text + (" (failed)" if self.outcome == "failed" else "")


class DecisionLike(Protocol):
    """What is read of a ``DecisionRecord`` (``time`` in seconds since the epoch)."""

    @property
    def time(self) -> float: ...
    @property
    def direction(self) -> str: ...
    @property
    def desired(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def running(self) -> int: ...


Decisions = Iterable[DecisionMark | DecisionLike | Mapping[str, Any]]
"""Marks, controller records, or decision-log lines parsed from JSON."""

_DECISION_FIELDS = ("t", "time", "direction", "desired", "reason", "outcome", "running")


def to_marks(decisions: Decisions, start_epoch: float | None = None) -> list[DecisionMark]:
    """Decisions of any accepted shape → marks sorted by ``t``.

    Controller records and decision-log mappings carry ``time`` in epoch seconds:
    ``start_epoch`` (the run's start) is then required to place them on the run's axis.
    """
    marks: list[DecisionMark] = []
    for d in decisions:
        if isinstance(d, DecisionMark):
            marks.append(d)
            continue
        if isinstance(d, Mapping):
            fields: dict[str, Any] = {name: d.get(name) for name in _DECISION_FIELDS}
        else:
            fields = {name: getattr(d, name, None) for name in _DECISION_FIELDS}
        t = fields["t"]
        if t is None:
            epoch = fields["time"]
            if epoch is None:
                raise ConfigError(f"decision without time: {d!r}")
            if start_epoch is None:
                raise ConfigError("decisions timed in epoch seconds need start_epoch")
            t = float(epoch) - start_epoch
        running = fields["running"]
        marks.append(
            DecisionMark(
                t=float(t),
                direction=str(fields["direction"]),
                desired=int(fields["desired"]),
                reason=str(fields["reason"]),
                outcome=str(fields["outcome"]),
                running=None if running is None else int(running),
            )
        )
    marks.sort(key=lambda m: m.t)
    return marks


# --------------------------------------------------------------------------- scale events
@dataclass(frozen=True, slots=True)
class StateMove:
    """One applied change of the executor count and what it cost the query's state.

    From the decision records: the change (``running`` → ``desired``, applied), the state
    partitions the executors it removed held loaded (``removed``), and the cost the controller
    measured over the batches after it (``scale_costs``: the pause above the steady fit, the
    state stores those batches reloaded from the checkpoint, their load time and bytes
    copied). ``pause_s`` is None when the run ended before the change's cost was measured.
    """

    t: float
    before: int
    after: int
    reason: str
    removed_partitions: int = 0
    """State partitions held loaded by the executors the change removed (a scale-in)."""
    removed_bytes: int | None = None
    batches: int | None = None
    pause_s: float | None = None
    reloaded: int | None = None
    """State stores reloaded from the checkpoint by the batches after the change."""
    load_s: float | None = None
    bytes_copied: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "t_s": round(self.t, 3),
            "before": self.before,
            "after": self.after,
            "reason": self.reason,
            "removed_partitions": self.removed_partitions,
            "removed_bytes": self.removed_bytes,
            "batches": self.batches,
            "pause_s": None if self.pause_s is None else round(self.pause_s, 3),
            "reloaded": self.reloaded,
            "load_s": None if self.load_s is None else round(self.load_s, 3),
            "bytes_copied": self.bytes_copied,
        }


def _get(d: Any, name: str, default: Any = None) -> Any:
    if isinstance(d, Mapping):
        return d.get(name, default)
    return getattr(d, name, default)


def state_moves(decisions: Decisions, start_epoch: float | None = None) -> list[StateMove]:
    """Every applied scale event of the decision records, with its measured cost.

    A measured cost (``scale_costs``, stamped with the change's epoch time) belongs to the
    applied change with the same executor counts nearest in time; marks (no epoch time, no
    costs) give changes without cost. Sorted by time on the run's axis.
    """
    changes: list[tuple[float, StateMove]] = []
    costs: list[Mapping[str, Any]] = []
    for d in decisions:
        costs += list(_get(d, "scale_costs", ()) or ())
        if _get(d, "outcome") != "applied" or _get(d, "direction") not in ("up", "down"):
            continue
        epoch = _get(d, "time")
        if isinstance(d, DecisionMark) or epoch is None:
            t = float(_get(d, "t", 0.0))
            epoch_t = None
        else:
            if start_epoch is None:
                raise ConfigError("decisions timed in epoch seconds need start_epoch")
            epoch_t = float(epoch)
            t = epoch_t - start_epoch
        removed = list(_get(d, "removed", ()) or ())
        sizes = [r[3] for r in removed]
        move = StateMove(
            t=t,
            before=int(_get(d, "running", 0) or 0),
            after=int(_get(d, "desired")),
            reason=str(_get(d, "reason")),
            removed_partitions=sum(int(r[2]) for r in removed),
            removed_bytes=None if any(s is None for s in sizes) else sum(int(s) for s in sizes),
        )
        changes.append((math.inf if epoch_t is None else epoch_t, move))
    taken: set[int] = set()
    for cost in costs:
        if cost.get("lost"):
            continue  # executors lost: no applied change of the log
        candidates = [
            (abs(epoch - float(cost["time"])), i)
            for i, (epoch, m) in enumerate(changes)
            if i not in taken
            and math.isfinite(epoch)
            and (m.before, m.after) == (int(cost["before"]), int(cost["after"]))
        ]
        if not candidates:
            continue
        _, i = min(candidates)
        taken.add(i)
        epoch, m = changes[i]
        changes[i] = (
            epoch,
            replace(
                m,
                batches=int(cost["batches"]),
                pause_s=float(cost["pause_s"]),
                reloaded=int(cost["reloaded"]),
                load_s=float(cost["load_s"]),
                bytes_copied=int(cost["bytes_copied"]),
            ),
        )
    return sorted((m for _, m in changes), key=lambda m: m.t)


# ------------------------------------------------------------------------------ summary
def summarize(
    points: Sequence[TimelinePoint],
    decisions: Decisions,
    *,
    records_in: int,
    records_out: int,
    verified: bool,
    extra: Mapping[str, Any] | None = None,
    start_epoch: float | None = None,
    drain_threshold: int = 0,
) -> dict[str, Any]:
    """The run's figures, JSON-ready (floats rounded to ms, None for unknown).

    - ``max_lag``: the highest total records lag seen; ``final_lag``: the total lag of the last
      point that has lag data (None when no point has any).
    - ``drain_time_s``: seconds from the lag peak — the *last* point whose total lag equals
      ``max_lag``, where the drain starts — to the first later point with lag data whose total
      lag is ≤ ``drain_threshold`` (0: fully caught up). Points without lag data are skipped,
      never taken as drained. 0.0 when the lag never exceeded the threshold; None when it
      never came back to it after the peak, or there is no lag data.
    - ``scale_outs`` / ``scale_ins``: applied decisions up / down (``scale_failures``: failed).
    - ``verified``: True only when ``verified`` is exactly True.
    - ``state_moves``: every applied change with what it cost the state
      (:func:`state_moves`); ``scale_events_measured``, ``max_scale_pause_s``,
      ``state_reloaded_after_scaling`` and ``state_bytes_copied_after_scaling`` sum them up.

    ``extra`` entries are added after these and cannot override them.
    """
    ordered = sorted(points, key=lambda p: p.t)
    data = [p for p in ordered if p.total_lag is not None]
    lags = [p.total_lag for p in data if p.total_lag is not None]
    max_lag = max(lags) if lags else None
    peak_t = drained_t = drain_time = None
    if max_lag is not None and max_lag <= drain_threshold:
        drain_time = 0.0
    elif max_lag is not None:
        peak = max(i for i, lag in enumerate(lags) if lag == max_lag)
        peak_t = data[peak].t
        drained = next((i for i in range(peak + 1, len(lags)) if lags[i] <= drain_threshold), None)
        if drained is not None:
            drained_t = data[drained].t
            drain_time = drained_t - peak_t
    marks = to_marks(decisions, start_epoch)
    applied = [m for m in marks if m.outcome == "applied"]

    def peak_of(values: Iterable[float | int | None]) -> Any:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    summary: dict[str, Any] = {
        "verified": verified is True,
        "records_in": records_in,
        "records_out": records_out,
        "max_lag": max_lag,
        "final_lag": lags[-1] if lags else None,
        "drain_time_s": _num(drain_time),
        "scale_outs": sum(1 for m in applied if m.direction == "up"),
        "scale_ins": sum(1 for m in applied if m.direction == "down"),
        "scale_failures": sum(1 for m in marks if m.is_scaling and m.outcome == "failed"),
        "decisions": len(marks),
        "drain_threshold": drain_threshold,
        "peak_lag_t_s": _num(peak_t),
        "drained_at_s": _num(drained_t),
        "duration_s": _num(ordered[-1].t if ordered else 0.0),
        "max_time_lag_s": _num(peak_of(p.max_time_lag_s for p in data)),
        "max_input_rate": _num(peak_of(p.input_rate for p in data)),
        "max_processed_rate": _num(peak_of(p.processed_rate for p in data)),
        "max_executors_target": peak_of(p.executors_target for p in ordered),
        "max_executors_running": peak_of(p.executors_running for p in ordered),
        "final_executors_running": next(
            (p.executors_running for p in reversed(ordered) if p.executors_running is not None),
            None,
        ),
        "points": len(ordered),
        "points_without_lag": len(ordered) - len(data),
    }
    moves = state_moves(decisions, start_epoch)
    measured = [m for m in moves if m.pause_s is not None]
    summary |= {
        "scale_events_measured": len(measured),
        "max_scale_pause_s": _num(peak_of(m.pause_s for m in measured)),
        "state_reloaded_after_scaling": sum(m.reloaded or 0 for m in measured),
        "state_bytes_copied_after_scaling": sum(m.bytes_copied or 0 for m in measured),
        "state_moves": [m.as_dict() for m in moves],
    }
    for key, value in (extra or {}).items():
        summary.setdefault(key, value)
    return summary


def _num(value: float | None) -> float | None:
    """Rounded to the millisecond; None for unknown or non-finite (JSON has no NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 3)


# ------------------------------------------------------------------------------ series
@dataclass(frozen=True)
class _Series:
    """The timeline as columns, None where unknown."""

    t: list[float]
    total: list[int | None]
    partitions: dict[str, list[int | None]]
    target: list[int | None]
    running: list[int | None]
    input_rate: list[float | None]
    processed_rate: list[float | None]
    gaps: list[tuple[float, float]]
    """Spans (start, end) where lag data is missing, from neighbour to neighbour."""


def _series(points: Sequence[TimelinePoint]) -> _Series:
    ordered = sorted(points, key=lambda p: p.t)
    keys = sorted(
        {(p.topic, p.partition) for point in ordered for p in point.partitions},
    )
    partitions: dict[str, list[int | None]] = {}
    for topic, partition in keys:
        key = f"{topic}-{partition}"
        partitions[key] = [point.lag.get(key) if point.has_lag else None for point in ordered]
    gaps: list[tuple[float, float]] = []
    i = 0
    while i < len(ordered):
        if ordered[i].has_lag:
            i += 1
            continue
        j = i
        while j + 1 < len(ordered) and not ordered[j + 1].has_lag:
            j += 1
        start = ordered[i - 1].t if i > 0 else ordered[i].t
        end = ordered[j + 1].t if j + 1 < len(ordered) else ordered[j].t
        gaps.append((start, end))
        i = j + 1
    return _Series(
        t=[p.t for p in ordered],
        total=[p.total_lag for p in ordered],
        partitions=partitions,
        target=[p.executors_target for p in ordered],
        running=[p.executors_running for p in ordered],
        input_rate=[p.input_rate if p.has_lag else None for p in ordered],
        processed_rate=[p.processed_rate if p.has_lag else None for p in ordered],
        gaps=gaps,
    )


# ------------------------------------------------------------------------------- report
def write_report(
    out_dir: Path | str,
    points: Sequence[TimelinePoint],
    decisions: Decisions,
    summary: Mapping[str, Any],
    *,
    start_epoch: float | None = None,
    title: str = "streamscale demo",
) -> list[Path]:
    """Write ``summary.json``, the four PNGs and ``report.html`` into ``out_dir``.

    Returns the written paths (summary first, HTML last). The HTML embeds plotly.js, so it
    opens offline.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    series = _series(points)
    marks = [m for m in to_marks(decisions, start_epoch) if m.is_scaling]
    written = [out / SUMMARY_FILE]
    written[0].write_text(
        json.dumps(dict(summary), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    written += _write_pngs(out, series, marks, title)
    html_path = out / HTML_FILE
    moves = state_moves(decisions, start_epoch)
    html_path.write_text(_html(series, marks, summary, title, moves), encoding="utf-8")
    written.append(html_path)
    return written


def _nan(values: Sequence[float | int | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _write_pngs(out: Path, s: _Series, marks: list[DecisionMark], title: str) -> list[Path]:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    def draw_total(ax: Axes) -> None:
        ax.plot(s.t, _nan(s.total), color=_SERIES_COLORS[0], label="total lag")
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))

    def draw_partitions(ax: Axes) -> None:
        for i, (key, values) in enumerate(s.partitions.items()):
            colour = _SERIES_COLORS[i % len(_SERIES_COLORS)]
            ax.plot(s.t, _nan(values), color=colour, linewidth=1.2, label=key)
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))

    def draw_executors(ax: Axes) -> None:
        blue, purple = _SERIES_COLORS[:2]
        ax.step(s.t, _nan(s.target), where="post", color=blue, linewidth=2.5, label="target")
        ax.step(s.t, _nan(s.running), where="post", color=purple, ls="--", label="running")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        counts = [v for v in (*s.target, *s.running) if v is not None]
        ax.set_ylim(0, max(counts, default=1) + 0.5)

    def draw_rates(ax: Axes) -> None:
        ax.plot(s.t, _nan(s.input_rate), color=_SERIES_COLORS[0], label="input")
        ax.plot(s.t, _nan(s.processed_rate), color=_SERIES_COLORS[1], label="processed")
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))

    plots: list[tuple[str, str, str, Callable[[Axes], None], bool]] = [
        (PNG_FILES[0], "total records lag", "records", draw_total, True),
        (PNG_FILES[1], "records lag per partition", "records", draw_partitions, True),
        (PNG_FILES[2], "executors: target vs running", "executors", draw_executors, False),
        (PNG_FILES[3], "input vs processed rate", "records/s", draw_rates, True),
    ]
    paths = []
    for name, subtitle, ylabel, draw, lag_based in plots:
        fig = Figure(figsize=(10, 4.5), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        if s.t:
            draw(ax)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
        if lag_based:
            for i, (start, end) in enumerate(s.gaps):
                ax.axvspan(
                    start,
                    end,
                    color="grey",
                    alpha=0.2,
                    linewidth=0,
                    label="no lag metrics" if i == 0 else "_nolegend_",
                )
        _mark_mpl(ax, marks)
        ax.set_title(f"{title} — {subtitle}")
        ax.set_xlabel("seconds since start")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small", ncols=1 + len(s.partitions) // 12)
        path = out / name
        fig.savefig(path, format="png")
        paths.append(path)
    return paths


def _mark_mpl(ax: Axes, marks: list[DecisionMark]) -> None:
    """Vertical lines for scaling decisions, labelled with direction, target and reason."""
    seen: set[str] = set()
    for m in marks:
        kind = "failed" if m.outcome == "failed" else m.direction
        legend = {"up": "scale-out", "down": "scale-in", "failed": "failed scaling"}[kind]
        ax.axvline(
            m.t,
            color=_MPL_COLORS[kind],
            linestyle=":" if kind == "failed" else "--",
            linewidth=1.3,
            label="_nolegend_" if kind in seen else legend,
        )
        seen.add(kind)
        ax.text(
            m.t,
            0.98,
            f" {m.label}",
            transform=ax.get_xaxis_transform(),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color=_MPL_COLORS[kind],
        )


# --------------------------------------------------------------------------------- html
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.7em; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #2ca02c; font-weight: bold; } .ko { color: #d62728; font-weight: bold; }
"""


def _opt(value: float | int | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _move_rows(moves: Sequence[StateMove]) -> str:
    """Rows of the state table: per applied change, the state it moved and its pause."""
    rows = []
    for m in moves:
        removed = (
            f"{m.removed_partitions} ({_opt(m.removed_bytes, ',')} B)"
            if m.before > m.after
            else "–"
        )
        rows.append(
            f"<tr><td class='num'>{m.t:.1f}</td><td>{m.before} → {m.after}</td>"
            f"<td>{html.escape(m.reason)}</td><td class='num'>{removed}</td>"
            f"<td class='num'>{_opt(m.reloaded, ',')}</td>"
            f"<td class='num'>{_opt(m.bytes_copied, ',')}</td>"
            f"<td class='num'>{_opt(m.load_s, '.2f')}</td>"
            f"<td class='num'>{_opt(m.pause_s, '.2f')}</td>"
            f"<td class='num'>{_opt(m.batches, 'd')}</td></tr>"
        )
    return "\n".join(rows)


def _html(
    s: _Series,
    marks: list[DecisionMark],
    summary: Mapping[str, Any],
    title: str,
    moves: Sequence[StateMove] = (),
) -> str:
    import plotly.io as pio  # type: ignore[import-untyped]

    figure = _plotly_figure(s, marks, title)
    plot = pio.to_html(
        figure,
        full_html=False,
        include_plotlyjs=True,
        div_id="timeline",
        config={"displaylogo": False, "responsive": True},
    )
    rows = "\n".join(
        f"<tr><th>{html.escape(str(k))}</th>{_cell(k, v)}</tr>" for k, v in summary.items()
    )
    decision_rows = "\n".join(
        f"<tr><td class='num'>{m.t:.1f}</td><td>{html.escape(m.direction)}</td>"
        f"<td class='num'>{m.desired}</td><td>{html.escape(m.reason)}</td>"
        f"<td>{html.escape(m.outcome)}</td></tr>"
        for m in marks
    )
    summary_json = json.dumps(dict(summary), allow_nan=False).replace("</", "<\\/")
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)} — report</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{html.escape(title)} — report</h1>
<p>Generated {generated}. Drag to zoom (all plots share the time axis), double-click to reset;
grey spans: no lag metrics (a gap, not zero lag); dashed lines: scaling decisions.</p>
<h2>Summary</h2>
<table id="summary">
{rows}
</table>
<h2>Timeline</h2>
{plot}
<h2>Scaling decisions</h2>
<table id="decisions">
<tr><th>t (s)</th><th>direction</th><th>desired</th><th>reason</th><th>outcome</th></tr>
{decision_rows or "<tr><td colspan='5'>none</td></tr>"}
</table>
<h2>State moved by each scale event, and its cost</h2>
<p>Per applied change: the state partitions the removed executors held loaded, the state
stores the batches after it reloaded from the checkpoint (bytes copied, load time), and the
pause it caused (batch time above the steady fit), as the autoscaler measured them.</p>
<table id="state-moves">
<tr><th>t (s)</th><th>executors</th><th>reason</th><th>state partitions removed</th>
<th>state stores reloaded</th><th>bytes copied</th><th>load s</th><th>pause s</th>
<th>batches measured</th></tr>
{_move_rows(moves) or "<tr><td colspan='9'>none</td></tr>"}
</table>
<script type="application/json" id="summary-json">{summary_json}</script>
</body>
</html>
"""


def _cell(key: str, value: Any) -> str:
    if key == "verified":
        return "<td class='ok'>passed</td>" if value is True else "<td class='ko'>failed</td>"
    if value is None:
        return "<td>n/a</td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, int):
        return f"<td class='num'>{value:,}</td>"
    if isinstance(value, float):
        return f"<td class='num'>{value:,.3f}</td>"
    if isinstance(value, str):
        return f"<td>{html.escape(value)}</td>"
    return f"<td>{html.escape(json.dumps(value, default=str))}</td>"


def _plotly_figure(s: _Series, marks: list[DecisionMark], title: str) -> Any:
    import plotly.graph_objects as go  # type: ignore[import-untyped]
    from plotly.subplots import make_subplots  # type: ignore[import-untyped]

    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=(
            "total records lag",
            "records lag per partition",
            "executors: target vs running",
            "input vs processed rate (records/s)",
        ),
    )

    def line(name: str, y: Sequence[float | int | None], row: int, **kw: Any) -> None:
        group = ("lag", "partitions", "executors", "rates")[row - 1]
        fig.add_trace(
            go.Scatter(
                x=s.t,
                y=list(y),
                name=name,
                mode="lines",
                connectgaps=False,
                legendgroup=group,
                legendgrouptitle_text=group,
                **kw,
            ),
            row=row,
            col=1,
        )

    blue, purple = _PLOTLY_COLORS[:2]
    line("total lag", s.total, 1, line_color=blue)
    for i, (key, values) in enumerate(s.partitions.items()):
        line(key, values, 2, line_color=_PLOTLY_COLORS[i % len(_PLOTLY_COLORS)])
    line("target", s.target, 3, line_shape="hv", line_width=3, line_color=blue)
    line("running", s.running, 3, line_shape="hv", line_dash="dash", line_color=purple)
    line("input", s.input_rate, 4, line_color=blue)
    line("processed", s.processed_rate, 4, line_color=purple)
    for start, end in s.gaps:
        for row in (1, 2, 4):
            fig.add_vrect(
                x0=start, x1=end, fillcolor="grey", opacity=0.2, line_width=0, row=row, col=1
            )
    for kind, symbol, name in (
        ("up", "triangle-up", "scale-out"),
        ("down", "triangle-down", "scale-in"),
        ("failed", "x", "failed scaling"),
    ):
        chosen = [m for m in marks if ("failed" if m.outcome == "failed" else m.direction) == kind]
        for m in chosen:
            fig.add_vline(
                x=m.t,
                line_color=_HTML_COLORS[kind],
                line_dash="dot" if kind == "failed" else "dash",
                line_width=1.5,
                row="all",
                col=1,
            )
            fig.add_annotation(
                x=m.t,
                y=1,
                xref="x",
                yref="y domain",
                text=m.label,
                showarrow=False,
                textangle=-90,
                xanchor="right",
                yanchor="top",
                font={"size": 10, "color": _HTML_COLORS[kind]},
            )
        if chosen:
            fig.add_trace(
                go.Scatter(
                    x=[m.t for m in chosen],
                    y=[m.desired for m in chosen],
                    mode="markers",
                    name=name,
                    marker={"symbol": symbol, "size": 12, "color": _HTML_COLORS[kind]},
                    text=[f"{m.label} ({m.outcome})" for m in chosen],
                    hovertemplate="t=%{x:.1f}s: %{text}<extra></extra>",
                    legendgroup="executors",
                    legendgrouptitle_text="executors",
                ),
                row=3,
                col=1,
            )
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(dtick=1, row=3, col=1)
    fig.update_xaxes(title_text="seconds since start", row=4, col=1)
    fig.update_layout(
        title_text=title,
        height=1200,
        hovermode="x unified",
        template="plotly_white",
        legend={"groupclick": "toggleitem"},
    )
    return fig


# ---------------------------------------------------------------------------- live view
class LiveView:
    """The demo's live view: a rich panel on a terminal, else one plain line per update.

    ``console`` (or a console on ``stream``, stdout by default) decides: ``is_terminal`` →
    a :class:`rich.live.Live` panel redrawn on every :meth:`update`; otherwise each update
    prints :meth:`line`. ``start_epoch`` places controller records on the run's time axis.
    Use as a context manager, or :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        stream: IO[str] | None = None,
        start_epoch: float | None = None,
        decisions_shown: int = 5,
        title: str = "streamscale demo",
        refresh_per_second: float = 4.0,
    ) -> None:
        self.console = console if console is not None else Console(file=stream)
        self.interactive = self.console.is_terminal
        self.start_epoch = start_epoch
        self.decisions_shown = decisions_shown
        self.title = title
        self.refresh_per_second = refresh_per_second
        self._live: Live | None = None

    def start(self) -> None:
        if self.interactive and self._live is None:
            self._live = Live(
                Text(f"{self.title}: starting…"),
                console=self.console,
                refresh_per_second=self.refresh_per_second,
                transient=False,
            )
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def update(self, point: TimelinePoint, decisions: Decisions = ()) -> None:
        """Show ``point`` and the latest ``decisions`` (all of the run's, or the last few)."""
        marks = to_marks(decisions, self.start_epoch)
        if not self.interactive:
            self.console.print(
                self.line(point, marks), markup=False, highlight=False, soft_wrap=True
            )
            return
        self.start()
        if self._live is not None:
            self._live.update(self.render(point, marks), refresh=True)

    def line(self, point: TimelinePoint, marks: Sequence[DecisionMark]) -> str:
        """One plain line: ``t=42s lag=12345 time_lag=3.2s in=2000/s out=2500/s
        executors=2/2 last=up:scale_up_backlog@30s decision=hold_stabilizing``.

        ``n/a`` for missing lag data, ``?`` for an unknown executor count; ``last`` is the
        latest scale-out or scale-in, ``decision`` the latest decision's reason.
        """
        if point.has_lag:
            lag = (
                f"lag={point.total_lag} time_lag={_fmt(point.max_time_lag_s, '.1f')}s "
                f"in={_fmt(point.input_rate, '.0f')}/s out={_fmt(point.processed_rate, '.0f')}/s"
            )
        else:
            lag = "lag=n/a time_lag=n/a in=n/a out=n/a"
        scaling = [m for m in marks if m.is_scaling]
        last = "-"
        if scaling:
            m = scaling[-1]
            failed = "!failed" if m.outcome == "failed" else ""
            last = f"{m.direction}:{m.reason}{failed}@{m.t:.0f}s"
        text = (
            f"t={point.t:.0f}s {lag} "
            f"executors={_count(point.executors_target)}/{_count(point.executors_running)} "
            f"last={last}"
        )
        if marks:
            text += f" decision={marks[-1].reason}"
        return text

    def render(self, point: TimelinePoint, marks: Sequence[DecisionMark]) -> RenderableType:
        """The rich panel: headline figures, per-partition lag, the last decisions."""
        head = Table.grid(padding=(0, 3))
        for _ in range(6):
            head.add_column()
        head.add_row(
            f"t [bold]{point.t:.0f}[/] s",
            f"total lag [bold]{_fmt(point.total_lag, ',')}[/]",
            f"max time lag [bold]{_fmt(point.max_time_lag_s, '.1f')}[/] s",
            f"input [bold]{_fmt(point.input_rate, ',.0f')}[/]/s",
            f"processed [bold]{_fmt(point.processed_rate, ',.0f')}[/]/s",
            f"executors [bold]{_count(point.executors_target)}[/] target / "
            f"[bold]{_count(point.executors_running)}[/] running",
        )
        parts = Table(title="lag per partition", title_justify="left", expand=False)
        parts.add_column("partition")
        parts.add_column("records lag", justify="right")
        parts.add_column("time lag (s)", justify="right")
        parts.add_column("", min_width=20)
        if point.has_lag:
            top = max((p.lag for p in point.partitions), default=0)
            for p in point.partitions:
                bar = "█" * (round(20 * p.lag / top) if top else 0)
                parts.add_row(p.key, f"{p.lag:,}", f"{p.time_lag_s:.1f}", f"[cyan]{bar}[/]")
        else:
            parts.add_row("[yellow]no lag metrics[/]", "n/a", "n/a", "")
        shown = _latest(marks, self.decisions_shown)
        decided = Table(title="last decisions", title_justify="left", expand=False)
        for name, justify in (
            ("t (s)", "right"),
            ("", "left"),
            ("desired", "right"),
            ("reason", "left"),
            ("outcome", "left"),
        ):
            decided.add_column(name, justify=justify)  # type: ignore[arg-type]
        for m in shown:
            colour = {"applied": "green", "failed": "red"}.get(m.outcome, "dim")
            decided.add_row(
                f"{m.t:.0f}",
                _ARROWS.get(m.direction, "·"),
                str(m.desired),
                m.reason,
                f"[{colour}]{m.outcome}[/]",
            )
        if not shown:
            decided.add_row("", "", "", "[dim]none yet[/]", "")
        return Panel(Group(head, parts, decided), title=self.title, title_align="left")


def _latest(marks: Sequence[DecisionMark], n: int) -> list[DecisionMark]:
    """The last ``n`` decisions that moved (or tried to move) the count, and the very latest
    decision whatever it is, so that a run of holds does not hide the scaling history."""
    if n <= 0 or not marks:
        return []
    moves = [m for m in marks[:-1] if m.direction != "none"]
    return [*moves[max(0, len(moves) - (n - 1)) :], marks[-1]]


def _fmt(value: float | int | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)
