"""``streamscale generate referential|purchases|game-frames``: paced, seeded load generators."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

import typer

from streamscale.generate import Record, game_frames, referential
from streamscale.generate.producer import GenerateError, ProduceStats, produce
from streamscale.generate.profiles import ProfileError, Schedule, make_schedule
from streamscale.generate.purchases import id_range, purchase_records
from streamscale.kafka.client import DeliveryError
from streamscale.settings import Settings, SettingsError

app = typer.Typer(
    help="Produce seeded test loads (steady, burst or ramp) to existing topics.",
    no_args_is_help=True,
)


class Profile(StrEnum):
    """``--profile`` choices (see :mod:`streamscale.generate.profiles`)."""

    steady = "steady"
    burst = "burst"
    ramp = "ramp"


RATE = typer.Option(1000.0, "--rate", help="Records/s (steady), final rate (ramp)")
COUNT = typer.Option(None, "--count", help="Records to produce")
DURATION = typer.Option(None, "--duration", help="Seconds of load, instead of --count")
PROFILE = typer.Option(Profile.steady, "--profile", help="steady | burst (needs --count) | ramp")
START_RATE = typer.Option(0.0, "--start-rate", help="Ramp: records/s at the start")
SEED = typer.Option(None, "--seed", help="RNG seed: same seed and options, same records")
BOOTSTRAP = typer.Option(
    None, "--bootstrap", help="Bootstrap servers (default: STREAMSCALE_BOOTSTRAP_SERVERS)"
)
DELIVERY_TIMEOUT = typer.Option(
    120.0,
    "--delivery-timeout",
    help="Seconds a record may take to be acknowledged (acks=all, retried) before the run "
    "fails (delivery.timeout.ms)",
)
PROGRESS = typer.Option(
    None, "--progress/--no-progress", help="Progress bar (default: when stderr is a terminal)"
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _settings(bootstrap: str | None) -> Settings:
    try:
        overrides: dict[str, Any] = {} if bootstrap is None else {"bootstrap_servers": bootstrap}
        return Settings(**overrides)
    except SettingsError as exc:
        raise _fail(str(exc)) from None


def _schedule(
    profile: Profile, rate: float, count: int | None, duration: float | None, start_rate: float
) -> Schedule:
    try:
        return make_schedule(
            profile.value, rate=rate, count=count, duration_s=duration, start_rate=start_rate
        )
    except ProfileError as exc:
        raise _fail(str(exc)) from None


def _seed(seed: int | None) -> int:
    return secrets.randbelow(2**31) if seed is None else seed


def _summary(stats: ProduceStats, what: str, seed: int, unit: str = "records") -> None:
    rate = f"{stats.rate:,.0f} {unit}/s achieved"
    typer.echo(f"{what} in {stats.seconds:.2f} s: {rate} (seed {seed})")


def _produce(
    settings: Settings,
    records: Iterable[Record],
    schedule: Schedule,
    topics: list[str],
    label: str,
    progress: bool | None,
    delivery_timeout: float = 120.0,
    oldest_ms: int | None = None,
) -> ProduceStats:
    if delivery_timeout <= 0:
        raise _fail(f"--delivery-timeout must be > 0, got {delivery_timeout:g}")
    try:
        return produce(
            settings,
            records,
            schedule,
            topics,
            label=label,
            progress=progress,
            overrides={"delivery.timeout.ms": round(delivery_timeout * 1000)},
            oldest_ms=oldest_ms,
        )
    except (GenerateError, DeliveryError) as exc:
        raise _fail(str(exc)) from None


@app.command("referential")
def referential_command(
    rate: float = RATE,
    count: int | None = typer.Option(
        None, "--count", help="Products: ids 1..COUNT, each published once, then updates"
    ),
    duration: float | None = DURATION,
    profile: Profile = PROFILE,
    start_rate: float = START_RATE,
    seed: int | None = SEED,
    bootstrap: str | None = BOOTSTRAP,
    topic: str = typer.Option("referentiel", "--topic", help="Referential topic"),
    rename_fraction: float = typer.Option(
        0.0, "--rename-fraction", help="Fraction of products re-published under a new name"
    ),
    delete_fraction: float = typer.Option(
        0.0, "--delete-fraction", help="Fraction of products deleted by a tombstone"
    ),
    renames_of: int | None = typer.Option(
        None,
        "--renames-of",
        help="Only renames of random products among 1..N, already published (a referential "
        "changing while in use): --count renames, or --duration at --rate",
    ),
    progress: bool | None = PROGRESS,
    delivery_timeout: float = DELIVERY_TIMEOUT,
) -> None:
    """Products {"id", "name"} keyed by id, then renames and tombstones."""
    settings = _settings(bootstrap)
    if renames_of is not None:
        _renames_only(
            settings, renames_of, rate, count, duration, profile, start_rate, seed, topic,
            progress, delivery_timeout,
        )  # fmt: skip
        return
    try:
        if count is not None:
            plan = referential.plan_for_products(count, rename_fraction, delete_fraction)
            schedule = _schedule(profile, rate, plan.total, duration, start_rate)
        else:  # --duration: as many products as the records the profile makes due allow
            total = _schedule(profile, rate, None, duration, start_rate).total
            plan = referential.plan_for_records(total, rename_fraction, delete_fraction)
            schedule = _schedule(profile, rate, plan.total, None, start_rate)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    used_seed = _seed(seed)
    records = referential.referential_records(random.Random(used_seed), plan, topic)
    stats = _produce(
        settings, records, schedule, [topic], "referential", progress, delivery_timeout
    )
    _summary(
        stats,
        f"{stats.records} records to {topic} (products 1..{plan.products}, "
        f"{plan.renames} renames, {plan.deletes} tombstones)",
        used_seed,
    )


def _renames_only(
    settings: Settings,
    products: int,
    rate: float,
    count: int | None,
    duration: float | None,
    profile: Profile,
    start_rate: float,
    seed: int | None,
    topic: str,
    progress: bool | None,
    delivery_timeout: float,
) -> None:
    try:
        schedule = _schedule(profile, rate, count, duration, start_rate)
        used_seed = _seed(seed)
        records = referential.renames(random.Random(used_seed), products, schedule.total, topic)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    stats = _produce(settings, records, schedule, [topic], "renames", progress, delivery_timeout)
    _summary(stats, f"{stats.records} renames of products 1..{products} to {topic}", used_seed)


@app.command("purchases")
def purchases_command(
    rate: float = RATE,
    count: int | None = COUNT,
    duration: float | None = DURATION,
    profile: Profile = PROFILE,
    start_rate: float = START_RATE,
    seed: int | None = SEED,
    bootstrap: str | None = BOOTSTRAP,
    topic: str = typer.Option("achats", "--topic", help="Purchases topic"),
    products: int = typer.Option(
        10_000, "--products", help="Referential size: product ids 1..PRODUCTS are known"
    ),
    unknown_fraction: float = typer.Option(
        0.1, "--unknown-fraction", help="Fraction of purchases of an unknown product id"
    ),
    progress: bool | None = PROGRESS,
    delivery_timeout: float = DELIVERY_TIMEOUT,
) -> None:
    """Purchases {"id", "price"} keyed by transaction id, some of unknown products."""
    settings = _settings(bootstrap)
    schedule = _schedule(profile, rate, count, duration, start_rate)
    try:
        top = id_range(products, unknown_fraction)
        used_seed = _seed(seed)
        records = purchase_records(
            random.Random(used_seed),
            schedule.total,
            topic,
            products=products,
            unknown_fraction=unknown_fraction,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    stats = _produce(settings, records, schedule, [topic], "purchases", progress, delivery_timeout)
    _summary(stats, f"{stats.records} records to {topic} (product ids 1..{top})", used_seed)


@app.command("game-frames")
def game_frames_command(
    rate: float = typer.Option(1000.0, "--rate", help="Frames/s (steady), final rate (ramp)"),
    count: int | None = typer.Option(None, "--count", help="Frames (requests) to produce"),
    duration: float | None = DURATION,
    profile: Profile = PROFILE,
    start_rate: float = START_RATE,
    seed: int | None = SEED,
    bootstrap: str | None = BOOTSTRAP,
    topic: str = typer.Option("GAME-FRAME-RQ", "--topic", help="Frame request topic"),
    approval_topic: str = typer.Option(
        "GAME-FRAME-RS", "--approval-topic", help="Frame approval topic"
    ),
    machines: int | None = typer.Option(None, "--machines", help="Machines (default: 10-35)"),
    bad_fraction: float = typer.Option(
        0.0, "--bad-fraction", help="Fraction of frames spoiled for dead-letter tests"
    ),
    start_ms: int | None = typer.Option(
        None, "--start-ms", help="Event time of the first frame, epoch ms (default: now)"
    ),
    progress: bool | None = PROGRESS,
    delivery_timeout: float = DELIVERY_TIMEOUT,
) -> None:
    """Frames to GAME-FRAME-RQ and their approvals (100 in 101) to GAME-FRAME-RS."""
    settings = _settings(bootstrap)
    schedule = _schedule(profile, rate, count, duration, start_rate)
    used_seed = _seed(seed)
    rng = random.Random(used_seed)
    try:
        generator = game_frames.GameFrames(
            rng,
            schedule,
            start_ms=int(time.time() * 1000) if start_ms is None else start_ms,
            request_topic=topic,
            approval_topic=approval_topic,
            machines=game_frames.make_machines(rng, machines),
            bad_fraction=bad_fraction,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    stats = _produce(
        settings,
        generator.records(),
        schedule,
        [topic, approval_topic],
        "frames",
        progress,
        delivery_timeout,
        oldest_ms=start_ms,  # given: checked against the topics' retention
    )
    done = generator.stats
    _summary(
        stats,
        f"{done.frames} frames to {topic} + {done.approvals} approvals to {approval_topic} "
        f"({len(generator.machines)} machines, {done.bad} spoiled)",
        used_seed,
        "frames",
    )
