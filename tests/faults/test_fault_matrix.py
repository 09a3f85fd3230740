"""The fault matrix: under a steady load -- a producer sending immediate, delayed
and timer messages, a consumer group that passes everything and one that fails a share into
retries and the DLQ -- each process of the local stack is killed with SIGKILL at a random
moment, twice, and comes back (the stack restarts its children; the test restarts the
consumer): the store (its gunicorn master and worker), the process holding the CommitLog alone
(the worker; its master starts another), the scheduler's worker and beat, the retry service,
the RocketMQ 5 gateway, Redis (with its append-only file), a consumer. Also Redis restarted
*empty* (its offsets forgotten), the CommitLog's tail torn in the middle of a record while the
store is down, and the store's disk limit reached (a sparse ballast file among its files,
against a quota) until it refuses writes with 507, then freed.

Beside that load, Apache's official RocketMQ 5 client sends through the gateway and a
SimpleConsumer receives through it (``tests.faults.gateway_load``), leaving every 7th message's
first delivery to run out: every acknowledged send is received and acked, every message left
to run out comes back, none comes back before its invisible time ran out (unless Redis lost the
gateway's state), and none is received again after an ack answered OK unless a fault explains
it; the gateway answers again after its kill, and the sends and receives go on.

The invariants are checked from the data -- the topics read back from the store and the
consumers' own records -- never from logs:
- every acknowledged produce is in its topic exactly once: each due delayed message was handed
  over exactly once (SPEC D9), even after Redis forgot the scheduler's offsets;
- every acknowledged message reaches its end state in both groups (consumed, or dead-lettered
  for the failing share): nothing lost;
- no consumer sees a delayed message before its time; an orderly group (a third consumer,
  killed with the failing group's) never takes a queue's offsets out of order: after a crash it
  may go back to its committed offset, never jump ahead;
- consumer-visible duplicates (at-least-once) are counted, per fault, not forbidden;
- the stack is running and healthy at the end, on its own;
- a fault costs a delayed message no more than its outage: for every run of every fault, the
  max lateness of the delayed messages falling due around it (the store time of the delivered
  copy minus its deliver time, SPEC D10; ``load.max_lateness``) is at most the time the killed
  part took to answer again plus ``LATENESS_SLACK_MS`` (2 s; DEC-scheduler-lease,
  DEC-scheduler-store-retry). Before the next fault the test waits (``Matrix.drained``) until
  no delayed message is due and not handed over, so a fault is not charged its predecessor's.

The table (fault x runs x acknowledged x lost x duplicates x recovery x max lateness) is
printed; run with ``-s`` to see it (README "Fault tolerance" holds one run's figures).

It runs twice: on the one-store stack (each fault twice), and on three store shards
(``CLEPSYDRA_STORE_SHARDS=3``, DEC-store-shards; each fault once, to keep the suite's time
bounded), where the store's faults - its kill, its writer's kill, its torn tail, its full disk -
hit a shard drawn at random each time, the bootstrap shard 0 included, and the data is read back
from every shard.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass
from pathlib import Path

import pytest
import redis
import requests

from clepsydra_client import AdminClient
from clepsydra_core import naming
from clepsydra_core.errors import CorruptRecordError
from clepsydra_core.records import END_MAGIC, decode_record, peek_size_magic
from clepsydra_core.shards import shard_port
from tests.faults.gateway_load import GatewayTraffic
from tests.faults.load import (
    CONSUMER_FAULT,
    LATENESS_SLACK_MS,
    Books,
    ConsumerProcess,
    Disruption,
    Producing,
    deliveries,
    max_lateness,
    order_breaks,
    seqs_in,
)
from tests.fixtures.stack import RunningStack, descendants, stack_factory
from tools.processes import wait_until

pytestmark = pytest.mark.faults

TOPIC = "fault-orders"
GATEWAY_TOPIC, GATEWAY_GROUP = "fault-gateway", "fault-gateway-group"
PASSING, FAILING, ORDERLY = "fault-passing", "fault-failing", "fault-orderly"
RUNS = 2  # each fault, at a random moment (one-store stack)
RUNS_SHARDED = 1  # each fault once with three store shards (the suite's time, README)
SHARDS = 3
STORE_FAULTS = ("store", "commitlog-torn", "disk-full")
"""The faults that hit one store shard (drawn at random with three shards)."""
RECOVERY_TIMEOUT_S = 90.0
DISK_QUOTA_BYTES = 1 << 30
PROBE_TOPIC = "fault-probe"
DRAIN_TIMEOUT_S = 180.0
DRAIN_DUE_TIMEOUT_S = 30.0
"""Longest wait after a fault for what fell due around it to arrive (``Matrix.drained``)."""


@pytest.fixture(params=[1, SHARDS], ids=["one-store", "three-shards"])
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningStack]:
    factory = stack_factory(tmp_path)
    start = next(factory)
    # a quota over the store's own files, so the disk-full fault needs no full disk; the
    # services as deployed: the scheduler's beat apart, gunicorn's masters kept
    shards = {} if request.param == 1 else {"CLEPSYDRA_STORE_SHARDS": str(request.param)}
    yield start("--max-restarts", "50", "--quiet", "--separate-beat",
                CLEPSYDRA_STORE_DISK_CAPACITY_BYTES=str(DISK_QUOTA_BYTES),
                CLEPSYDRA_SINGLE_PROCESS="false", **shards)
    next(factory, None)


@pytest.fixture
def consumers(stack: RunningStack, tmp_path: Path) -> Iterator[list[ConsumerProcess]]:
    """The two groups' consumer processes (started by the test), stopped at the end."""
    env = dict(os.environ)
    env.update({"CLEPSYDRA_STORE_URL": stack.store_url, "CLEPSYDRA_RETRY_URL": stack.retry_url,
                "CLEPSYDRA_OTEL_EXPORTER": "none"})
    started = [ConsumerProcess(PASSING, TOPIC, tmp_path / "passing.jsonl", env),
               ConsumerProcess(FAILING, TOPIC, tmp_path / "failing.jsonl", env, fail=True),
               ConsumerProcess(ORDERLY, TOPIC, tmp_path / "orderly.jsonl", env, orderly=True)]
    yield started
    for consumer in started:
        consumer.stop()


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _redis_ok(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@dataclass
class Fault:
    name: str
    inject: Callable[[], None]
    recovered: Callable[[], bool]


STORE = (b"clepsydra_store",)
RETRY = (b"clepsydra_retry",)
WORKER = (b"clepsydra_scheduler", b"worker")
BEAT = (b"clepsydra_scheduler", b"beat")
GATEWAY = (b"clepsydra_gateway",)
REDIS = (b"redis-server",)


class Matrix:
    """The faults, each a way to kill one part and a way to see it back. A stack child is
    killed with its whole process group (gunicorn's master and worker, as a crashed container
    loses them), and it is back when a new process answers its health check."""

    def __init__(self, stack: RunningStack, consumers: list[ConsumerProcess]) -> None:
        self.stack = stack
        self.consumers = consumers
        self.shards = int(stack.env.get("CLEPSYDRA_STORE_SHARDS", "1"))
        self.target = 0
        """The store shard the next store fault hits (the test draws it, DEC-store-shards)."""
        self.redis = redis.Redis(port=int(stack.env["CLEPSYDRA_REDIS_PORT"]),
                                 socket_timeout=2)
        self._victim = 0
        self._grown_from = 0
        self.tears: list[int] = []
        self.disk_full_seen = 0

    def faults(self) -> list[Fault]:
        s = self.stack
        worker = s.url("CLEPSYDRA_SCHEDULER_PORT")
        beat = s.url("CLEPSYDRA_SCHEDULER_BEAT_PORT")
        return [
            Fault("store", lambda: self._kill(STORE, self.target),
                  self._back(STORE, None, store=True)),
            Fault("store-writer", self._kill_writer, self._writer_back),
            Fault("scheduler-worker", lambda: self._kill(WORKER), self._back(WORKER, worker)),
            Fault("scheduler-beat", lambda: self._kill(BEAT), self._back(BEAT, beat)),
            Fault("retry", lambda: self._kill(RETRY), self._back(RETRY, s.retry_url)),
            Fault("gateway", lambda: self._kill(GATEWAY),
                  self._back(GATEWAY, s.url("CLEPSYDRA_GATEWAY_HEALTH_PORT"))),
            Fault("redis", lambda: self._kill(REDIS), self._back(REDIS, None)),
            Fault("redis-empty", self._wipe_redis, self._redis_back_empty),
            Fault(CONSUMER_FAULT, self._kill_consumer, self._consumer_grew),
            Fault("commitlog-torn", self._tear_commitlog, self._back(STORE, None, store=True)),
            Fault("disk-full", self._fill_disk, self._writes_again),
        ]

    def store_url(self, shard: int) -> str:
        """Where store shard ``shard`` answers (the ports rule, clepsydra_core.shards)."""
        return f"http://127.0.0.1:{shard_port(int(self.stack.env['CLEPSYDRA_STORE_PORT']), shard)}"

    def store_dir(self, shard: int) -> Path:
        return self.stack.home / naming.store_dir_name(shard)

    def _pid_of(self, words: tuple[bytes, ...], shard: int | None = None) -> int | None:
        """The process below the stack whose command line has each of ``words`` (as a whole
        argument, or inside the program's path) - of store shard ``shard`` when one is named -;
        the group leader when several match."""
        found = []
        for pid in descendants(self.stack.proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if shard is not None and _shard_of(pid) != shard:
                    continue
            except (FileNotFoundError, ProcessLookupError):
                continue  # gone meanwhile
            if all(w in argv or w in argv[0] for w in words):
                found.append(pid)
        leaders = [pid for pid in found if _pgid(pid) == pid]
        return next(iter(leaders or found), None)

    def _kill(self, words: tuple[bytes, ...], shard: int | None = None) -> None:
        pid = self._pid_of(words, shard)
        assert pid is not None, f"no process {words} below the stack"
        self._victim = pid
        os.killpg(pid, signal.SIGKILL)

    def _writers(self) -> list[int]:
        """The target shard's gunicorn worker: the process holding its CommitLog (not its
        master, the group leader)."""
        master = self._pid_of(STORE, self.target)
        return [pid for pid in descendants(self.stack.proc.pid)
                if master is not None and pid != master and _pgid(pid) == master]

    def _kill_writer(self) -> None:
        """SIGKILL to the process holding the CommitLog alone; its master starts another."""
        writers = self._writers()
        assert len(writers) == 1, f"not one store worker below the master: {writers}"
        self._victim = writers[0]
        os.kill(writers[0], signal.SIGKILL)

    def _writer_back(self) -> bool:
        writers = self._writers()
        return bool(writers) and self._victim not in writers and \
            _healthy(self.store_url(self.target))

    def _back(self, words: tuple[bytes, ...], url: str | None, *,
              store: bool = False) -> Callable[[], bool]:
        def back() -> bool:
            pid = self._pid_of(words, self.target if store else None)
            if pid is None or pid == self._victim:
                return False
            if store:
                return _healthy(self.store_url(self.target))
            return _redis_ok(self.redis) if url is None else _healthy(url)
        return back

    def _wipe_redis(self) -> None:
        self.redis.set("fault-matrix:sentinel", "1")
        with _Paused(self.stack.proc.pid):
            self._kill(REDIS)
            time.sleep(0.2)
            for path in (self.stack.home / "redis").rglob("*"):
                if path.is_file():
                    path.unlink()

    def _redis_back_empty(self) -> bool:
        if not self._back(REDIS, None)():
            return False
        assert self.redis.get("fault-matrix:sentinel") is None, "Redis kept its data"
        return True

    def _kill_consumer(self) -> None:
        """The failing group's consumer and the orderly group's, together."""
        for victim in self.consumers[1:]:
            victim.kill()
        self._grown_from = len(self.consumers[1].lines())
        for victim in self.consumers[1:]:
            victim.start()

    def _consumer_grew(self) -> bool:
        return len(self.consumers[1].lines()) > self._grown_from

    def _tear_commitlog(self) -> None:
        with _Paused(self.stack.proc.pid):
            self._kill(STORE, self.target)
            time.sleep(0.2)
            self.tears.append(tear_tail(self.store_dir(self.target) / "commitlog"))


    def _probe_status(self) -> int:
        try:
            return requests.post(f"{self.store_url(self.target)}/v1/topics/{PROBE_TOPIC}/"
                                 "messages", json={"body": "probe"}, timeout=5).status_code
        except requests.RequestException:
            return 0

    def _fill_disk(self) -> None:
        """Past the high-water mark (a sparse ballast file as big as the quota among the
        store's files), until the store refuses a write with 507; then the space comes back."""
        ballast = self.store_dir(self.target) / "ballast"
        with open(ballast, "wb") as f:
            f.truncate(DISK_QUOTA_BYTES)
        try:
            wait_until(lambda: self._probe_status() == 507, 30, interval_s=0.2,
                       what="the store refusing writes past its disk limit (507)")
            self.disk_full_seen += 1
        finally:
            ballast.unlink()

    def drained(self) -> bool:
        """No delayed message is due and not yet handed over (a level's oldest pending entry
        and the earliest pending timer both lie ahead): what fell due around the last fault
        has arrived, so the next fault is charged only its own lateness."""
        return all(self._shard_drained(self.store_url(s)) for s in range(self.shards))

    @staticmethod
    def _shard_drained(store: str) -> bool:
        """:meth:`drained` for one store shard (each has its own levels and timers)."""
        now = time.time() * 1000
        try:
            table = requests.get(f"{store}/v1/schedule/levels", timeout=5).json()
            for level in table["levels"]:
                first = max(level["handedOver"] + 1, level["minOffset"])
                if first >= level["maxOffset"]:
                    continue
                head = requests.get(f"{store}/v1/schedule/levels/{level['level']}/entries",
                                    params={"offset": first, "max": 1}, timeout=5).json()
                if head["deliverTs"] and head["deliverTs"][0] <= now:
                    return False
            timers = requests.get(f"{store}/v1/schedule/timers", timeout=5).json()
        except (requests.RequestException, ValueError, KeyError):
            return False
        return timers["nextDueAt"] is None or timers["nextDueAt"] > now

    def _writes_again(self) -> bool:
        return self._probe_status() == 201


def _shard_of(pid: int) -> int:
    """The store shard a process of the stack is (its CLEPSYDRA_STORE_SHARD_ID; 0 without)."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"CLEPSYDRA_STORE_SHARD_ID="):
            return int(item.split(b"=", 1)[1])
    return 0


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class _Paused:
    """The stack's supervisor stopped (SIGSTOP) for the block, so it restarts nothing until
    the damage is done."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def tear_tail(commitlog: Path) -> int:
    """Write the first half of a copy of the newest segment's first record after its last
    record (an append cut mid-record, as a crash leaves it); the byte position of the tear."""
    newest = max(commitlog.iterdir(), key=lambda p: p.name)
    raw = newest.read_bytes()
    pos, first = 0, b""
    while True:
        size, magic = peek_size_magic(raw, pos)
        if size <= 0 or magic == END_MAGIC:
            break
        try:
            _, size = decode_record(raw, pos)
        except CorruptRecordError:
            break
        first = first or bytes(raw[pos:pos + size])
        pos += size
    assert first, f"no record in {newest}"
    torn = first[:len(first) // 2]  # segments are not pre-allocated: this extends the file
    with open(newest, "r+b") as f:
        f.seek(pos)
        f.write(torn)
    return pos


def _books(stack: RunningStack, producing: Producing,
           consumers: list[ConsumerProcess]) -> Books:
    return Books(list(producing.acked), seqs_in(stack.store_url, TOPIC),
                 seqs_in(stack.store_url, f"%DLQ%{FAILING}"),
                 consumers[0].lines(), consumers[1].lines())


@pytest.mark.timeout(900)
def test_no_acknowledged_message_is_lost_when_any_process_dies(
        stack: RunningStack, consumers: list[ConsumerProcess]) -> None:
    seed = int(os.environ.get("CLEPSYDRA_FAULTS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    admin = AdminClient(stack.store_url, stack.retry_url)
    admin.create_topic(TOPIC, 4)
    admin.create_topic(PROBE_TOPIC, 1)
    admin.create_topic(GATEWAY_TOPIC, 2)
    admin.set_group_settings(FAILING, retry_max_times=1)  # one retry, then the DLQ
    for consumer in consumers:
        consumer.start()
    producing = Producing(stack.store_url, TOPIC)
    producing.start()
    traffic = GatewayTraffic(f"127.0.0.1:{stack.env['CLEPSYDRA_GATEWAY_PORT']}", GATEWAY_TOPIC,
                             GATEWAY_GROUP)
    traffic.start()
    matrix = Matrix(stack, consumers)
    runs = RUNS if matrix.shards == 1 else RUNS_SHARDED
    plan = [f for f in matrix.faults() for _ in range(runs)]
    rng.shuffle(plan)
    recovery_ms: dict[str, list[int]] = defaultdict(list)
    injected: list[Disruption] = []
    hits: list[tuple[str, int]] = []
    try:
        wait_until(lambda: consumers[0].lines() != [], 60, what="the first consumed message")
        for fault in plan:
            producing.phase = fault.name
            time.sleep(rng.uniform(0.3, 2.0))
            began = time.monotonic()
            now_ms = int(time.time() * 1000)
            matrix.target = rng.randrange(matrix.shards)
            if fault.name in STORE_FAULTS:
                hits.append((fault.name, matrix.target))
            disruption = Disruption(fault.name, now_ms, now_ms)
            injected.append(disruption)
            fault.inject()
            wait_until(fault.recovered, RECOVERY_TIMEOUT_S, interval_s=0.1,
                       what=f"recovery from {fault.name} (seed {seed})")
            disruption.over_ms = int(time.time() * 1000)
            recovery_ms[fault.name].append(int((time.monotonic() - began) * 1000))
            time.sleep(1.0)
            try:
                wait_until(matrix.drained, DRAIN_DUE_TIMEOUT_S, interval_s=0.2)
            except TimeoutError:
                pass  # the lateness check below says which fault it was
        producing.phase = "after"
        time.sleep(3.0)
    except BaseException:
        traffic.stop()  # its clients' threads end with it
        raise
    finally:
        producing.stop.set()
        traffic.stop_sending.set()
        producing.join(30)

    def settled() -> bool:
        acked = {s.seq for s in producing.acked}
        return (not _books(stack, producing, consumers).end_state_missing()
                and {line["seq"] for line in consumers[2].lines()} >= acked
                and traffic.settled(injected))

    try:
        wait_until(settled, DRAIN_TIMEOUT_S, interval_s=2.0, what="every message at its end")
    except TimeoutError:
        pass  # the assertions below say what is missing
    finally:
        traffic.stop()
    books = _books(stack, producing, consumers)
    lateness = max_lateness(injected, deliveries(stack.store_url, [TOPIC, f"%RETRY%{FAILING}"]))
    lateness_ms: dict[str, list[int | None]] = defaultdict(list)
    for disruption, late in zip(injected, lateness, strict=True):
        lateness_ms[disruption.name].append(late)
    phases = ["warm-up", *sorted(recovery_ms), "after"]
    rows = books.table(phases, injected, recovery_ms, producing.failed, lateness_ms)
    print(f"\nfault matrix, {matrix.shards} store shard(s), seed {seed}:\n"
          + json.dumps(rows, indent=1))
    print("back (ms) -> max lateness of a delayed message (ms), each run:\n" + "\n".join(
        f"  {name:<17} " + "  ".join(f"{back:>6,} -> {late if late is not None else '-':>6}"
                                      for back, late in zip(recovery_ms[name],
                                                            lateness_ms[name], strict=True))
        for name in sorted(recovery_ms)))
    if matrix.shards > 1:
        print(f"store faults hit shards: {hits}")
    print(f"duplicates by cause: {dict(books.duplicates_by_cause(injected))}")
    gateway_books = traffic.summary(injected)
    print(f"through the gateway (official RocketMQ 5 client): {gateway_books}")
    report = os.environ.get("CLEPSYDRA_FAULTS_REPORT")
    if report:
        report = report.replace(".json", "") + ("" if matrix.shards == 1 else "-shards") + ".json"
        Path(report).write_text(json.dumps({"seed": seed, "rows": rows,
                                            "gateway": gateway_books,
                                            "injected": [astuple(d) for d in injected]},
                                           indent=1))

    missing = books.end_state_missing()
    assert missing == {}, f"lost (seed {seed}): { {k: v[:20] for k, v in missing.items()} }"
    assert [s for s, n in books.in_topic.items() if n > 1] == [], \
        f"a message stored twice in its topic (SPEC D9, seed {seed})"
    assert books.early() == [], f"delivered before its time (SPEC D3, seed {seed})"
    orderly = consumers[2].lines()
    assert {line["seq"] for line in orderly} >= {s.seq for s in books.acked}, "orderly lost"
    assert order_breaks(orderly) == [], f"an orderly queue jumped ahead (SPEC R12, seed {seed})"
    # at least once, but a second delivery only where a crash lost an acknowledgement
    assert books.duplicates_by_cause(injected)["none"] == 0, f"seed {seed}"
    assert sum(r["acked"] for r in rows) == len(books.acked) > 0
    assert all(r["runs"] == runs for r in rows if r["fault"] not in ("warm-up", "after"))
    assert next(r for r in rows if r["fault"] == "after")["acked"] > 0  # throughput came back
    assert matrix.tears and all(pos >= 0 for pos in matrix.tears), matrix.tears  # really torn
    assert matrix.disk_full_seen == runs  # the disk limit was really reached
    assert stack.proc.poll() is None, stack.why()
    assert all(_healthy(matrix.store_url(s)) for s in range(matrix.shards))
    assert _healthy(stack.store_url) and _healthy(stack.retry_url)
    # the gateway (official client): nothing acknowledged lost, what was left to run out came
    # back and not before its time, nothing received again after an OK ack unless a fault
    # explains it, and it served again after its kills
    assert traffic.lost(injected) == [], f"lost through the gateway (seed {seed})"
    assert traffic.not_back() == [], f"left to run out, never back (seed {seed})"
    assert traffic.early(injected) == [], \
        f"back before its invisible time (seed {seed}): {traffic.unexplained(injected)[:5]}"
    assert traffic.again_after_ack(injected)["none"] == 0, \
        f"received again after an OK ack (seed {seed}): {traffic.unexplained(injected)[:5]}"
    back_ms = max(d.over_ms for d in injected if d.name == "gateway")
    assert any(r.acked for r in traffic.receipts if r.got_ms > back_ms), \
        "nothing received and acked through the gateway after its last kill"
    assert _healthy(stack.url("CLEPSYDRA_GATEWAY_HEALTH_PORT"))
    # DEC-scheduler-lease, DEC-scheduler-store-retry: a crash costs a delayed message its
    # outage (the time its part took to answer again), not seconds more
    over = [(name, back, late) for name in sorted(recovery_ms)
            for back, late in zip(recovery_ms[name], lateness_ms[name], strict=True)
            if late is not None and late > back + LATENESS_SLACK_MS]
    assert over == [], f"(fault, back ms, max lateness ms) past back + 2 s (seed {seed})"
    assert sum(late is not None for late in lateness) >= len(injected) // 2  # measured
