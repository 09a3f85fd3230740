"""Durability: sync flush group commit (SPEC P2) and kill -9 at random instants (SPEC P3)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
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


def _run_writer(data_dir: Path, seed: int, kill_after: int) -> list[tuple[int, str]]:
    """Start the writer, read ``kill_after`` acknowledgements, SIGKILL it, return every
    complete line it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(WRITER), str(data_dir), str(seed)],
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
