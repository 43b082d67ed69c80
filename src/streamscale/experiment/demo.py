"""The experiment in one command: lag rises, executors are added, lag falls, they are removed.

:func:`run_demo` starts the embedded broker and a local standalone Spark cluster, creates the
pipeline's topics, runs the pipeline with the lag monitor (``/metrics``) and the autoscaler,
drives the load generator through phases (steady, burst, steady), shows a live view, then
stops everything it started (by PID), reads the topics back to verify the output, and writes
the report. Ctrl-C or SIGTERM stops it the same way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from streamscale import processes
from streamscale.autoscale.policy import PolicyKind
from streamscale.autoscale.runtime import AutoscaleOptions, start_autoscaler
from streamscale.autoscale.scale_cost import SETTLE, WINDOW
from streamscale.errors import Error
from streamscale.generate.profiles import make_schedule
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.offsets import TopicPartition
from streamscale.pipelines import hits as codec
from streamscale.pipelines.query import stop_between_batches
from streamscale.pipelines.topics import ENRICHMENT, GAME_SESSIONS, pipeline_topics
from streamscale.settings import LOCALITY_WAIT_PROCESS, STATE_LOCALITY_WAIT, Settings

LEAN_JVM = "-XX:+UseSerialGC -XX:ReservedCodeCacheSize=96m -XX:MaxMetaspaceSize=256m"
"""JVM options of the demo's driver and executors: less memory than G1's defaults."""

LEAN_STATE = {
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "64",
    "spark.executorEnv.MALLOC_ARENA_MAX": "2",
    "spark.executorEnv.MALLOC_MMAP_THRESHOLD_": str(4 * 2**20),
}
"""Native memory of the demo's executors, which the JVM does not track (about 500 MB of an
executor's 1.2 GB before, docs/benchmarks.md): RocksDB's memtables, block cache and index
blocks shared by all the state stores of an executor within one bound; glibc's malloc arenas
(by default 8 a core, each keeping what was freed in it) at 2, and blocks of 4 MB or more
mapped on their own, so that freeing one gives it back (the session state's rows of ~10 MB
are read and rewritten every batch)."""

LEAN_DRIVER = "-Xmn32m"
"""The driver's young generation: its heap holds little (under 100 MB), and an eden of a third
of the heap (SerialGC's default, 113 MB) is all touched between two collections."""

LEAN_EXECUTOR = "-Xmn48m"
"""The executors' young generation: their old generation holds the state's 200-280 MB, and
SerialGC's default eden (a third of the 512 MB heap) is all touched between two collections:
48 MB kept the demo's peak 90-200 MB lower (3,749 and 3,782 MB against 3,874-3,954,
docs/benchmarks.md)."""

LEAN_DAEMON = ("-Xmn24m",)
"""The standalone Master's and Worker's young generation (they run without the class archive:
:func:`streamscale.cluster.daemon_env`)."""

BROKER_HEAP = "256m"
"""Heap of the demo's broker (Kafka's start scripts give 1 GB, the embedded broker 512 MB):
the demo's topics live in the page cache, not on the heap."""

STREAMSCALE = "streamscale"
SPARK_DYNAMIC = "spark-dynamic"
SCALERS = (STREAMSCALE, SPARK_DYNAMIC)
"""Who scales the executors: streamscale's autoscaler, or Spark's own dynamic allocation
(``benchmarks/dynamic_allocation.py`` runs both on the same query and load)."""

DYNAMIC_ALLOCATION_PREFIX = "spark.dynamicAllocation."


def dynamic_allocation_conf(
    min_executors: int, max_executors: int, overrides: Sequence[tuple[str, str]] = ()
) -> dict[str, str]:
    """Spark's dynamic allocation as a user enables it on standalone without an external
    shuffle service: on, with shuffle tracking (Spark 4's default, said here: the docs ask
    for it), the same executor bounds as the autoscaler's, Spark's defaults otherwise
    (``schedulerBacklogTimeout`` 1 s, ``sustainedSchedulerBacklogTimeout`` 1 s,
    ``executorIdleTimeout`` 60 s, ``shuffleTracking.timeout`` infinite); ``overrides``
    (``spark.dynamicAllocation.*`` keys only) change them.

    The process locality wait is the one the autoscaler's actuator sets once a stateful
    query runs (:data:`~streamscale.settings.STATE_LOCALITY_WAIT`), so that the two sessions
    differ in who scales, not in where a state partition's task waits to run; the actuator
    raises its own when the stateful stage takes longer (a busy machine), this one stays."""
    conf = {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": str(min_executors),
        "spark.dynamicAllocation.maxExecutors": str(max_executors),
        LOCALITY_WAIT_PROCESS: STATE_LOCALITY_WAIT,
    }
    for key, value in overrides:
        if not key.startswith(DYNAMIC_ALLOCATION_PREFIX) or key.endswith(".enabled"):
            raise DemoError(
                f"{key!r} is not a setting of Spark's dynamic allocation to change "
                f"(a {DYNAMIC_ALLOCATION_PREFIX}* key other than an .enabled one)"
            )
        conf[key] = value
    return conf


SENTINEL_MACHINE = "000000"
"""A machine id the generator never draws (ids are 100000-999999): its frame closes sessions."""


class DemoError(Error, RuntimeError):
    """The demo cannot start (a port is taken, bad options) or failed; one clear line."""


# --- load profile (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One phase of the load: ``steady`` at ``rate`` for ``seconds``, or a ``burst`` of
    ``count`` records as fast as the broker takes them."""

    kind: str
    rate: float = 0.0
    seconds: float = 0.0
    count: int = 0

    def describe(self) -> str:
        if self.kind == "burst":
            return f"burst of {self.count:,}"
        return f"steady {self.rate:,.0f}/s for {self.seconds:.0f} s"


def parse_profile(spec: str) -> list[Phase]:
    """``steady:RATE:SECONDS,burst:COUNT,...`` → phases (a clear error for anything else)."""
    phases = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        fields = part.split(":")
        try:
            if fields[0] == "steady" and len(fields) == 3:
                phase = Phase("steady", rate=float(fields[1]), seconds=float(fields[2]))
                if phase.rate <= 0 or phase.seconds <= 0:
                    raise ValueError
            elif fields[0] == "burst" and len(fields) == 2:
                phase = Phase("burst", count=int(fields[1]))
                if phase.count <= 0:
                    raise ValueError
            else:
                raise ValueError
        except ValueError:
            raise DemoError(
                f"bad profile phase {part!r}: use steady:RATE:SECONDS or burst:COUNT, "
                "comma-separated"
            ) from None
        phases.append(phase)
    if not phases:
        raise DemoError("the profile has no phase")
    return phases


def default_profile(duration_s: float, rate: float, burst: int) -> list[Phase]:
    """Steady, a burst, steady again; generation ends early enough to drain and scale in."""
    return [
        Phase("steady", rate=rate, seconds=round(duration_s * 0.15)),
        Phase("burst", count=burst),
        Phase("steady", rate=rate, seconds=round(duration_s * 0.3)),
    ]


# --- options and result --------------------------------------------------------------------


@dataclass(frozen=True)
class DemoOptions:
    duration_s: float = 240.0
    pipeline: str = GAME_SESSIONS
    profile: str | None = None
    rate: float = 800.0
    burst: int = 450_000
    """Frames of the default profile's burst (with their approvals, about twice the records),
    sized from the measured capacity: one executor drains about 13,000 records/s of game
    sessions on Spark's connector here (batches at the 20,000 limit, ~1.3 s each), so the
    burst's ~900,000 records would take it about 70 s, past the 30 s time-lag SLO — and two
    executors are worth adding."""
    report_dir: Path = Path("streamscale-report")
    data_dir: Path | None = None
    metrics_port: int = 9464
    partitions: int = 4
    min_executors: int = 1
    max_executors: int = 2
    policy: PolicyKind = PolicyKind.RATE
    control_interval_s: float = 5.0
    stabilization_window_s: float = 30.0
    seed: int = 7
    max_offsets_per_trigger: int = 20_000
    """Short batches keep the lag signal fresh while a backlog drains."""
    delivery: str = "at-least-once"
    """Output delivery (``exactly-once``: Kafka transactions, read back ``read_committed``)."""
    source: str = "kafka"
    """How the pipeline reads Kafka: Spark's connector (what users run), ``streamscale-kafka``,
    or ``auto`` (the pipeline's measured default)."""
    secure: bool = False
    """A secured broker (SASL_SSL, SCRAM-SHA-512, ACLs: ``broker start --secure``): topics,
    load and read-back as its admin, the pipeline, its group commits, lag reads and autoscaler
    as its pipeline principal, granted only its topics, groups and transactional ids."""
    scaler: str = STREAMSCALE
    """Who scales the executors (:data:`SCALERS`): with ``spark-dynamic``, Spark's dynamic
    allocation (:func:`dynamic_allocation_conf`) and no autoscaler; the lag is measured the
    same way."""
    dynamic_allocation: tuple[tuple[str, str], ...] = ()
    """``spark-dynamic``: ``spark.dynamicAllocation.*`` settings changed from Spark's defaults."""
    run_for_s: float | None = None
    """Seconds from the pipeline's start after which the run stops, whatever its story (no
    early end once settled, no going on when slow): the common window of runs compared.
    None: the story decides (:func:`story_goes_on`)."""

    def phases(self) -> list[Phase]:
        if self.profile:
            return parse_profile(self.profile)
        return default_profile(self.duration_s, self.rate, self.burst)


@dataclass
class GeneratorState:
    """What the load thread did, for the summary and the verification.

    ``pipeline_ready`` is set once the pipeline has processed its first records: a burst
    waits for it (at most :data:`READY_WAIT_S`), so that it lands on a running pipeline
    rather than on one still starting its Python workers.
    """

    records: int = 0
    frames: int = 0
    max_event_ms: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    pipeline_ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


READY_WAIT_S = 90.0

SETTLE_S = 180.0
"""After ``--duration``, how long the run is budgeted to go on for the story to end: the
backlog drained and the executors given back."""

SETTLE_MAX_S = 900.0
"""After ``--duration``, how long a run on a machine too slow for :data:`SETTLE_S` (a busy
laptop drains a burst more slowly) may go on while its story still moves forward."""

PROGRESS_S = 60.0
"""Past :data:`SETTLE_S`, the run goes on while the lag is below its highest of this long
(the drain moves on) or has been known for less than this (a slow start), or the load is
still being produced, or the lag is 0 and the executors are not back at the minimum yet (the
scale-in is waiting out its window). Batches longer than the metrics' age limit leave gaps
in the lag: two of these without any sample end the run."""


def whole_load_seen(done_at: float | None, samples: Iterable[float]) -> bool:
    """Whether the lag read now counts the whole load (pure): the load ended at ``done_at``
    and at least two of the query's progress samples (their wall times) came after it.
    Batches run one after another, so the second was planned after the load's last record
    was written; a batch planned before reads end offsets short of it, and its lag of 0 says
    nothing (on a slow machine the first batches can end after a short load)."""
    if done_at is None:
        return False
    return sum(1 for t in set(samples) if t > done_at) >= 2


def story_goes_on(
    points: Sequence[Any],
    load_done: bool,
    elapsed_s: float,
    duration_s: float,
    min_executors: int,
) -> str:
    """Where the run is (pure): ``run`` (within ``--duration``), ``settle`` (the story ends
    within :data:`SETTLE_S` after it), ``slow`` (past that budget, the story still moving
    forward: :data:`PROGRESS_S`), or ``stop`` (the story has ended, or it stopped moving, or
    :data:`SETTLE_MAX_S` is spent)."""
    if elapsed_s < duration_s:
        return "run"
    last = points[-1] if points else None
    if (
        last is not None
        and load_done
        and last.total_lag == 0
        and last.executors_running is not None
        and last.executors_running <= min_executors
    ):
        return "stop"
    if elapsed_s < duration_s + SETTLE_S:
        return "settle"
    if elapsed_s >= duration_s + SETTLE_MAX_S or last is None:
        return "stop"
    if not load_done:
        return "slow"
    known = [p for p in points if p.total_lag is not None]
    since = known[-1].t if known else duration_s + SETTLE_S
    if last.t - since > 2 * PROGRESS_S:
        return "stop"  # no lag sample for two windows: no sign of progress
    if not known:
        return "slow"  # the first batches are slower than the metrics' age limit
    newest = known[-1]
    if newest.total_lag == 0:
        return "slow"  # the scale-in is waiting out its window
    before = [p for p in known if p.t <= newest.t - PROGRESS_S]
    if not before:
        return "slow"  # the lag is known for less than a window: too early to judge
    # Falling from the highest lag of the last window: the drain moves on (a burst produced
    # late on a busy machine peaks within the window, above the lag a window ago).
    window = [before[-1], *(p for p in known if p.t > newest.t - PROGRESS_S)]
    highest = max(p.total_lag or 0 for p in window)
    if newest.total_lag is not None and newest.total_lag < highest:
        return "slow"
    return "stop"


def _settled(points: Sequence[Any], state: GeneratorState, options: DemoOptions) -> bool:
    """The load has ended, the lag is 0 and the executors are back at the minimum."""
    if not points or not state.done.is_set():
        return False
    last = points[-1]
    running = last.executors_running
    return last.total_lag == 0 and running is not None and running <= options.min_executors


# --- memory of everything started ----------------------------------------------------------


def rss_bytes(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


class MemorySampler:
    """Peak resident memory of this process and everything it started, sampled every second
    (a JVM's address space once: :func:`~streamscale.processes.distinct`)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self.interval_s = interval_s

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            started = [os.getpid(), *processes.descendants(os.getpid())]
            self.peak = max(self.peak, rss_bytes(processes.distinct(started)))

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# --- the run -------------------------------------------------------------------------------


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM cleans up like Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def preflight(options: DemoOptions) -> None:
    """Everything that can be refused before any process starts."""
    if options.pipeline not in (ENRICHMENT, GAME_SESSIONS):
        raise DemoError(f"unknown pipeline {options.pipeline!r}: {ENRICHMENT} or {GAME_SESSIONS}")
    if options.metrics_port and processes.port_in_use(options.metrics_port):
        raise DemoError(
            f"port {options.metrics_port} on 127.0.0.1 (metrics) is taken: free it or pass "
            "--metrics-port with another port (0 picks a free one)"
        )
    if options.source not in ("auto", "kafka", "streamscale-kafka"):
        raise DemoError(f"unknown source {options.source!r}: kafka, streamscale-kafka or auto")
    if options.delivery not in ("at-least-once", "exactly-once"):
        raise DemoError(f"unknown delivery {options.delivery!r}: at-least-once or exactly-once")
    if options.duration_s < 30:
        raise DemoError("--duration must be at least 30 seconds")
    if options.scaler not in SCALERS:
        raise DemoError(f"unknown scaler {options.scaler!r}: {' or '.join(SCALERS)}")
    if options.dynamic_allocation and options.scaler != SPARK_DYNAMIC:
        raise DemoError(f"dynamic allocation settings need the {SPARK_DYNAMIC} scaler")
    dynamic_allocation_conf(1, 1, options.dynamic_allocation)
    if options.run_for_s is not None and options.run_for_s <= 0:
        raise DemoError("the run's window must be positive")
    options.phases()
    AutoscaleOptions(min_executors=options.min_executors, max_executors=options.max_executors)
    options.report_dir.mkdir(parents=True, exist_ok=True)
    if not os.access(options.report_dir, os.W_OK):
        raise DemoError(f"cannot write the report to {options.report_dir}")


def run_demo(options: DemoOptions, *, console: Any = None) -> dict[str, Any]:
    """Run the experiment; return the summary (also written to the report directory)."""
    preflight(options)
    from streamscale.experiment import report
    from streamscale.kafka import broker as embedded

    data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="streamscale-demo-"))
    began = time.time()
    points: list[report.TimelinePoint] = []
    with (
        _terminate_as_interrupt(),
        MemorySampler() as memory,
        embedded.embedded_broker(
            data_dir / "broker", heap=BROKER_HEAP, secure=options.secure
        ) as running_broker,
    ):
        with contextlib.ExitStack() as stack:
            outcome = _experiment(options, running_broker, data_dir, began, points, stack, console)
        # Spark and the cluster are stopped; the broker still runs to read the topics back.
        try:
            verification = _verify(options, outcome)
        finally:  # its Kafka clients go before the broker does, or they retry it forever
            outcome.reader.admin.close()
    summary = report.summarize(
        points,
        outcome.decisions,
        records_in=outcome.records_in,
        records_out=verification.records_out,
        verified=verification.ok,
        start_epoch=began,
        extra={
            "pipeline": options.pipeline,
            "verification": verification.message,
            "first_processed_s": outcome.first_processed_s,
            "peak_memory_mb": round(memory.peak / 2**20),
            "run_seconds": round(time.time() - began, 1),
            "phases": [p.describe() for p in options.phases()],
            "metrics_url": outcome.metrics_url,
            "executor_tasks": outcome.executor_tasks,
            "too_slow_at_s": outcome.too_slow_at_s,
            "scaler": options.scaler,
            "dynamic_allocation": dict(options.dynamic_allocation),
            **_window_figures(points, outcome),
        },
    )
    report.write_report(options.report_dir, points, outcome.decisions, summary, start_epoch=began)
    return summary


@dataclass
class Outcome:
    executor_tasks: dict[str, int]
    """Tasks run by each executor the application had (ids as Spark numbers them)."""
    settings: Settings
    records_in: int
    decisions: list[Any]
    first_processed_s: float | None
    metrics_url: str | None
    reader: TopicReader
    expected: Any
    """The reference output: sessions by window, or the purchases read back."""
    too_slow_at_s: float | None = None
    """When the run passed its budget and went on (:func:`story_goes_on`); None within it."""
    window: tuple[float, float] | None = None
    """The run's window on its time axis: from the pipeline's start to the last sample."""
    executor_spans: list[Any] = field(default_factory=list)
    """Every executor of the application (:class:`~.comparison.ExecutorSpan`) at the end of
    the window, as Spark's status store lists them."""
    placements: list[Any] = field(default_factory=list)
    """The state placement sampled each second of a compared window (``run_for_s``,
    :class:`~.comparison.PlacementSample`); empty in a demo that tells its story."""


def _window_figures(points: Sequence[Any], outcome: Outcome) -> dict[str, Any]:
    """The run's window in the figures that compare scalers (:mod:`.comparison`), keyed
    ``window``: the same rule whoever scaled."""
    from streamscale.experiment import comparison

    if outcome.window is None:
        return {}
    start, end = outcome.window
    found = comparison.figures(points, outcome.executor_spans, outcome.placements, start, end)
    return {"window": {"start_s": round(start, 3), **found.as_dict()}}


def _experiment(
    options: DemoOptions,
    running_broker: Any,
    data_dir: Path,
    began: float,
    points: list[Any],
    stack: contextlib.ExitStack,
    console: Any,
) -> Outcome:
    from streamscale import cluster
    from streamscale.autoscale.actuator import SparkActuator
    from streamscale.autoscale.state_placement import SparkStateReader
    from streamscale.experiment import report
    from streamscale.experiment.comparison import PlacementSample
    from streamscale.lag import start_monitor
    from streamscale.pipelines.runner import make_pipeline, trigger_for
    from streamscale.spark import session
    from streamscale.spark import stop as stop_session

    say = _Say(began, console)
    say(f"broker at {running_broker.bootstrap}")
    local = stack.enter_context(
        cluster.local_cluster(
            data_dir / "cluster",
            workers=1,
            cores=2,
            memory="3g",
            daemon_opts=LEAN_DAEMON,
            class_archive=False,
        )
    )
    from streamscale.kafka import security

    common: dict[str, Any] = dict(
        spark_master=local.master_url,
        checkpoint_dir=data_dir / "checkpoints",
        trigger_interval_s=1.0,
        max_offsets_per_trigger=options.max_offsets_per_trigger,
        starting_offsets="earliest",
        shuffle_partitions=4,
        driver_memory="512m",
        executor_memory="512m",
        metrics_port=options.metrics_port,
        kafka_source=options.source,
        delivery=options.delivery,
    )
    # On a secured broker the pipeline runs as its principal; what sets the stage (topics,
    # load) and checks the output is the admin's. On a plaintext one both are the same.
    settings = running_broker.client_settings(security.PIPELINE, **common)
    staging = running_broker.client_settings(security.ADMIN, **common)
    if options.secure:
        say(f"secured broker: the pipeline runs as {settings.sasl_username} (SASL_SSL, ACLs)")
    admin = KafkaAdmin(staging.kafka_config())
    stack.callback(admin.close)
    say(f"Spark cluster at {local.master_url}")
    catalog = pipeline_topics(options.partitions, settings.retention_ms, delivery=settings.delivery)
    admin.apply(catalog[options.pipeline])

    conf = {
        **local.app_conf(
            max_executors=options.max_executors, executor_memory=settings.executor_memory
        ),
        # Small JVMs: the whole experiment stays within the memory budget of a laptop.
        "spark.driver.extraJavaOptions": f"{LEAN_JVM} {LEAN_DRIVER}",
        "spark.executor.extraJavaOptions": f"{LEAN_JVM} {LEAN_EXECUTOR}",
        **LEAN_STATE,
    }
    dynamic = options.scaler == SPARK_DYNAMIC
    if dynamic:
        conf |= dynamic_allocation_conf(
            options.min_executors, options.max_executors, options.dynamic_allocation
        )
    spark = session(
        settings,
        app_name="streamscale-demo",
        extra_conf=conf,
        log_file=options.report_dir / "spark-driver.log",
    )
    stack.callback(stop_session, spark)
    monitor = start_monitor(spark, port=options.metrics_port)
    say(f"Spark application up; metrics at {monitor.server.url if monitor.server else '-'}")
    stack.callback(monitor.stop)
    metrics_url = monitor.server.url if monitor.server is not None else None

    pipeline = make_pipeline(options.pipeline, settings, str(data_dir / "checkpoints" / "demo"))
    decisions: list[Any] = []
    listed = StatusExecutors(spark, began)
    controller: Any = None
    actuator: Any = None
    if not dynamic:
        autoscale = AutoscaleOptions(
            policy=options.policy,
            min_executors=options.min_executors,
            max_executors=options.max_executors,
            interval_s=options.control_interval_s,
            stabilization_window_s=options.stabilization_window_s,
            decision_log=options.report_dir / "decisions.jsonl",
        )
        controller = start_autoscaler(
            spark,
            pipeline.name,
            monitor.tracker,
            autoscale,
            settings=settings,
            on_decision=decisions.append,
        )
        stack.callback(controller.stop)
        actuator = SparkActuator(spark)
    warm = threading.Thread(target=_warm_up, args=(spark,), name="warm-up", daemon=True)
    warm.start()  # the executor's Python workers start while the query is planned
    if dynamic:
        changed = ", ".join(f"{k}={v}" for k, v in options.dynamic_allocation) or "its defaults"
        say(f"Spark's dynamic allocation on ({changed}), {listed.running()} executor(s)")
    else:
        say(f"autoscaler on ({options.policy} policy), {controller.actuator.running()} executor(s)")
    query = pipeline.start(spark, trigger_for(settings, available_now=False))
    started_s = time.time() - began
    placement = SparkStateReader(spark)
    placements: list[Any] = []
    load_text = ", ".join(p.describe() for p in options.phases())
    say(f"pipeline {pipeline.name} started, reading with {pipeline.source}; load: {load_text}")
    stack.callback(_stop_query, query)

    state = GeneratorState()
    stop_load = threading.Event()
    stack.callback(stop_load.set)
    load = threading.Thread(
        target=_drive_load,
        args=(options, staging, state, stop_load),
        name="load-generator",
        daemon=True,
    )
    load.start()

    first_processed: float | None = None
    tasks: dict[str, int] = {}
    reader = TopicReader(
        admin,
        options.partitions,
        "read_committed" if options.delivery == "exactly-once" else None,
    )
    reference = Reference(lambda: _reference(options, staging, reader))
    view = report.LiveView(console, start_epoch=began)
    slow_since: float | None = None
    run_id = str(query.runId)
    done_at: float | None = None
    samples: set[float] = set()
    with view:
        while True:
            elapsed = time.time() - began
            if options.run_for_s is not None:
                where = "stop" if elapsed >= started_s + options.run_for_s else "run"
            else:
                where = story_goes_on(
                    points,
                    whole_load_seen(done_at, samples),
                    elapsed,
                    options.duration_s,
                    options.min_executors,
                )
            if where == "stop":
                break
            if where == "slow" and slow_since is None:
                slow_since = time.time() - began
                view.console.print(
                    f"this machine is too slow for the demo's budgets (the story was to end "
                    f"{SETTLE_S:.0f} s after --duration): going on while the lag falls, "
                    f"{SETTLE_MAX_S:.0f} s after --duration at most",
                    markup=False,
                    highlight=False,
                )
            if not query.isActive:
                raise DemoError(f"the pipeline stopped: {query.exception()}")
            if state.error is not None:
                raise DemoError(f"the load generator failed: {state.error}")
            now = time.time()
            snap = monitor.tracker.snapshot(pipeline.name, now)
            if done_at is None and state.done.is_set():
                done_at = now
            if snap is not None and snap.partitions:
                samples.add(round(now - snap.age_s, 1))
            if first_processed is None and _processed_any(snap):
                first_processed = now - began
                state.pipeline_ready.set()
            if actuator is not None:
                target = controller.target
                executors = actuator.executors()
                running = len(executors)
                for executor in executors:
                    tasks[executor.id] = max(tasks.get(executor.id, 0), executor.total_tasks)
            else:
                target, running = None, listed.running()
            point = report.point_from_snapshot(snap, now - began, target, running, max_age_s=30)
            points.append(point)
            if options.run_for_s is not None:  # a compared window: where the state ran
                with contextlib.suppress(Exception):  # a batch in flight: the next sample has it
                    where_now = placement.placement(run_id)
                    if where_now:
                        placements.append(PlacementSample(now - began, where_now))
            if _settled(points, state, options):
                reference.start()  # input complete, caught up, executors given back
            view.update(point, decisions)
            time.sleep(max(0.0, 1.0 - (time.time() - now)))
    window = (started_s, points[-1].t if points else time.time() - began)
    spans = listed.spans()
    if actuator is None:
        tasks = listed.tasks()
    stop_load.set()
    load.join(timeout=60)
    close = _closing_frame(options, staging, state)
    close()

    def lag() -> int | None:
        snap = monitor.tracker.snapshot(pipeline.name, time.time())
        return None if snap is None or snap.age_s > 10 else snap.total_lag

    outputs, expected = reference.result()
    _await_output(admin, outputs, len(expected), options.partitions, lag)
    if controller is not None:
        interval = options.control_interval_s
        _await_costs(controller, decisions, COST_WAIT_INTERVALS * interval, close)
        controller.stop()
    return Outcome(
        tasks,
        settings,
        state.records,
        decisions,
        None if first_processed is None else round(first_processed, 1),
        metrics_url,
        reader,
        expected,
        None if slow_since is None else round(slow_since, 1),
        window,
        spans,
        placements,
    )


class StatusExecutors:
    """The application's executors as Spark's status store lists them, the driver left out:
    the same view whoever scales (the autoscaler's actuator refuses a session with dynamic
    allocation on). The store keeps the last ``spark.ui.retainedDeadExecutors`` (100) removed
    ones. Times are seconds since ``began``."""

    def __init__(self, spark: Any, began: float) -> None:
        self._sc = spark.sparkContext
        self._began = began

    def _summaries(self) -> list[Any]:
        jvm: Any = self._sc._jvm
        listed = self._sc._jsc.sc().statusStore().executorList(False)
        return [
            s
            for s in jvm.scala.jdk.javaapi.CollectionConverters.asJava(listed)
            if str(s.id()) != "driver"
        ]

    def spans(self) -> list[Any]:
        """Every executor with when it was added and removed (:class:`~.comparison.
        ExecutorSpan`)."""
        from streamscale.experiment.comparison import ExecutorSpan

        out = []
        for s in self._summaries():
            removed = s.removeTime()
            out.append(
                ExecutorSpan(
                    str(s.id()),
                    s.addTime().getTime() / 1000.0 - self._began,
                    removed.get().getTime() / 1000.0 - self._began if removed.isDefined() else None,
                )
            )
        return out

    def running(self) -> int:
        return sum(1 for s in self._summaries() if bool(s.isActive()))

    def tasks(self) -> dict[str, int]:
        """Tasks each executor ran, by id."""
        return {str(s.id()): int(s.totalTasks()) for s in self._summaries()}


COST_WAIT_INTERVALS = 6
"""Control intervals the run waits, at most, for the cost of its last change."""


def _await_costs(
    controller: Any, decisions: Sequence[Any], timeout_s: float, nudge: Callable[[], None]
) -> None:
    """Wait, at most ``timeout_s``, until the autoscaler has measured the cost of every change
    it applied (its next control steps measure the batches after the last one). The load has
    ended by then: ``nudge`` (the session-closing frame again) every ``CLOSING_SPACING_S``
    gives the batches to measure on, however slowly the machine runs them."""
    applied = sum(1 for d in decisions if d.outcome == "applied" and d.direction in ("up", "down"))
    deadline = time.monotonic() + timeout_s
    while len(controller.costs) < applied and time.monotonic() < deadline:
        time.sleep(CLOSING_SPACING_S)
        nudge()


class _Say:
    """Progress lines of the start-up, stamped with the seconds since the command began."""

    def __init__(self, began: float, console: Any) -> None:
        self.began = began
        self.console = console

    def __call__(self, text: str) -> None:
        line = f"[{time.time() - self.began:5.1f}s] {text}"
        if self.console is not None:
            self.console.print(line, highlight=False, markup=False)
        else:
            print(line, flush=True)


def _warm_up(spark: Any) -> None:
    """Run one tiny Python task so that the executor's Python worker is up before batch 0."""
    with contextlib.suppress(Exception):
        spark.sparkContext.parallelize([0], 1).map(lambda x: x).count()


def _processed_any(snap: Any) -> bool:
    return snap is not None and any(p.processed_offset > 0 for p in snap.partitions)


def _stop_query(query: Any) -> None:
    with contextlib.suppress(Exception):
        stop_between_batches(query)


def _drive_load(
    options: DemoOptions, settings: Settings, state: GeneratorState, stop: threading.Event
) -> None:
    """Run the phases one after the other; the event time never goes back between phases."""
    from streamscale.generate import game_frames, purchases, referential
    from streamscale.generate.producer import produce

    rng = random.Random(options.seed)
    try:
        if options.pipeline == ENRICHMENT:
            plan = referential.plan_for_products(2_000, 0.1, 0.02)
            produce(
                settings,
                referential.referential_records(rng, plan, "referentiel"),
                make_schedule("burst", rate=math.inf, count=plan.total),
                ["referentiel"],
                progress=False,
            )
        machines = game_frames.make_machines(rng)
        for phase in options.phases():
            if stop.is_set():
                break
            if phase.kind == "burst":
                state.pipeline_ready.wait(READY_WAIT_S)
                schedule = make_schedule("burst", rate=math.inf, count=phase.count)
            else:
                schedule = make_schedule("steady", rate=phase.rate, duration_s=phase.seconds)
            if options.pipeline == GAME_SESSIONS:
                start_ms = max(int(time.time() * 1000), state.max_event_ms + 1)
                frames = game_frames.GameFrames(
                    rng,
                    schedule,
                    start_ms=start_ms,
                    request_topic="GAME-FRAME-RQ",
                    approval_topic="GAME-FRAME-RS",
                    machines=machines,
                )
                records: Iterator[Any] = _watch(frames.records(), state, stop)
                topics = ["GAME-FRAME-RQ", "GAME-FRAME-RS"]
            else:
                records = _watch(
                    purchases.purchase_records(rng, schedule.total, "achats", products=2_000),
                    state,
                    stop,
                )
                topics = ["achats"]
            stats = produce(settings, records, schedule, topics, progress=False)
            state.records += stats.records
            state.frames += stats.counted
    except BaseException as exc:
        state.error = exc
    finally:
        state.done.set()


def _watch(records: Iterator[Any], state: GeneratorState, stop: threading.Event) -> Iterator[Any]:
    """Pass records through, noting the newest event time; end early when asked to stop."""
    for record in records:
        if stop.is_set():
            return
        if record[3] > state.max_event_ms:
            state.max_event_ms = record[3]
        yield record


CLOSING_SENDS = WINDOW + SETTLE
"""The session-closing frame is sent this many times, ``CLOSING_SPACING_S`` apart: each lands
in a batch of its own, so that the batches after the scale-in (the load has ended by then) are
enough for the autoscaler to measure its pause (:data:`.scale_cost.WINDOW` batches, and
:data:`.scale_cost.SETTLE` more when it was decided on a lower bound of the capacity)."""
CLOSING_SPACING_S = 2.0
"""More than the demo's 1 s trigger: one send, one batch."""


def _closing_frame(
    options: DemoOptions, settings: Settings, state: GeneratorState
) -> Callable[[], None]:
    """A call that sends one approved frame far enough ahead in event time to close every
    session, ``CLOSING_SENDS`` times (each in a batch of its own); calling it again sends it
    once more (the same frame: the sentinel machine's session is never closed and never
    compared), so that the scale-in's cost is measured on the batches it slows. Nothing for
    the enrichment demo."""
    if options.pipeline != GAME_SESSIONS:
        return lambda: None
    from confluent_kafka import Producer

    from streamscale.kafka.client import producer_config

    ts = state.max_event_ms + int(
        (settings.session_gap_s + settings.watermark_delay_s + settings.approval_window_s + 5)
        * 1000
    )
    key = codec.header_json(codec.FrameHeader(ts, SENTINEL_MACHINE, "EU"))
    value = codec.body_json(codec.FrameBody(codec.GAMES[0], ("2A114101",)))
    producer = Producer(producer_config(settings.kafka_config()))
    sends = CLOSING_SENDS

    def send() -> None:
        nonlocal sends
        for n in range(sends):
            if n:
                time.sleep(CLOSING_SPACING_S)
            producer.produce("GAME-FRAME-RQ", value, key, timestamp=ts)
            producer.produce("GAME-FRAME-RS", value, key, timestamp=ts)
            if producer.flush(30):
                raise DemoError("could not deliver the session-closing frame")
        sends = 1

    return send


class Reference:
    """The reference output, computed once: in a thread from :meth:`start` (called once the
    input is complete, the pipeline has caught up and the executors are back at the minimum,
    so that it takes the CPU the end of the run leaves idle rather than the drain's, and its
    memory does not add to the scaled-out cluster's: the demo's peak), or at :meth:`result`
    if never started."""

    def __init__(self, compute: Callable[[], tuple[list[str], Any]]) -> None:
        self._compute = compute
        self._thread: threading.Thread | None = None
        self._value: tuple[list[str], Any] | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._value = self._compute()
        except BaseException as exc:
            self._error = exc

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reference", daemon=True)
            self._thread.start()

    def result(self) -> tuple[list[str], Any]:
        if self._thread is None:
            self._run()
        else:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class TopicReader:
    """Reads topics back whole, each once: the inputs are complete once the load has stopped,
    and both the wait for the output and the verification need them. A topic only one pass
    needs (the game frames, for the reference) is streamed instead (:meth:`stream`): held
    whole, the 900,000 records of the default burst made the demo process 0.5 GB bigger."""

    def __init__(self, admin: KafkaAdmin, partitions: int, isolation: str | None = None) -> None:
        self.admin = admin
        self.partitions = partitions
        self.isolation = isolation
        """``read_committed`` when the pipeline writes in transactions."""
        self._read: dict[str, list[tuple[Any, Any, int]]] = {}

    def __call__(self, topic: str) -> list[tuple[Any, Any, int]]:
        if topic not in self._read:
            messages = self.admin.read_all(topic, self.partitions, self.isolation)
            self._read[topic] = [(m.key(), m.value(), m.timestamp()[1]) for m in messages]
        return self._read[topic]

    def stream(self, topic: str) -> Iterator[tuple[Any, Any, int]]:
        """The records of ``topic`` one at a time, read again on every call, kept nowhere."""
        for m in self.admin.iter_all(topic, self.partitions, self.isolation):
            yield m.key(), m.value(), m.timestamp()[1]


def _reference(
    options: DemoOptions, settings: Settings, read: TopicReader
) -> tuple[list[str], Any]:
    """The output topics and what they must hold once the input is processed: the expected
    sessions by window, or the purchases (each enriched or dead-lettered). The game frames
    are streamed: what is held is the approved keys, then three integers per frame."""
    from streamscale.experiment import verify

    if options.pipeline == GAME_SESSIONS:
        window_ms = int(settings.approval_window_s * 1000)
        approved = verify.approved_keys(read.stream("GAME-FRAME-RS"), window_ms)
        frames = verify.iter_approved_frames(read.stream("GAME-FRAME-RQ"), approved)
        expected = verify.expected_sessions(
            frames, int(settings.session_gap_s * 1000), exclude_machines=[SENTINEL_MACHINE]
        )
        return ["SESSIONS"], expected
    return ["achats-enrichis", "enrichment-dlq"], read("achats")


def _await_output(
    admin: KafkaAdmin,
    outputs: Sequence[str],
    wanted: int,
    partitions: int,
    lag: Callable[[], int | None],
    timeout_s: float = 180.0,
) -> None:
    """Wait (bounded) until the input is processed and the outputs hold ``wanted`` records."""
    tps = [TopicPartition(topic, p) for topic in outputs for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lag() == 0 and sum(admin.end_offsets(tps).values()) >= wanted:
            return
        time.sleep(1)


@dataclass
class VerifyOutcome:
    ok: bool
    message: str
    records_out: int


def _verify(options: DemoOptions, outcome: Outcome) -> VerifyOutcome:
    """Read the outputs back (the broker still runs) and compare with the reference."""
    from streamscale.experiment import verify

    read = outcome.reader
    if options.pipeline == GAME_SESSIONS:
        sessions = read("SESSIONS")
        result = verify.compare_sessions(outcome.expected, verify.actual_sessions(sessions))
        return VerifyOutcome(result.ok, result.summary(), len(sessions))
    enriched = read("achats-enrichis")
    names: dict[int, set[str]] = {}
    for _, value, _ in read("referentiel"):
        if value is not None:
            row = json.loads(value)
            names.setdefault(int(row["id"]), set()).add(str(row["name"]))
    result = verify.compare_enrichment(outcome.expected, enriched, read("enrichment-dlq"), names)
    return VerifyOutcome(result.ok, result.summary(), len(enriched))
