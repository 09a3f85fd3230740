"""Durability: sync flush group commit (SPEC P2) and kill -9 at random instants (SPEC P3)."""

from __future__ import annotations

import collections
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clepsydra_store.engine.types import PutRequest, PutResult, PutStatus
from tests.unit.store.conftest import OpenStore

WRITER = Path(__file__).with_name("crash_writer.py")


def test_sync_flush_with_concurrent_producers(open_store: OpenStore) -> None:
    # SPEC P2: acknowledged only once fsync'd; concurrent producers share fsyncs
    store = open_store(flush="sync")
    store.create_topic("T", 4)
    results: list[list[PutResult]] = [[] for _ in range(8)]

    def produce(i: int) -> None:
        for n in range(40):
            results[i] += store.put_batch([PutRequest("T", b"%d-%d" % (i, n))])

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [r for rs in results for r in rs]
    assert len(flat) == 320
    assert all(r.status is PutStatus.OK for r in flat)
    assert store.stats()["commitlog_flushed_offset"] >= max(r.commitlog_offset for r in flat)
    assert len({r.commitlog_offset for r in flat}) == 320
    store.close()
    store = open_store()
    total = sum(q.max_offset for q in store.get_topic("T").queues)
    assert total == 320


def _run_writer(data_dir: Path, seed: int, kill_after: int,
                *mode: str) -> list[tuple[int, str]]:
    """Start the writer, read ``kill_after`` acknowledgements, SIGKILL it, return every
    complete line it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(WRITER), str(data_dir), str(seed), *mode],
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    acked: list[tuple[int, str]] = []
    try:
        assert proc.stdout.readline() == b"ready\n"
        while len(acked) < kill_after:
            line = proc.stdout.readline()
            assert line, "writer died"
            offset, digest = line.split()
            acked.append((int(offset), digest.decode()))
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate()
    for line in rest.split(b"\n"):
        parts = line.split()
        if len(parts) == 2 and len(parts[1]) == 64:
            acked.append((int(parts[0]), parts[1].decode()))
    return acked


def test_every_acknowledged_message_survives_kill_9(open_store: OpenStore,
                                                   data_dir: Path) -> None:
    # SPEC P2, P3: kill -9 at random instants, every acknowledged message is there
    rng = random.Random(20240601)
    all_acked: list[tuple[int, str]] = []
    for round_no in range(4):
        acked = _run_writer(data_dir, round_no, rng.randint(5, 400))
        assert acked
        all_acked += acked
        store = open_store()
        for offset, digest in all_acked:
            record = store.get_by_commitlog_offset(offset)
            assert hashlib.sha256(record.body).hexdigest() == digest
        queued = sum(q.max_offset for q in store.get_topic("T").queues)
        scheduled = store.schedule_entries(1, 0, 10_000).max_offset
        assert queued + scheduled >= len(all_acked)
        store.close()


def test_every_acknowledged_timer_is_handed_over_after_kill_9(open_store: OpenStore,
                                                             data_dir: Path) -> None:
    # SPEC P2, P3, T1 (DEC-timer-pair-journal): timers due in thousands of distinct seconds, their
    # pairs held in memory, journalled at each flush and spread into slot files past a (here
    # lowered) bound; kill -9 at random instants, before, during and after spills: after the
    # reopen every acknowledged timer is handed over, once
    rng = random.Random(20261128)
    all_acked: list[tuple[int, str]] = []
    for round_no in range(4):
        acked = _run_writer(data_dir, round_no, rng.randint(300, 3_000), "timers", "500")
        assert acked
        all_acked += acked
    slots = data_dir / "timerslots"
    assert [h for h in slots.iterdir() if h.name.isdigit()]  # spills happened
    store = open_store()
    far = int(time.time() * 1000) + 3 * 3_600_000
    while store._timers.handover(far, 5_000).delivered:
        pass
    bodies: list[str] = []
    for queue in store.get_topic("T").queues:
        offset = 0
        while offset < queue.max_offset:
            read = store.read_queue("T", queue.queue_id, offset, 1_000)
            bodies += [hashlib.sha256(m.body).hexdigest() for m in read.messages]
            offset = read.next_offset
    copies = collections.Counter(bodies)
    assert all(copies[digest] == 1 for _, digest in all_acked)  # none lost, none twice
    assert sum(copies.values()) <= len(all_acked) + 4 * 60  # at most the unacknowledged batches
