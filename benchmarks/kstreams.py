"""Both seed pipelines on Kafka Streams, on the embedded broker, checked before they are timed.

    .venv/bin/python benchmarks/kstreams.py [--purchases 20000] [--products 10000]
        [--frames 10000] [--runs 3] [--threads 2] [--bad] [--skip-enrichment] [--skip-games]
        [--frame-rate 20000] [--event-start-ms MS] [--grace-ms MS] [--retention-margin-ms MS]
        [--app-opt=--emit=suppress] [--jvm-opt OPT] [--log-dir DIR] [--timeout 300]

The applications are ``benchmarks/kstreams`` (Java, Kafka Streams of the broker's version),
built here with ``mvn -q -f benchmarks/kstreams/pom.xml package`` when the jar is missing or
older than its sources. Each run starts a fresh embedded broker, fills the input topics with
the project's generators exactly as ``benchmarks/pipelines.py`` does (seed 42: referential,
then purchases, then game frames at 20,000 frames/s of event time, the frames produced just
before the game-sessions run; ``--bad`` adds malformed records of every kind to exercise the
dead-letter paths), then for each pipeline:

1. runs the application (``java -Xmx1g -jar``, ``num.stream.threads`` = ``--threads``,
   ``processing.guarantee`` = ``--guarantee`` (``at_least_once`` by default, or
   ``exactly_once_v2``), RocksDB state under a temporary directory, a new
   ``application.id``) as a
   subprocess until all input is processed (its counters on stdout, the output topics' end
   offsets; bounded), then stops it by PID (SIGTERM, then SIGKILL);
2. checks every output record and dead letter, byte for byte, against the reference: what the
   project's own pure functions make of the same input records read back from Kafka
   (``purchase_batches.enrich`` for purchases; ``frame_batches`` and ``sessions.advance`` for
   game sessions, as one micro-batch), plus ``streamscale.experiment.verify``'s independent checks;
3. only then prints its figures.

Game sessions close only when event time passes their end: once every real record has been
aggregated, one approved "sentinel" frame per partition of the sessions' repartition topic
(machines picked by Kafka's murmur2 partitioner; excluded from the checks) is produced
``gap + grace + window + 5 s`` after the newest frame, as ``streamscale demo`` does, and the
closed sessions are awaited. Kafka Streams emits closed session windows at most once a second
(``EmitStrategy.onWindowClose``): the sentinels are sent again (1 ms later) every 1.5 s until
they are.

Kafka Streams' stream time is per task: on a backlog whose event time spans much more than
the grace (``--frame-rate 2``: 83 minutes of event time), the aggregation tasks see the join
tasks' output out of order and drop most frames as late, where the project's watermark (the
minimum over its inputs) keeps them; ``--grace-ms`` and ``--retention-margin-ms`` longer than
the backlog's event time make the output match again.

Figures (median of ``--runs``):

- records/s: input records / (first input record processed -> last output appended; game
  sessions: -> last real record aggregated into a session, since the sessions are then only
  waiting for the event-time sentinel); both ends are wall-clock milliseconds of this machine;
- CPU µs per input record of the Java process over that interval (``/proc/PID/stat``, sampled
  every 50 ms), and from the JVM's start to the stop (start-up included); the broker's CPU
  over the interval for context; the Java process's CPU by thread (stream threads, JIT, GC...)
  per run, which shows how much of a small run is the JVM warming up;
- p50/p99 end-to-end latency: output record timestamp (the output topics are created with
  ``message.timestamp.type=LogAppendTime``, so it is the broker's append time) minus the input
  record's CreateTime (enrichment: the purchase's, stamped when produced; game sessions: the
  session's last frame's, which is its event time). Every input is already in Kafka when the
  application starts (a backlog), so this latency is dominated by the backlog: it measures
  how long records wait, not the per-record latency of a live stream;
- peak RSS (``VmHWM``) of the Java process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import kafka_fill
from kafka_fill import FRAME_RATE, LOG_APPEND, PARTITIONS, SEED, create_topics
from streamscale import processes
from streamscale.experiment import verify
from streamscale.experiment.sustainable import percentile as percentile  # re-exported
from streamscale.generate import Record, game_frames, referential
from streamscale.generate.profiles import make_schedule
from streamscale.generate.purchases import purchase_records
from streamscale.kafka import broker as embedded
from streamscale.kafka.admin import KafkaAdmin
from streamscale.kafka.offsets import TopicPartition
from streamscale.pipelines import deadletter as dl
from streamscale.pipelines import frame_batches as fb
from streamscale.pipelines import hits as codec
from streamscale.pipelines import purchase_batches as pb
from streamscale.pipelines import sessions as driver
from streamscale.pipelines.enrichment import EnrichmentTopics
from streamscale.pipelines.game_sessions import GameTopics
from streamscale.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "benchmarks" / "kstreams"
JAR = PROJECT / "target" / "streamscale-kstreams-all.jar"
TICK = os.sysconf("SC_CLK_TCK")
LOG_APPEND_TIME = 2  # confluent_kafka.TIMESTAMP_LOG_APPEND_TIME
STOP_GRACE_S = 30.0
SENTINEL_HIT = "2A114101"  # impact 42, X, UP, Direct, Pro, NeonBrawl
NUDGE_S = 1.5
THREAD_KINDS = (
    (r"kstreams-", "stream threads"),
    (r"C\d CompilerThre", "JIT"),
    (r"(GC Thread|G1 )", "GC"),
    (r"kafka-producer-", "producer I/O"),
    (r"rocksdb", "RocksDB background"),
)


# --- the jar -------------------------------------------------------------------------------


def ensure_jar() -> Path:
    """Build the jar when it is missing or older than the pom or any source."""
    sources = [PROJECT / "pom.xml", *(p for p in (PROJECT / "src").rglob("*") if p.is_file())]
    newest = max(p.stat().st_mtime for p in sources)
    if not JAR.exists() or JAR.stat().st_mtime < newest:
        print(f"building {JAR.relative_to(ROOT)} (mvn -q package)...", flush=True)
        subprocess.run(
            ["mvn", "-q", "-f", str(PROJECT / "pom.xml"), "package"],
            cwd=ROOT,
            check=True,
            timeout=1800,
        )
    return JAR


# --- Kafka's partitioner --------------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit, as an unsigned int)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest, base = length % 4, length & ~3
    if rest == 3:
        h ^= data[base + 2] << 16
    if rest >= 2:
        h ^= data[base + 1] << 8
    if rest >= 1:
        h ^= data[base]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def partition_of(key: bytes, partitions: int) -> int:
    """Where Kafka's default partitioner (Java clients, Kafka Streams) puts ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# --- topics and records ---------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """A record read back from Kafka."""

    key: bytes | None
    value: bytes | None
    ts: int
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()
    log_append: bool = False


def produce_all(settings: Settings, records: Iterable[Record | tuple[Any, ...]]) -> int:
    """Produce ``(topic, key, value, ts, counted)`` records (ts 0: the producer stamps now),
    with the benchmarks' producer (``kafka_fill``); the count."""
    return kafka_fill.produce_all(settings, records)[0]


def read_back(admin: KafkaAdmin, topic: str) -> list[Rec]:
    """Every record of ``topic`` now, in (partition, offset) order."""
    out = []
    # read_committed: outputs written in transactions (exactly-once) hold control records
    # and aborted ones; a plain topic reads the same.
    for m in admin.read_all(topic, PARTITIONS, isolation="read_committed"):
        kind, ts = m.timestamp()
        headers = tuple((k, v) for k, v in (m.headers() or []))
        out.append(
            Rec(m.key(), m.value(), ts, m.partition(), m.offset(), headers, kind == LOG_APPEND_TIME)
        )
    return sorted(out, key=lambda r: (r.partition, r.offset))


def end_offsets(admin: KafkaAdmin, topic: str) -> int:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return sum(admin.end_offsets(tps).values())


def source_batch(records: Sequence[Rec], topic: str) -> pa.RecordBatch:
    """Records as the Spark source's columns, which the project's pure functions take."""
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "topic": pa.array([topic] * len(records), pa.string()),
            "partition": pa.array([r.partition for r in records], pa.int32()),
            "offset": pa.array([r.offset for r in records], pa.int64()),
            "timestamp": pa.array([r.ts * 1000 for r in records], pa.timestamp("us")),
        }
    )


DeadKey = tuple[bytes | None, bytes | None, str, str, str, str, str]


def dead_key(d: dl.DeadLetter) -> DeadKey:
    return (d.key, d.value, d.error, d.detail, d.topic, str(d.partition), str(d.offset))


def dead_of(rec: Rec) -> DeadKey:
    h = {k: v.decode() for k, v in rec.headers}
    return (
        rec.key,
        rec.value,
        h.get(dl.HEADER_ERROR, "?"),
        h.get(dl.HEADER_DETAIL, "?"),
        h.get(dl.HEADER_TOPIC, "?"),
        h.get(dl.HEADER_PARTITION, "?"),
        h.get(dl.HEADER_OFFSET, "?"),
    )


@dataclass
class Check:
    """Output against the reference: every expected record written, nothing else; a record
    written twice (an at-least-once replay) is counted, not refused."""

    name: str
    expected: int = 0
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)

    def compare(self, what: str, expected: Counter[Any], actual: Counter[Any]) -> None:
        self.expected += sum(expected.values())
        for item, n in expected.items():
            if actual.get(item, 0) < n:
                self.missing.append(f"{what} {str(item)[:300]}")
        for item, n in actual.items():
            if item not in expected:
                self.unexpected.append(f"{what} {str(item)[:300]}")
            else:
                self.duplicates += max(0, n - expected[item])

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def summary(self) -> str:
        if self.ok:
            dup = f", {self.duplicates} duplicates (at-least-once)" if self.duplicates else ""
            extra = "".join(f"; {n}" for n in self.notes)
            return (
                f"{self.name}: output verified, {self.expected:,} records as expected{dup}{extra}"
            )
        sample = (self.missing + self.unexpected)[:5]
        return (
            f"{self.name}: output NOT as expected: {len(self.missing)} missing, "
            f"{len(self.unexpected)} unexpected of {self.expected:,}:\n  " + "\n  ".join(sample)
        )


# --- malformed records (--bad) --------------------------------------------------------------

BAD_PURCHASES: tuple[tuple[str | None, str | None], ...] = (
    ("bad-1", "not json"),
    ("bad-2", '{"id":"x","price":1.00}'),
    ("bad-3", '{"id":3}'),
    ("bad-4", None),
    (None, '{"id":1,"price":2.00}'),
    ("bad-6", '{"price": 1.005, "id": 3}'),  # usable: other form, price rounded half up
    ("bad-7", '{"id":5,"price":7}'),  # usable: price 7.00
    ("bad-8", "[1,2]"),
    ("bad-9", '{"id":1.5,"price":1}'),
    ("bad-10", '{"id":2,"price":"1.00"}'),
    ("bad-11", '{"id":2,"price":123456789.00}'),
    ("bad-12", '{"id":13,"price":1.00}'),  # product 13: renamed below, non-ASCII name
)
BAD_PRODUCTS: tuple[tuple[str, str | None], ...] = (
    ("abc", '{"id":1,"name":"x"}'),
    ("7", "not json"),
    ("8", '{"id":8}'),
    ("9", '{"id":10,"name":"Wrong"}'),
    ("11", '{"id":"11","name":"x"}'),
    ("12", '{"id":12,"name":5}'),
    ("13", json.dumps({"id": 13, "name": 'Caf\u00e9 "13"\t\u2603'})),  # valid
)


def check_product(key: bytes | None, value: bytes | None) -> tuple[int, str | None]:
    """A referential record as ``enrichment._referential_checks`` reads it (that is Spark SQL;
    this is its reading for the records used here): ``(product id, name)``, name None for a
    tombstone, or :class:`.deadletter.Refused`."""
    what = "product value"
    if key is None:
        raise dl.Refused(dl.NULL_KEY, "a referential record needs its product id as key")
    text = key.decode("utf-8", "replace").strip()
    if re.fullmatch(r"[+-]?[0-9]+", text) is None or not -(2**63) <= int(text) < 2**63:
        raise dl.Refused(dl.WRONG_TYPE, "referential key is not an integer product id")
    pid = int(text)
    if value is None:
        return pid, None
    try:
        obj = json.loads(value)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise dl.Refused(dl.NOT_JSON, f"{what} is not a JSON object")
    got, name = obj.get("id"), obj.get("name")
    wrong = dl.Refused(
        dl.WRONG_TYPE,
        f"{what} has a field of the wrong type (expected id an integer product id, name a string)",
    )
    if got is not None and (type(got) is not int or not -(2**63) <= got < 2**63):
        raise wrong
    if got is None:
        raise dl.Refused(dl.MISSING_FIELD, f"{what} has no id (an integer product id)")
    if name is None:
        raise dl.Refused(dl.MISSING_FIELD, f"{what} has no name (a string)")
    if not isinstance(name, str):
        raise wrong
    if got != pid:
        raise dl.Refused(dl.INVALID_VALUE, "product value id differs from the record key")
    return pid, name


# --- references -----------------------------------------------------------------------------


@dataclass
class EnrichmentReference:
    output: Counter[tuple[bytes | None, bytes | None]]
    dead: Counter[DeadKey]
    names: dict[int, set[str]]
    purchases: int
    referential: int
    unknown: int


def enrichment_reference(
    topics: EnrichmentTopics, purchases: list[Rec], products: list[Rec]
) -> EnrichmentReference:
    """What the project's enrichment writes for these records (``purchase_batches.enrich``):
    each purchase named by the referential as of its timestamp (``name_as_of``)."""
    dead: Counter[DeadKey] = Counter()
    versions: dict[int, list[tuple[int, str | None]]] = {}
    names: dict[int, set[str]] = {}
    for r in products:  # (partition, offset) order: log order per key
        try:
            pid, name = check_product(r.key, r.value)
        except dl.Refused as exc:
            letter = dl.DeadLetter(
                r.key, r.value, topics.referential, r.partition, r.offset, exc.error, exc.detail
            )
            dead[dead_key(letter)] += 1
            continue
        versions.setdefault(pid, []).append((r.ts, name))
        if name is not None:
            names.setdefault(pid, set()).add(name)
    first_purchase = min((r.ts for r in purchases), default=0)
    if all(ts <= first_purchase for vs in versions.values() for ts, _ in vs):
        # The whole referential precedes every purchase: the table as of its end applies.
        final = {pid: vs[-1][1] for pid, vs in versions.items()}
        table = pb.NameTable.of({pid: n for pid, n in final.items() if n is not None})
        batch_versions: dict[int, list[tuple[int, str | None]]] = {}
    else:
        table, batch_versions = pb.NameTable(), versions
    out = pb.Enriched()
    rows = pb.enrich(
        source_batch(purchases, topics.purchases), table, batch_versions, topics.output, out
    )
    output = Counter(
        zip(rows.column("key").to_pylist(), rows.column("value").to_pylist(), strict=True)
    )
    dead.update(dead_key(d) for d in out.dead)
    return EnrichmentReference(
        output, dead, names, len(purchases), len(products), out.counts.get("unknown", 0)
    )


@dataclass
class SessionsReference:
    output: Counter[tuple[bytes, bytes]]
    dead: Counter[DeadKey]
    joined: int
    """Approved frames of the real input (what Kafka Streams aggregates before the sentinels)."""
    expected: dict[verify.SessionKey, verify.SessionFigures]
    sentinels: list[Record]
    sentinel_machines: list[str]
    sentinel_ts: int
    topics: GameTopics

    def sentinels_at(self, shift_ms: int) -> list[Record]:
        return sentinel_records(self.topics, self.sentinel_machines, self.sentinel_ts + shift_ms)


def pick_sentinels(taken: set[str]) -> list[str]:
    """One machine id per partition of the sessions' repartition topic (keyed by machine)."""
    chosen: dict[int, str] = {}
    for mid in range(999_999, 100_000, -1):
        machine = f"{mid:06d}"
        if machine in taken:
            continue
        chosen.setdefault(partition_of(machine.encode(), PARTITIONS), machine)
        if len(chosen) == PARTITIONS:
            break
    return [chosen[p] for p in sorted(chosen)]


def sentinel_records(topics: GameTopics, machines: Sequence[str], ts: int) -> list[Record]:
    """An approved frame per machine at ``ts`` (request and approval, same key and body)."""
    out: list[Record] = []
    body = codec.body_json(codec.FrameBody(codec.GAMES[0], (SENTINEL_HIT,)))
    for machine in machines:
        key = codec.header_json(codec.FrameHeader(ts, machine, "EU"))
        out.append((topics.requests, key, body, ts, True))
        out.append((topics.approvals, key, body, ts, False))
    return out


def sessions_reference(
    topics: GameTopics,
    settings: Settings,
    frames: list[Rec],
    approvals: list[Rec],
    taken: set[str],
    grace_ms: int,
) -> SessionsReference:
    """What the project's game sessions write for these records and the sentinels, as one
    micro-batch (``frame_batches.read_frames``/``read_approvals``/``pair``/``spans`` on the
    executors' side, ``sessions.close`` on the closed windows; the sentinels' own sessions
    are left out, as they never close)."""
    gap_ms = int(settings.session_gap_s * 1000)
    window_ms = int(settings.approval_window_s * 1000)
    delay_ms = int(settings.watermark_delay_s * 1000)
    newest = max([r.ts for r in frames] + [r.ts for r in approvals] + [0])
    machines = pick_sentinels(taken)
    sentinel_ts = newest + gap_ms + max(delay_ms, grace_ms) + window_ms + 5_000
    sentinels = sentinel_records(topics, machines, sentinel_ts)

    def as_rec(record: Record) -> Rec:
        _, key, value, ts, _ = record
        return Rec(key.encode() if key else None, value.encode() if value else None, ts, -1, -1)

    extra_rq = [as_rec(s) for s in sentinels if s[0] == topics.requests]
    extra_rs = [as_rec(s) for s in sentinels if s[0] == topics.approvals]
    out = fb.Frames()
    fb.read_frames(source_batch(frames + extra_rq, topics.requests), out)
    fb.read_approvals(source_batch(approvals + extra_rs, topics.approvals), out, window_ms)
    paired = fb.pair(out.frames + out.approvals)
    spans = fb.spans(paired.approved, gap_ms)
    keys, values = driver.records(driver.close(spans, paired.unpaired, gap_ms).table, gap_ms)
    output = Counter(
        (k, v)
        for k, v in zip(keys.to_pylist(), values.to_pylist(), strict=True)
        if k.decode() not in machines
    )

    def triple(r: Rec) -> verify.KafkaRecord:
        return (r.key, r.value, r.ts)

    approved = verify.approved_frames(map(triple, frames), map(triple, approvals), window_ms)
    return SessionsReference(
        output=output,
        dead=Counter(dead_key(d) for d in out.dead),
        joined=paired.counts["join.approved"] - len(machines),
        expected=verify.expected_sessions(approved, gap_ms),
        sentinels=sentinels,
        sentinel_machines=machines,
        sentinel_ts=sentinel_ts,
        topics=topics,
    )


# --- the Kafka Streams application ------------------------------------------------------------


class StreamsApp:
    """The application as a subprocess: its counters (stdout), CPU samples, stop by PID."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self._stderr = log.open("w")
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1
        )
        self.pid = self.proc.pid
        self.started_ms = time.time() * 1000
        self.stats: dict[str, Any] = {}
        self.states: list[str] = []
        self.state_ms: list[tuple[float, str]] = []  # (wall ms, state) as they were read
        self.errors: list[str] = []
        self.cpu: list[tuple[float, float]] = []  # (wall ms, CPU s)
        self.threads: dict[str, float] = {}
        self.app_id = ""  # set by start_app, with the state directory: a restart reuses both
        self.state_dir = Path()
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._reader.start()
        self._sampler.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("STATS "):
                self.stats = json.loads(line[6:])
            elif line.startswith("STATE "):
                self.states.append(line[6:].strip())
                self.state_ms.append((time.time() * 1000, self.states[-1]))
            elif line.startswith("ERROR"):
                self.errors.append(line.strip())

    def _sample(self) -> None:
        while not self._done.is_set():
            cpu = cpu_seconds(self.pid)
            if cpu is None:
                return
            self.cpu.append((time.time() * 1000, cpu))
            time.sleep(0.05)

    def running_s(self) -> float:
        """Seconds from the process start to its first RUNNING state (JVM start, group join,
        task assignment and state restoration)."""
        running = [t for t, state in self.state_ms if state == "RUNNING"]
        return (running[0] - self.started_ms) / 1000 if running else float("nan")

    def count(self, name: str) -> int:
        return int(self.stats.get("counts", {}).get(name, 0))

    def last(self, name: str) -> int:
        return int(self.stats.get("last", {}).get(name, 0))

    @property
    def first(self) -> int:
        return int(self.stats.get("first", 0))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive() or self.errors:
            tail = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"Kafka Streams application stopped ({self.proc.returncode}): {self.errors}\n{tail}"
            )

    def cpu_at(self, wall_ms: float) -> float:
        """CPU seconds at ``wall_ms``, interpolated between samples."""
        samples = self.cpu
        if not samples:
            return 0.0
        if wall_ms <= samples[0][0]:
            return samples[0][1]
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if t0 <= wall_ms <= t1:
                return c0 + (c1 - c0) * (wall_ms - t0) / max(t1 - t0, 1e-9)
        return samples[-1][1]

    def peak_rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds so far by kind of thread (``/proc/PID/task/*``)."""
        out: dict[str, float] = {}
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return out
        for tid in tids:
            fields = processes.stat_fields(f"{self.pid}/task/{tid}")
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if fields is None:
                continue
            kind = next((k for p, k in THREAD_KINDS if re.match(p, name)), "other")
            out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
        return out

    def stop(self) -> float:
        """SIGTERM (a clean close), SIGKILL after the grace; the process's total CPU seconds
        (its split by thread is kept in :attr:`threads`)."""
        self.threads = self.thread_cpu()
        total = cpu_seconds(self.pid) or (self.cpu[-1][1] if self.cpu else 0.0)
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._done.set()
        self._reader.join(5)
        self._stderr.close()
        return total


def cpu_seconds(pid: int) -> float | None:
    fields = processes.stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def start_app(
    jar: Path,
    app: str,
    settings: Settings,
    topics: Mapping[str, str],
    tmp: Path,
    threads: int,
    extra: Sequence[str] = (),
    log_dir: str | None = None,
    jvm_opts: Sequence[str] = (),
    again: StreamsApp | None = None,
) -> StreamsApp:
    """Start ``app`` with a new ``application.id`` and state directory, or, ``again``, as a
    restart of that (stopped) application: its ``application.id`` (committed offsets,
    changelogs) and its local state."""
    if again is not None:
        app_id, state = again.app_id, again.state_dir
    else:
        app_id = f"kstreams-{app}-{uuid.uuid4().hex[:8]}"
        state = Path(tempfile.mkdtemp(prefix=f"{app}-state-", dir=tmp))
    argv = [
        shutil.which("java") or "java",
        "-Xmx1g",
        *jvm_opts,
        "-jar",
        str(jar),
        app,
        "--bootstrap",
        settings.bootstrap_servers,
        "--application-id",
        app_id,
        "--state-dir",
        str(state),
        "--threads",
        str(threads),
        *(a for role, name in topics.items() for a in ("--topic", f"{role}={name}")),
        *extra,
    ]
    logs = Path(log_dir) if log_dir else tmp
    logs.mkdir(parents=True, exist_ok=True)
    started = StreamsApp(argv, logs / f"{app_id}{'-again' if again else ''}.log")
    started.app_id, started.state_dir = app_id, state
    return started


def add_app_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the Kafka Streams applications, shared by the benchmarks that run them."""
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 2, help="Kafka Streams stream threads"
    )
    parser.add_argument(
        "--grace-ms",
        type=int,
        help="game sessions: Kafka Streams' grace of the join and session windows (default: the "
        "project's watermark delay, 10000)",
    )
    parser.add_argument(
        "--retention-margin-ms",
        type=int,
        help="game sessions: session store retention beyond gap + grace (the app's default: "
        "60000; 0 is Kafka Streams' default retention)",
    )
    parser.add_argument(
        "--log-dir", help="keep the applications' logs (stderr) here (default: dropped)"
    )
    parser.add_argument(
        "--jvm-opt", action="append", default=[], help="extra JVM option (e.g. a profiler's)"
    )
    parser.add_argument(
        "--app-opt",
        action="append",
        default=[],
        metavar="--NAME=VALUE",
        help="extra option of the Java applications, e.g. --app-opt=--config=KEY=VALUE",
    )
    parser.add_argument(
        "--guarantee",
        choices=("at_least_once", "exactly_once_v2"),
        default="at_least_once",
        help="Kafka Streams' processing.guarantee",
    )


def enrichment_roles(topics: EnrichmentTopics) -> dict[str, str]:
    """The enrichment application's ``--topic`` roles."""
    return {
        "purchases": topics.purchases,
        "referential": topics.referential,
        "output": topics.output,
        "dlq": topics.dlq,
    }


def sessions_roles(topics: GameTopics) -> dict[str, str]:
    """The game-sessions application's ``--topic`` roles."""
    return {
        "requests": topics.requests,
        "approvals": topics.approvals,
        "output": topics.output,
        "dlq": topics.dlq,
    }


def sessions_opts(args: argparse.Namespace, settings: Settings) -> list[str]:
    """The game-sessions application's timing (the project's gap, approval window and
    watermark delay as its grace) and the options every application takes."""
    timing = [
        "--gap-ms",
        str(int(settings.session_gap_s * 1000)),
        "--window-ms",
        str(int(settings.approval_window_s * 1000)),
        "--delay-ms",
        str(grace_ms(args, settings)),
    ]
    if args.retention_margin_ms is not None:
        timing += ["--retention-margin-ms", str(args.retention_margin_ms)]
    return [*timing, *app_opts(args)]


def app_opts(args: argparse.Namespace) -> list[str]:
    """``--app-opt=--NAME=VALUE`` options as the Java application's ``--NAME VALUE``, and
    ``--guarantee`` as its ``processing.guarantee``."""
    out: list[str] = [
        "--config",
        f"processing.guarantee={getattr(args, 'guarantee', None) or 'at_least_once'}",
    ]
    for opt in args.app_opt:
        name, _, value = opt.partition("=")
        out += [name, value]
    return out


def grace_ms(args: argparse.Namespace, settings: Settings) -> int:
    """Kafka Streams' grace of the join and session windows: the project's watermark delay
    unless ``--grace-ms`` says otherwise."""
    if args.grace_ms is not None:
        return int(args.grace_ms)
    return int(settings.watermark_delay_s * 1000)


def wait_for(app: StreamsApp, done: Any, timeout_s: float, what: str, tick: Any = None) -> bool:
    """Poll ``done()`` every 0.1 s (bounded); ``tick()`` is called between polls."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app.check_alive()
        if done():
            return True
        if tick is not None:
            tick()
        time.sleep(0.1)
    print(
        f"  timed out after {timeout_s:.0f} s waiting for {what}; the application's counters: "
        f"{app.stats.get('counts')}",
        flush=True,
    )
    return False


# --- the two runs -----------------------------------------------------------------------------


@dataclass
class Figures:
    records: int
    seconds: float
    rate: float
    cpu_us: float
    cpu_us_total: float
    broker_cpu_us: float
    p50_ms: float
    p99_ms: float
    peak_rss_mb: float
    extra: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)


class BrokerCpu:
    """The broker's CPU seconds, sampled alongside the application."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        cpu = cpu_seconds(self.pid)
        if cpu is not None:
            self.samples.append((time.time() * 1000, cpu))

    def between(self, start_ms: float, end_ms: float) -> float:
        before = [c for t, c in self.samples if t <= start_ms]
        after = [c for t, c in self.samples if t >= end_ms]
        if not before or not after:
            return float("nan")
        return after[0] - before[-1]


def measured(
    app: StreamsApp,
    broker: BrokerCpu,
    first: int,
    end: int,
    records: int,
    total_cpu: float,
    rss: float,
    latencies: Sequence[float],
    since: Sequence[float],
    extra: dict[str, float],
) -> Figures:
    """The figures of one application run over ``first`` → ``end`` (ms), ``extra`` added to
    the start-up and from-start latencies every pipeline reports."""
    seconds = (end - first) / 1000
    cpu = app.cpu_at(end) - app.cpu_at(first)
    return Figures(
        records=records,
        seconds=seconds,
        rate=records / seconds,
        cpu_us=cpu / records * 1e6,
        cpu_us_total=total_cpu / records * 1e6,
        broker_cpu_us=broker.between(first, end) / records * 1e6,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        peak_rss_mb=rss,
        extra={
            **extra,
            "startup_ms": first - app.started_ms,
            "p50_start_ms": percentile(since, 50),
            "p99_start_ms": percentile(since, 99),
        },
        threads=app.threads,
    )


def check_enrichment(
    admin: Any, topics: Any, ref: EnrichmentReference, name: str
) -> tuple[Check, list[Rec], list[Rec]]:
    """An enrichment's output and dead letters (any engine's) read back and checked against
    the reference and by ``streamscale.experiment.verify``."""
    written = read_back(admin, topics.output)
    dead = read_back(admin, topics.dlq)
    check = Check(name)
    check.compare("output", ref.output, Counter((r.key, r.value) for r in written))
    check.compare("dead letter", ref.dead, Counter(dead_of(r) for r in dead))
    independent = verify.compare_enrichment(
        [(r.key, r.value, r.ts) for r in read_back(admin, topics.purchases)],
        [(r.key, r.value, r.ts) for r in written],
        [(r.key, r.value, r.ts) for r in dead],
        ref.names,
    )
    check.notes.append(f"streamscale.experiment.verify.compare_enrichment: {independent.summary()}")
    if not independent.ok:
        check.missing.append(independent.summary())
    return check, written, dead


def run_enrichment(
    jar: Path,
    settings: Settings,
    admin: KafkaAdmin,
    topics: EnrichmentTopics,
    ref: EnrichmentReference,
    tmp: Path,
    args: argparse.Namespace,
    broker_pid: int,
) -> tuple[Check, Figures | None]:
    outputs = ref.output.total()
    refused = ref.dead.total()
    broker = BrokerCpu(broker_pid)
    app = start_app(
        jar,
        "enrichment",
        settings,
        enrichment_roles(topics),
        tmp,
        args.threads,
        app_opts(args),
        args.log_dir,
        args.jvm_opt,
    )
    try:
        wait_for(
            app,
            lambda: (
                end_offsets(admin, topics.output) >= outputs
                and end_offsets(admin, topics.dlq) >= refused
            ),
            args.timeout,
            f"{outputs:,} enriched purchases and {refused} dead letters",
            broker.sample,
        )
        broker.sample()
        rss = app.peak_rss_mb()
        first = app.first
    finally:
        total_cpu = app.stop()
    check, written, dead = check_enrichment(admin, topics, ref, "enrichment, Kafka Streams")
    if not all(r.log_append for r in written):
        check.notes.append("output NOT stamped with LogAppendTime: latency meaningless")
    if not check.ok:
        return check, None
    created = {r.key: r.ts for r in read_back(admin, topics.purchases)}
    latencies = [r.ts - created[r.key] for r in written if r.key in created]
    since = [r.ts - max(created[r.key], app.started_ms) for r in written if r.key in created]
    end = max(r.ts for r in [*written, *dead])
    records = ref.purchases + ref.referential
    seconds = (end - first) / 1000
    extra = {"purchases_per_s": ref.purchases / seconds}
    return check, measured(
        app, broker, first, end, records, total_cpu, rss, latencies, since, extra
    )


def run_sessions(
    jar: Path,
    settings: Settings,
    admin: KafkaAdmin,
    topics: GameTopics,
    ref: SessionsReference,
    inputs: tuple[int, int],
    tmp: Path,
    args: argparse.Namespace,
    broker_pid: int,
) -> tuple[Check, Figures | None]:
    n_frames, n_approvals = inputs
    outputs = ref.output.total()
    refused = ref.dead.total()
    broker = BrokerCpu(broker_pid)
    app = start_app(
        jar,
        "game-sessions",
        settings,
        sessions_roles(topics),
        tmp,
        args.threads,
        sessions_opts(args, settings),
        args.log_dir,
        args.jvm_opt,
    )
    sent: list[float] = []
    try:
        # 1. every real record read and every approved frame aggregated (bounded; a stall
        # after all input is read means records were dropped: the check will say which)
        consumed = [0.0]

        def all_aggregated() -> bool:
            read = app.count("frames") >= n_frames and app.count("approvals") >= n_approvals
            if read and not consumed[0]:
                consumed[0] = time.monotonic()
            stalled = bool(consumed[0]) and time.monotonic() - consumed[0] > 15
            return read and (app.count("aggregated") >= ref.joined or stalled)

        wait_for(app, all_aggregated, args.timeout, "every approved frame", broker.sample)
        broker.sample()
        end = app.last("aggregated")
        first = app.first
        aggregated = app.count("aggregated")
        # 2. the sentinels close every session; sent again until the sessions are out
        round_ = [0]

        def send_sentinels() -> None:
            # Each round 1 ms later: new frames (a header is a frame), same sentinel sessions.
            produce_all(settings, ref.sentinels_at(round_[0]))
            sent.append(time.time() * 1000)
            round_[0] += 1

        send_sentinels()

        def nudge() -> None:
            broker.sample()
            if time.time() * 1000 - sent[-1] > NUDGE_S * 1000:
                send_sentinels()

        wait_for(
            app,
            lambda: (
                end_offsets(admin, topics.output) >= outputs
                and end_offsets(admin, topics.dlq) >= refused
            ),
            args.timeout,
            f"{outputs} sessions and {refused} dead letters",
            nudge,
        )
        rss = app.peak_rss_mb()
    finally:
        total_cpu = app.stop()
    written = read_back(admin, topics.output)
    dead = read_back(admin, topics.dlq)
    check = Check("game sessions, Kafka Streams")
    check.compare("session", ref.output, Counter((r.key, r.value) for r in written))
    check.compare("dead letter", ref.dead, Counter(dead_of(r) for r in dead))
    independent = verify.compare_sessions(
        ref.expected,
        verify.actual_sessions([(r.key, r.value, r.ts) for r in written]),
    )
    check.notes.append(f"streamscale.experiment.verify.compare_sessions: {independent.summary()}")
    check.notes.append(
        f"{aggregated:,} approved frames aggregated (expected {ref.joined:,}); "
        f"sentinels sent {len(sent)} time(s)"
    )
    if not independent.ok:
        check.missing.append(independent.summary())
    if not check.ok:
        return check, None
    last_ts = [json.loads(r.value or b"{}")["lastTs"] for r in written]
    latencies = [r.ts - t for r, t in zip(written, last_ts, strict=True)]
    since = [r.ts - max(t, app.started_ms) for r, t in zip(written, last_ts, strict=True)]
    records = n_frames + n_approvals
    seconds = (end - first) / 1000
    closing = max(r.ts for r in written) - sent[0] if written else float("nan")
    extra = {
        "frames_per_s": n_frames / seconds,
        "sessions": float(len(written)),
        "closing_ms": float(closing),
    }
    return check, measured(
        app, broker, first, end, records, total_cpu, rss, latencies, since, extra
    )


# --- one run: a fresh broker, the same data -------------------------------------------------


def fill_purchases(
    settings: Settings, args: argparse.Namespace, et: EnrichmentTopics, rng: random.Random
) -> None:
    """The referential and purchases of ``benchmarks/pipelines.py`` (same seed and draws)."""
    plan = referential.plan_for_products(args.products, 0.05, 0.01)
    produce_all(settings, referential.referential_records(rng, plan, et.referential))
    if args.bad:
        produce_all(settings, [(et.referential, k, v, 0, True) for k, v in BAD_PRODUCTS])
    produce_all(
        settings, purchase_records(rng, args.purchases, et.purchases, products=args.products)
    )
    if args.bad:
        produce_all(settings, [(et.purchases, k, v, 0, True) for k, v in BAD_PURCHASES])


def fill_frames(
    settings: Settings, args: argparse.Namespace, gt: GameTopics, rng: random.Random
) -> game_frames.GameFrames:
    """The game frames of ``benchmarks/pipelines.py``, drawn after the purchases from the same
    generator; produced just before the game-sessions run, so that event time is about the
    time they were produced."""
    schedule = make_schedule("steady", rate=args.frame_rate, count=args.frames)
    frames = game_frames.GameFrames(
        rng,
        schedule,
        start_ms=args.event_start_ms or int(time.time() * 1000),
        request_topic=gt.requests,
        approval_topic=gt.approvals,
        bad_fraction=0.01 if args.bad else 0.0,
    )
    produce_all(settings, frames.records())
    return frames


def one_run(
    run: int, jar: Path, args: argparse.Namespace
) -> dict[str, tuple[Check, Figures | None]]:
    results: dict[str, tuple[Check, Figures | None]] = {}
    with tempfile.TemporaryDirectory(prefix="kstreams-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with embedded.embedded_broker(tmp / "broker") as b:
            settings = Settings(bootstrap_servers=b.bootstrap)
            et, gt = EnrichmentTopics(), GameTopics()
            specs: dict[str, Mapping[str, str]] = {
                et.purchases: {},
                et.referential: {"cleanup.policy": "compact"},
                et.output: LOG_APPEND,
                et.dlq: LOG_APPEND,
                gt.requests: {},
                gt.approvals: {},
                gt.output: LOG_APPEND,
                gt.dlq: LOG_APPEND,
            }
            create_topics(settings, specs)
            rng = random.Random(SEED)
            admin = KafkaAdmin(settings.kafka_config(), 30.0)
            try:
                began = time.perf_counter()
                fill_purchases(settings, args, et, rng)
                products = read_back(admin, et.referential)
                purchases = read_back(admin, et.purchases)
                keyed = [(r.key, r.partition) for r in products[:200] if r.key is not None]
                if any(partition_of(key, PARTITIONS) != p for key, p in keyed):
                    raise RuntimeError("murmur2 here disagrees with the producer's partitioner")
                print(
                    f"run {run}: filled in {time.perf_counter() - began:.1f} s: "
                    f"{len(products):,} referential, {len(purchases):,} purchases",
                    flush=True,
                )
                if not args.skip_enrichment:
                    ref_e = enrichment_reference(et, purchases, products)
                    results["enrichment"] = run_enrichment(
                        jar, settings, admin, et, ref_e, tmp, args, b.pid
                    )
                    print(f"  {results['enrichment'][0].summary()}", flush=True)
                if not args.skip_games:
                    began = time.perf_counter()
                    frames = fill_frames(settings, args, gt, rng)
                    requests = read_back(admin, gt.requests)
                    approvals = read_back(admin, gt.approvals)
                    print(
                        f"run {run}: filled in {time.perf_counter() - began:.1f} s: "
                        f"{len(requests):,} frames, {len(approvals):,} approvals "
                        f"({frames.stats.bad} spoiled frames)",
                        flush=True,
                    )
                    taken = {m.id for m in frames.machines}
                    ref_s = sessions_reference(
                        gt, settings, requests, approvals, taken, grace_ms(args, settings)
                    )
                    results["game sessions"] = run_sessions(
                        jar,
                        settings,
                        admin,
                        gt,
                        ref_s,
                        (len(requests), len(approvals)),
                        tmp,
                        args,
                        b.pid,
                    )
                    print(f"  {results['game sessions'][0].summary()}", flush=True)
            finally:
                admin.close()
    return results


def show(name: str, figures: Sequence[Figures]) -> None:
    def med(get: Any) -> float:
        return float(statistics.median(get(f) for f in figures))

    print(
        f"{name:<30}{med(lambda f: f.rate):>12,.0f}{med(lambda f: f.cpu_us):>10.1f}"
        f"{med(lambda f: f.cpu_us_total):>10.1f}{med(lambda f: f.broker_cpu_us):>9.1f}"
        f"{med(lambda f: f.p50_ms):>9,.0f}{med(lambda f: f.p99_ms):>9,.0f}"
        f"{med(lambda f: f.peak_rss_mb):>9,.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--purchases", type=int, default=20_000)
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--frames", type=int, default=10_000, help="frames (about 2x records)")
    parser.add_argument("--frame-rate", type=float, default=FRAME_RATE, help="event-time frames/s")
    parser.add_argument("--runs", type=int, default=3, help="median of this many runs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per wait")
    parser.add_argument(
        "--bad", action="store_true", help="add malformed records (dead-letter paths)"
    )
    parser.add_argument(
        "--event-start-ms",
        type=int,
        default=0,
        help="event time of the first frame, epoch ms (default: now)",
    )
    parser.add_argument("--skip-enrichment", action="store_true")
    parser.add_argument("--skip-games", action="store_true")
    add_app_arguments(parser)
    args = parser.parse_args()

    jar = ensure_jar()
    per_run: list[dict[str, tuple[Check, Figures | None]]] = []
    for run in range(1, args.runs + 1):
        per_run.append(one_run(run, jar, args))
        for name, (check, figures) in per_run[-1].items():
            if figures is None:
                print(f"\n{check.summary()}\nno figures: the output does not match the reference")
                sys.exit(1)
            extra = ", ".join(f"{k} {v:,.0f}" for k, v in figures.extra.items())
            print(
                f"  run {run} {name}: {figures.records:,} records in {figures.seconds:.2f} s "
                f"= {figures.rate:,.0f}/s; CPU {figures.cpu_us:.1f} µs/record "
                f"({figures.cpu_us_total:.1f} with JVM start); latency p50 {figures.p50_ms:,.0f} "
                f"p99 {figures.p99_ms:,.0f} ms; peak RSS {figures.peak_rss_mb:,.0f} MB; {extra}",
                flush=True,
            )
            threads = sorted(figures.threads.items(), key=lambda kv: -kv[1])
            print(
                "    Java CPU s by thread (whole process): "
                + ", ".join(f"{k} {v:.1f}" for k, v in threads),
                flush=True,
            )

    print(
        f"\nKafka Streams 4.1.1, {args.threads} stream threads, {args.guarantee}, RocksDB; "
        f"median of {args.runs} run(s), every output checked against the reference"
    )
    print(
        f"{'pipeline':<30}{'records/s':>12}{'CPU µs':>10}{'+start':>10}{'broker':>9}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'RSS MB':>9}"
    )
    for name in ("enrichment", "game sessions"):
        measured_ = [f for r in per_run if name in r and (f := r[name][1]) is not None]
        if measured_:
            show(f"{name}, Kafka Streams", measured_)
    print(
        "records/s: input records (enrichment: purchases + referential; game sessions: frames +"
        " approvals) from the first record processed to the last output appended (game sessions:"
        " to the last frame aggregated); CPU µs: Java process per input record over that span"
        " (+start: whole process life); broker: the broker's CPU µs per record over the span;"
        " latency: output append time - input CreateTime, for a backlog run (all input in Kafka"
        " before the start), so it is mostly time spent waiting in the backlog."
    )
    print(f"command: {' '.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}")


if __name__ == "__main__":
    main()
