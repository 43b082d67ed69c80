"""Where a peer beats `rate` on a seed by holding through a rise: could any policy that decides
from what it has seen have held there and kept the objective (issue 38)?

Run: ``.venv/bin/python benchmarks/twin_limit.py --seeds 1000-1099 [--scenario stateful]``
(``--fresh``: 3000-3099). No oracle; 1-3 minutes a set on the shared 2-core machine.

Issue 38's per-seed check: no peer beats `rate` on violation seconds, executor-seconds and
reversals together on more than 5 % of the seeds. For every seed where a peer does, this
prints why, in one of three kinds:

- **`rate` breaks the objective where the peer does not**: `benchmarks/information_limit.py`'s
  verdict on `rate`'s violation (``before onset``: decided before any tick could see the
  change; otherwise avoidable);
- **both break the objective**, for as many seconds: not analysed (a twin is judged on the
  objective everywhere);
- **`rate` buys what the peer holds** (both keep the objective, `rate` spends more): each run
  of ticks where `rate` asks for more executors than the peer (``twins.buys``) is a bet that
  a rise lasts. For each, the latest tick ``F`` (searched from a minute after `rate`'s first
  scale-up back to 30 s before it) such that, on the seed's **twin** from ``F``
  (``twins.lasting``: the seed's input up to second ``F``, then never below the level of its
  last 5 s, for ``--horizon`` seconds):

  * the peer's counts up to ``F``, then held, break the objective on the twin, and
  * no switch at any tick after ``F`` (to any count from the one running to the usable
    maximum, held to the twin's end, reversing no change) keeps it.

  Up to tick ``F`` the seed and its twin are the same input (a tick sees the seconds before
  it), so every causal policy decides alike on both: one that is still holding at ``F`` on
  the seed (as the peer does) breaks the objective on the twin. Beside it: the latest tick
  at or before ``F`` whose switch saves the twin and the counts that do, and the **price** on
  the seed of that switch (the peer's counts with the smallest rescuing count from that tick
  until a scale-down may follow without a reversal): executor-seconds over the peer's.
  ``none``: no such ``F`` in the range (the hold could have been safe).

  And, before it, how long the bet could have waited: on the twin from `rate`'s own first
  scale-up ``T`` of the bet, the latest tick whose switch still saves it (``twin saved
  until``; ``held keeps it``: the peer's count, held, keeps the objective on it). A latest
  rescue after ``T`` means a policy could have held at ``T`` and still bought in time had the
  rise lasted: the bet was not forced by what ``T`` could see.

What it measures is a statement about the check, not about `rate`: on a seed whose every bet
is decided this way, a policy beats `rate` there only by holding where a twin of the seed
breaks the objective, or by being cheaper elsewhere in the trace. It proves nothing about the
seeds of the first kind. Deterministic.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Sequence

from autoscaler_family import dominates, parse_seeds
from information_limit import _latest, _rescues, analyse
from streamscale.autoscale import family, peers, simulator, twins

BEFORE_TICKS = 3
"""How many ticks before `rate`'s first scale-up of a bet the search for ``F`` goes back."""
AFTER_TICKS = 6
"""How many ticks after it the search starts."""
HELD_KEEPS_IT = -1
"""``Bet.deferrable`` where the peer's count, held, keeps the objective on the twin."""


@dataclasses.dataclass(frozen=True)
class Bet:
    """One run of ticks where `rate` bought what a peer held, and its twin."""

    buy: twins.Buy
    decided: int | None
    """The latest ``F`` (second) found; None: none in the range."""
    level: float
    hold_violation_s: int
    """The peer's counts, then held, on the twin from ``F``."""
    rescue: tuple[int, tuple[int, ...]] | None
    """The latest tick at or before ``F`` whose switch saves the twin, and the counts that
    do (None: none; the twin needed a larger count before any tick could see the rise)."""
    price: float | None
    """Executor-seconds of the smallest rescue on the seed over the peer's (None: no
    rescue)."""
    deferrable: int | None
    """On the twin from `rate`'s first scale-up of the bet: the latest tick whose switch still
    saves it (None: none from the first tick on; ``HELD_KEEPS_IT``: holding does)."""


@dataclasses.dataclass(frozen=True)
class Beaten:
    """One seed where a peer beats `rate`."""

    seed: int
    peer: str
    rate: simulator.Summary
    theirs: simulator.Summary
    verdict: str
    """``information limit: …`` (rate breaks the objective where the peer does not) or
    ``bets``."""
    bets: tuple[Bet, ...]

    @property
    def decided(self) -> bool:
        """Every bet of `rate` here is decided before the seed differs from its twin."""
        return bool(self.bets) and all(b.decided is not None for b in self.bets)


def _counts(run: simulator.SimResult, interval: int, ticks: int) -> tuple[int, ...]:
    return tuple(run.requested[k * interval] for k in range(ticks))


def _bet(
    trace: simulator.Trace,
    model: simulator.ClusterModel,
    buy: twins.Buy,
    theirs: tuple[int, ...],
    top: int,
    horizon_s: int,
) -> Bet:
    """The latest tick by which a holding policy has lost the twin of ``buy``'s rise."""
    interval = model.control_interval_s
    target = model.target_time_lag_s
    deferrable = _deferrable(trace, model, buy.first_tick, theirs, top, horizon_s)
    last = max(1, buy.first_tick - BEFORE_TICKS)
    for f_tick in range(buy.first_tick + AFTER_TICKS, last - 1, -1):
        f = f_tick * interval
        twin, level = twins.twin_trace(trace, f, model.latest_window_s, horizon_s)
        ticks = math.ceil(len(twin.per_second()) / interval)
        if f_tick >= ticks:
            continue
        held = theirs[: f_tick + 1] + (theirs[f_tick],) * (ticks - f_tick - 1)
        run = simulator.simulate(twin, model, simulator.Plan(held, "held"))
        first = next((t for t, x in enumerate(run.time_lag_s) if x > target + 1e-9), None)
        if first is None:
            continue
        if any(
            _rescues(twin, model, held[:k], ticks, top, reversals=False)
            for k in range(first // interval, f_tick, -1)
        ):
            continue
        latest, counts = _latest(twin, model, held, f + 1, top, reversals=False)
        price = None
        if latest is not None:
            k = latest // interval
            back = k + math.ceil(model.reversal_window_s / interval)
            bought = tuple(min(counts) if k <= j < back else n for j, n in enumerate(theirs))
            plan = simulator.simulate(trace, model, simulator.Plan(bought, "bought")).summary
            ours = simulator.simulate(trace, model, simulator.Plan(theirs, "held")).summary
            price = plan.executor_seconds - ours.executor_seconds
        return Bet(
            buy,
            f,
            level,
            run.summary.slo_violation_s,
            None if latest is None else (latest, tuple(counts)),
            price,
            deferrable,
        )
    return Bet(buy, None, 0.0, 0, None, None, deferrable)


def _deferrable(
    trace: simulator.Trace,
    model: simulator.ClusterModel,
    f_tick: int,
    theirs: tuple[int, ...],
    top: int,
    horizon_s: int,
) -> int | None:
    """The latest tick whose switch saves the twin from tick ``f_tick`` (held before)."""
    interval = model.control_interval_s
    twin, _ = twins.twin_trace(trace, f_tick * interval, model.latest_window_s, horizon_s)
    ticks = math.ceil(len(twin.per_second()) / interval)
    held = theirs[: f_tick + 1] + (theirs[f_tick],) * max(0, ticks - f_tick - 1)
    run = simulator.simulate(twin, model, simulator.Plan(held[:ticks], "held"))
    target = model.target_time_lag_s
    first = next((t for t, x in enumerate(run.time_lag_s) if x > target + 1e-9), None)
    if first is None:
        return HELD_KEEPS_IT
    latest, _ = _latest(twin, model, held[:ticks], first, top, reversals=False)
    return latest


def analyse_seed(
    seed: int, scenario: simulator.Scenario, names: Sequence[str], horizon_s: int
) -> list[Beaten]:
    """Every peer of ``names`` that beats `rate` on ``seed``, and why."""
    trace = family.generate(seed)
    model = dataclasses.replace(scenario.model, seed=seed)
    config = scenario.policy_config()
    interval = model.control_interval_s
    ticks = math.ceil(len(trace.per_second()) / interval)
    top = min(config.max_executors, model.usable_executors)
    runs = {
        name: simulator.simulate(trace, model, simulator.resolve(name, config, trace, model))
        for name in ("rate", *names)
    }
    rate = runs["rate"].summary
    found = []
    for name in names:
        theirs = runs[name].summary
        if not dominates(theirs, rate):
            continue
        if rate.slo_violation_s > theirs.slo_violation_s:
            limit = analyse(seed, scenario, None)
            found.append(
                Beaten(seed, name, rate, theirs, f"information limit: {limit.verdict()}", ())
            )
            continue
        if theirs.slo_violation_s > 0:
            # a twin's rescue is judged on the objective everywhere: not where the peer's
            # own counts already break it before the bet
            verdict = f"both break the objective ({theirs.slo_violation_s} s)"
            found.append(Beaten(seed, name, rate, theirs, verdict, ()))
            continue
        counts = _counts(runs[name], interval, ticks)
        replayed = simulator.simulate(trace, model, simulator.Plan(counts, name)).summary
        if replayed != theirs:
            raise RuntimeError(f"seed {seed}: the plan of {name}'s counts does not replay its run")
        bets = tuple(
            _bet(trace, model, buy, counts, top, horizon_s)
            for buy in twins.buys(_counts(runs["rate"], interval, ticks), counts)
        )
        found.append(Beaten(seed, name, rate, theirs, "bets", bets))
    return found


def _bet_cell(b: Bet, interval: int) -> str:
    at = b.buy.first_tick * interval
    defer = {None: "none", HELD_KEEPS_IT: "held keeps it"}.get(b.deferrable, f"{b.deferrable} s")
    head = f"{at} s: {b.buy.held} → {b.buy.most} (twin saved until {defer})"
    if b.decided is None:
        return f"{head}; none"
    rescue = "none" if b.rescue is None else f"{b.rescue[0]} s → {min(b.rescue[1])}"
    price = "–" if b.price is None else f"{b.price:+,.0f}"
    return (
        f"{head}; F {b.decided} s (level {b.level:,.0f}), held: {b.hold_violation_s} s; "
        f"rescue {rescue}, price {price}"
    )


def _spread(values: Sequence[int]) -> str:
    """``lo-hi`` (``–``: none)."""
    return f"{min(values)}-{max(values)}" if values else "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--seeds", type=parse_seeds, default=None)
    group.add_argument("--fresh", action="store_true")
    parser.add_argument("--scenario", default="generic", choices=simulator.SCENARIO_NAMES)
    parser.add_argument("--horizon", type=int, default=300, help="twin's length after F, s")
    args = parser.parse_args()
    seeds = list(family.FRESH_SEEDS) if args.fresh else args.seeds or list(family.EVALUATION_SEEDS)
    scenario = simulator.scenario_named(args.scenario)
    interval = scenario.model.control_interval_s
    started = time.perf_counter()
    beaten = [
        x for seed in seeds for x in analyse_seed(seed, scenario, peers.PEER_NAMES, args.horizon)
    ]
    print(
        f"Peers beating `rate` on the {args.scenario} cluster, seeds {seeds[0]}-{seeds[-1]} "
        f"(twins of {args.horizon} s after F):\n"
    )
    print(
        "| seed | peer | rate: violation s / executor-s | peer | kind | rate's bets: first "
        "scale-up; F, twin's level, the peer held on the twin; latest rescue, its price |"
    )
    print("|---:|---|---|---|---|---|")
    for x in beaten:
        bets = "<br>".join(_bet_cell(b, interval) for b in x.bets) or "–"
        if x.verdict != "bets":
            kind = x.verdict
        elif not x.bets:
            kind = "no run of ticks above the peer's count"
        else:
            kind = "decided by twins" if x.decided else "not all decided"
        print(
            f"| {x.seed} | {x.peer} | {x.rate.slo_violation_s} / {x.rate.executor_seconds:,.0f} "
            f"| {x.theirs.slo_violation_s} / {x.theirs.executor_seconds:,.0f} | {kind} "
            f"| {bets} |"
        )
    print()
    for name in peers.PEER_NAMES:
        mine = [x for x in beaten if x.peer == name]
        if not mine:
            continue
        limit = [x.seed for x in mine if x.verdict.startswith("information limit")]
        both = [x.seed for x in mine if x.verdict.startswith("both")]
        decided = [x.seed for x in mine if x.decided]
        waits = [x.seed for x in mine if x.verdict == "bets" and not x.decided]
        share = (len(mine) - len(decided)) / len(seeds)
        print(
            f"- {name}: beats `rate` on {len(mine)} of {len(seeds)} seeds: `rate` breaks the "
            f"objective where it does not on {len(limit)} ({limit or 'none'}); both break it "
            f"on {len(both)} ({both or 'none'}); every bet of "
            f"`rate` decided before the seed differs from its twin on {len(decided)} "
            f"({decided or 'none'}); some bet could wait on {len(waits)} ({waits or 'none'}). "
            f"Without the decided ones: {share:.0%} {'≤' if share <= 0.05 else '>'} 5 %"
        )
    bets = [b for x in beaten for b in x.bets]
    kept = [b for b in bets if b.deferrable == HELD_KEEPS_IT]
    waits = [
        b.deferrable - b.buy.first_tick * interval
        for b in bets
        if b.deferrable is not None and b.deferrable > b.buy.first_tick * interval
    ]
    decided = sum(1 for b in bets if b.decided is not None)
    print(
        f"\nBets of `rate` where a peer beats it: {len(bets)}. On the twin from `rate`'s first "
        f"scale-up, holding keeps the objective: {len(kept)}; a switch after that tick still "
        f"saves it: {len(waits)} (up to {_spread(waits)} s after it); decided before the seed "
        f"differs from a twin: {decided}."
    )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
