"""Recovery after a crash (SPEC P3): torn CommitLog tail, lost ConsumeQueue files, re-dispatch
from the checkpoint."""

from __future__ import annotations

import json
import os
import random
import shutil

from clepsydra_core import naming
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import OpenStore


def _pull_all(store: object, topic: str, queues: int) -> list[list[tuple[int, bytes]]]:
    out = []
    for queue_id in range(queues):
        read = store.read_queue(topic, queue_id, 0, 10_000)  # type: ignore[attr-defined]
        out.append([(m.commitlog_offset, m.body) for m in read.messages])
    return out


def test_torn_commitlog_tail_is_truncated_to_last_whole_record(open_store: OpenStore) -> None:
    # SPEC P3
    store = open_store()
    store.create_topic("T", 2)
    results = store.put_batch([PutRequest("T", b"m%03d" % i * 50) for i in range(100)])
    store.close()
    segment_dir = store.config.data_dir / naming.COMMITLOG_DIR
    last = sorted(segment_dir.iterdir())[-1]
    victim = results[-1]
    cut = victim.commitlog_offset - int(last.name) + victim.size // 2
    with open(last, "r+b") as f:
        f.truncate(cut)

    store = open_store()
    assert store.stats()["commitlog_max_offset"] == victim.commitlog_offset
    queues = _pull_all(store, "T", 2)
    assert sum(len(q) for q in queues) == 99
    assert victim.commitlog_offset not in {o for q in queues for o, _ in q}
    again = store.put(PutRequest("T", b"after", queue_id=victim.queue_id))
    assert again.commitlog_offset == victim.commitlog_offset
    assert again.queue_offset == victim.queue_offset
    assert store.get_by_commitlog_offset(again.commitlog_offset).body == b"after"


def test_garbage_after_last_record_is_cut(open_store: OpenStore) -> None:
    # SPEC P3: a record that fails its size/CRC check ends the log
    store = open_store()
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"x" * 300) for _ in range(10)])
    end = int(store.stats()["commitlog_max_offset"])
    store.close()
    last = sorted((store.config.data_dir / naming.COMMITLOG_DIR).iterdir())[-1]
    with open(last, "ab") as f:
        f.write(bytes(random.Random(7).randrange(256) for _ in range(500)))
    store = open_store()
    assert store.stats()["commitlog_max_offset"] == end
    assert len(store.read_queue("T", 0, 0, 100).messages) == 10


def test_deleted_consume_queue_files_are_rebuilt(open_store: OpenStore) -> None:
    # SPEC P3: rebuild ConsumeQueue entries that are missing
    store = open_store()
    store.create_topic("T", 3)
    store.put_batch([PutRequest("T", b"v%d" % i, tags=f"t{i % 4}") for i in range(400)])
    before = _pull_all(store, "T", 3)
    store.close()
    shutil.rmtree(store.config.data_dir / naming.CONSUMEQUEUE_DIR / "T" / "1")
    cq0 = store.config.data_dir / naming.CONSUMEQUEUE_DIR / "T" / "0"
    os.unlink(sorted(cq0.iterdir())[0])

    store = open_store()
    assert _pull_all(store, "T", 3) == before
    assert [q.max_offset for q in store.get_topic("T").queues] == [134, 133, 133]


def test_restart_resumes_dispatch_from_checkpoint(open_store: OpenStore) -> None:
    # SPEC P3: records appended after the checkpoint are dispatched again on start
    store = open_store(flush_interval_ms=3_600_000)
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"early%d" % i) for i in range(5)])
    checkpoint_offset = store.flush()
    store.put_batch([PutRequest("T", b"late%d" % i, keys=f"k{i}") for i in range(5)])
    # Simulate a crash after the appends: the ConsumeQueue and key index lose what followed
    # the checkpoint, the CommitLog keeps it.
    data = store.config.data_dir
    saved_checkpoint = (data / naming.CHECKPOINT_FILE).read_bytes()
    store.close()
    (data / naming.CHECKPOINT_FILE).write_bytes(saved_checkpoint)
    assert json.loads(saved_checkpoint)["commitlog_offset"] == checkpoint_offset
    cq_file = data / naming.CONSUMEQUEUE_DIR / "T" / "0" / naming.segment_file_name(0)
    with open(cq_file, "r+b") as f:
        f.truncate(5 * 20)
    key_file = data / naming.INDEX_DIR / naming.KEY_INDEX_FILE
    key_file.write_bytes(b"")

    store = open_store()
    bodies = [m.body for m in store.read_queue("T", 0, 0, 100).messages]
    assert bodies == [b"early%d" % i for i in range(5)] + [b"late%d" % i for i in range(5)]
    assert [m.body for m in store.get_by_key("T", "k3")] == [b"late3"]


def test_consume_queue_entries_past_commitlog_end_are_cut(open_store: OpenStore) -> None:
    # SPEC P3: entries beyond the CommitLog are removed
    store = open_store()
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"x" * 100) for _ in range(20)])
    store.close()
    last = sorted((store.config.data_dir / naming.COMMITLOG_DIR).iterdir())[-1]
    with open(last, "r+b") as f:
        f.truncate(results[15].commitlog_offset - int(last.name))
    store = open_store()
    assert store.get_topic("T").queues[0].max_offset == 15
    assert store.put(PutRequest("T", b"new")).queue_offset == 15


def test_torn_handover_copy_under_a_later_checkpoint_is_handed_over_again(
        open_store: OpenStore) -> None:
    # SPEC D9, P3: a machine crash cut the CommitLog inside the last hand-over
    # copy, but the checkpoint (written after it) says it was handed over
    store = open_store(levels="1s 2s")
    store.create_topic("T", 1)
    parked = store.put_batch([PutRequest("T", b"m%d" % i, delay_level=1) for i in range(5)])
    now = parked[-1].store_timestamp + 1_000
    assert store.handover(1, 0, 10, now_ms=now).delivered == 5
    copies = store.read_queue("T", 0, 0, 10).messages
    store.close()  # flushes and writes the checkpoint after every copy
    checkpoint = json.loads((store.config.data_dir / naming.CHECKPOINT_FILE).read_bytes())
    assert checkpoint["handed_over"] == {"1": 4}
    last = sorted((store.config.data_dir / naming.COMMITLOG_DIR).iterdir())[-1]
    victim = copies[-1]
    with open(last, "r+b") as f:
        f.truncate(victim.commitlog_offset - int(last.name) + 10)

    store = open_store(levels="1s 2s")
    assert store.schedule_entries(1, 0, 10).handed_over == 3  # from the copies present
    again = store.handover(1, 5, 10, now_ms=now)  # the scheduler's Redis progress is ahead
    assert (again.from_offset, again.delivered, again.next_offset) == (4, 1, 5)
    bodies = [m.body for m in store.read_queue("T", 0, 0, 10).messages]
    assert bodies == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # each exactly once
    store.close()
    store = open_store(levels="1s 2s")
    assert store.handover(1, 0, 10, now_ms=now).delivered == 0
    assert store.schedule_entries(1, 0, 10).handed_over == 4


def test_a_restart_decodes_only_the_records_after_the_checkpoint(
        open_store: OpenStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # SPEC P3, DEC-recovery-from-checkpoint: the records up to a trusted checkpoint were
    # fsync'd before it was written; the restart walked (decoded, CRC-checked) every record of
    # the checkpoint's segment from its start (1M records at 1M pending: the whole restart).
    # Now it decodes the records after the checkpoint, and they are dispatched again
    from clepsydra_store.engine.log import commitlog

    store = open_store(flush_interval_ms=3_600_000, segment_size_bytes=1 << 20)
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"early%d" % i) for i in range(300)])
    store.flush()
    data = store.config.data_dir
    saved_checkpoint = (data / naming.CHECKPOINT_FILE).read_bytes()
    store.put_batch([PutRequest("T", b"late%d" % i) for i in range(7)])
    store.close()
    (data / naming.CHECKPOINT_FILE).write_bytes(saved_checkpoint)  # a crash before the next
    decoded: list[int] = []
    real_decode = commitlog.decode_record

    def counted(buf, pos):  # type: ignore[no-untyped-def]
        decoded.append(pos)
        return real_decode(buf, pos)
    monkeypatch.setattr(commitlog, "decode_record", counted)
    store = open_store()
    assert len(decoded) == 7
    bodies = [m.body for m in store.read_queue("T", 0, 0, 1_000).messages]
    assert bodies == [b"early%d" % i for i in range(300)] + [b"late%d" % i for i in range(7)]
    store.close()
    decoded.clear()
    store = open_store()  # a clean stop: nothing to walk
    assert decoded == []
    assert len(store.read_queue("T", 0, 0, 1_000).messages) == 307
