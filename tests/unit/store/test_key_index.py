"""The on-disk key index (DEC-key-index-on-disk: "the store's memory must not grow with the messages
it holds"): slots and chained entries in rolled files, collisions, retention, torn files, restarts,
and the store's look-ups over it."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from clepsydra_core import naming
from clepsydra_store.engine.index.key_index import KeyIndex, key_hash
from clepsydra_store.engine.index.key_index_file import (
    ENTRY,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    STATE_CLEAN,
    STATE_OPEN,
    VERSION,
)
from clepsydra_store.engine.types import PutRequest
from tests.unit.store.conftest import OpenStore
from tests.unit.store.test_flush import _run_writer

FUTURE_MS = 200 * 3_600_000


def _files(index_dir: Path) -> list[Path]:
    return sorted((index_dir / naming.KEY_INDEX_DIR).iterdir())


def _header(path: Path) -> tuple[object, ...]:
    return HEADER.unpack_from(path.read_bytes()[:HEADER_SIZE])


def _fill(index: KeyIndex, first: int, count: int, *, step: int = 100) -> dict[int, str]:
    """Index ``count`` records (one key each, ``k<n>``) from CommitLog offset ``first``."""
    placed = {}
    for n in range(count):
        offset = first + n * step
        index.add([f"k{offset}"], offset)
        placed[offset] = f"k{offset}"
    index.write_pending()
    return placed


# ---- the index on its own ---------------------------------------------------------------------

def test_keys_sharing_a_slot_or_a_hash_are_all_found_newest_first(tmp_path: Path) -> None:
    # a hash only narrows the search; several keys per slot and several records
    # per hash chain through the entries
    index = KeyIndex(tmp_path, entries_per_file=400)  # 100 slots for 300 keys: shared slots
    placed = _fill(index, 0, 300)
    for offset, key in placed.items():
        assert index.lookup(key) == [offset]
    h = key_hash("same")
    index.add_many([h, h], [40_000, 40_100])
    index.add(["same", "other"], 40_200)
    index.write_pending()
    assert list(index.newest("same")) == [40_200, 40_100, 40_000]
    assert index.lookup("same") == [40_000, 40_100, 40_200]
    assert index.lookup("absent") == []
    index.close()


def test_files_roll_when_full_and_lookups_span_them(tmp_path: Path) -> None:
    # fixed-size files rolled when full, each named by its first CommitLog offset
    index = KeyIndex(tmp_path, entries_per_file=16)
    placed = _fill(index, 1_000, 50)
    index.add(["k1000"], 9_000)  # the same key again, in the last file
    index.write_pending()
    files = _files(tmp_path)
    assert [int(f.name) for f in files] == [1_000, 2_600, 4_200, 5_800]
    assert index.stats() == {"key_index_files": 4, "key_index_entries": 51}
    for offset, key in placed.items():
        assert offset in index.lookup(key)
    assert list(index.newest("k1000")) == [9_000, 1_000]
    index.close()
    for f in files:
        magic, version, state, slots, capacity, *_ = _header(f)
        assert (magic, version, state, slots, capacity) == (MAGIC, VERSION, STATE_CLEAN, 4, 16)


def test_retention_deletes_files_whose_newest_entry_is_below_the_commitlog_min(
        tmp_path: Path) -> None:
    # SPEC P4: a file whose newest offset is below the oldest kept CommitLog offset
    index = KeyIndex(tmp_path, entries_per_file=16)
    placed = _fill(index, 0, 40)  # files [0..1500], [1600..3100], [3200..3900]
    assert index.drop_below(3_100) == 1  # the second file still holds 3100
    assert [int(f.name) for f in _files(tmp_path)] == [1_600, 3_200]
    assert index.lookup("k0") == [] and index.lookup("k1500") == []
    assert index.lookup("k1600") == [1_600]
    assert index.drop_below(4_000) == 2  # the active one too
    assert _files(tmp_path) == []
    assert index.lookup("k3900") == []
    _fill(index, 5_000, 3)  # a new file takes the next keys
    assert index.lookup("k5100") == [5_100]
    index.close()
    reopened = KeyIndex(tmp_path, entries_per_file=16)
    assert reopened.rebuild_from is None and reopened.lookup("k5200") == [5_200]
    assert len(placed) == 40
    reopened.close()


@pytest.mark.parametrize("entries_per_file", [16, 80_000])  # 80,000: slots in two chunks
def test_clean_restart_keeps_every_entry_and_appends_after_them(tmp_path: Path,
                                                              entries_per_file: int) -> None:
    # restart
    index = KeyIndex(tmp_path, entries_per_file=entries_per_file)
    placed = _fill(index, 0, 200)
    index.close()
    index = KeyIndex(tmp_path, entries_per_file=entries_per_file)
    assert index.rebuild_from is None and index.last_offset == 19_900
    assert all(index.lookup(k) == [o] for o, k in placed.items())
    index.add(["k0"], 20_000)
    index.write_pending()
    assert index.lookup("k0") == [0, 20_000]
    index.close()
    index = KeyIndex(tmp_path, entries_per_file=entries_per_file)
    assert all(index.lookup(k)[0] == o for o, k in placed.items())
    index.close()


def test_crash_keeps_the_durable_point_and_drops_what_followed(tmp_path: Path) -> None:
    # crash safety: entries after the last flush are not trusted; the slots of a
    # file not closed cleanly are rebuilt from its entries
    index = KeyIndex(tmp_path, entries_per_file=64)
    placed = _fill(index, 0, 20)
    index.fsync()  # the flush: a durable point at 20 entries
    _fill(index, 2_000, 5)  # written, not flushed; then the process dies (no close)
    active = _files(tmp_path)[-1]
    assert _header(active)[2] == STATE_OPEN and _header(active)[5] == 20
    crashed = KeyIndex(tmp_path, entries_per_file=64)
    assert crashed.rebuild_from is None  # the checkpoint is at or before the durable point
    assert crashed.last_offset == 1_900
    assert all(crashed.lookup(k) == [o] for o, k in placed.items())
    assert crashed.lookup("k2000") == []
    crashed.add(["k2000"], 2_000, dedupe=True)  # recovery re-dispatches it
    crashed.add(["k1900"], 1_900, dedupe=True)  # already held: skipped
    crashed.write_pending()
    assert crashed.lookup("k2000") == [2_000] and crashed.lookup("k1900") == [1_900]
    crashed.close()


def test_torn_file_is_cut_at_its_last_whole_entry_and_the_rest_rebuilt(tmp_path: Path) -> None:
    # a torn index file is repaired, and recovery derives the rest from the
    # CommitLog (rebuild_from)
    index = KeyIndex(tmp_path, entries_per_file=64)
    _fill(index, 0, 30)
    index.fsync()
    path = _files(tmp_path)[-1]
    index.close()
    with open(path, "r+b") as f:
        f.truncate(HEADER_SIZE + 12 * ENTRY.size + 7)  # 12 whole entries and a piece
    torn = KeyIndex(tmp_path, entries_per_file=64)
    assert torn.rebuild_from == 1_100 + 1 and torn.last_offset == 1_100
    assert torn.lookup("k1100") == [1_100] and torn.lookup("k1200") == []
    torn.close()
    # closed cleanly: 12 entries, then the 16 slots
    assert _header(path)[5] == 12
    assert os.path.getsize(path) == HEADER_SIZE + 12 * ENTRY.size + 16 * 4


def test_garbage_entries_and_a_broken_header_are_not_trusted(tmp_path: Path) -> None:
    # entries out of CommitLog order end a file; a file whose header is not ours
    # goes with every later one
    index = KeyIndex(tmp_path, entries_per_file=16)
    _fill(index, 0, 40)
    index.fsync()
    first, second, third = _files(tmp_path)
    with open(third, "r+b") as f:  # the active file, not closed cleanly: its entry 3 garbled
        f.seek(HEADER_SIZE + 2 * ENTRY.size)
        f.write(ENTRY.pack(key_hash("x"), 5, 0))
    damaged = KeyIndex(tmp_path, entries_per_file=16)
    assert damaged.rebuild_from == 3_300 + 1
    assert damaged.lookup("k3300") == [3_300] and damaged.lookup("k3400") == []
    del damaged  # a crash again
    second.write_bytes(b"XXXX" + second.read_bytes()[4:])
    broken = KeyIndex(tmp_path, entries_per_file=16)
    assert broken.rebuild_from == 1_600
    assert _files(tmp_path) == [first]
    assert broken.lookup("k1500") == [1_500] and broken.lookup("k1600") == []
    broken.close()


def test_entries_past_the_commitlog_end_are_removed(tmp_path: Path) -> None:
    # SPEC P3: the index is never trusted past the recovered CommitLog end
    index = KeyIndex(tmp_path, entries_per_file=16)
    _fill(index, 0, 40)
    index.close()
    index = KeyIndex(tmp_path, entries_per_file=16)
    index.truncate_from(2_050)
    assert [int(f.name) for f in _files(tmp_path)] == [0, 1_600]
    assert index.last_offset == 2_000
    assert index.lookup("k2000") == [2_000] and index.lookup("k2100") == []
    index.add(["k2100"], 2_050)  # the next record, where the lost one was
    index.write_pending()
    assert index.lookup("k2100") == [2_050]
    index.close()
    assert KeyIndex(tmp_path, entries_per_file=16).lookup("k2100") == [2_050]


def test_old_format_file_is_deleted_and_the_index_rebuilt(tmp_path: Path) -> None:
    # keys.idx of the previous format is not migrated: deleted, rebuilt from the
    # CommitLog (rebuild_from 0)
    (tmp_path / naming.KEY_INDEX_FILE).write_bytes(b"\0" * 32)
    index = KeyIndex(tmp_path)
    assert index.rebuild_from == 0
    assert not (tmp_path / naming.KEY_INDEX_FILE).exists()
    index.close()


# ---- the store over it ---------------------------------------------------------------------

def test_store_lookups_verify_the_record_behind_a_colliding_entry(open_store: OpenStore) -> None:
    # readers verify by reading the record (collisions) and filter by topic
    store = open_store(key_index_entries_per_file=16)
    store.create_topic("T", 1)
    store.create_topic("U", 1)
    mine = store.put(PutRequest("T", b"mine", keys="k"))
    other = store.put(PutRequest("T", b"other", keys="j"))
    elsewhere = store.put(PutRequest("U", b"elsewhere", keys="k"))
    index = store._dispatcher.key_index
    index.add_many([key_hash("k"), key_hash(mine.msg_id)], [other.commitlog_offset] * 2)
    index.write_pending()  # entries claiming "k" and mine's msgId for another record
    assert [m.body for m in store.get_by_key("T", "k")] == [b"mine"]
    assert [m.body for m in store.get_by_key("U", "k")] == [b"elsewhere"]
    assert [m.body for m in store.get_by_msg_id(mine.msg_id)] == [b"mine"]
    assert elsewhere.commitlog_offset > other.commitlog_offset


def test_store_lookups_span_rolled_files_and_survive_reopen(open_store: OpenStore) -> None:
    # same answers as before the index moved to disk, newest max_count first
    store = open_store(key_index_entries_per_file=16)
    store.create_topic("T", 2)
    results = store.put_batch([PutRequest("T", b"m%d" % i, keys=f"a{i % 5} all")
                               for i in range(60)])
    assert store.stats()["key_index_files"] > 5
    assert [m.body for m in store.get_by_key("T", "all", 3)] == [b"m57", b"m58", b"m59"]
    assert len(store.get_by_key("T", "a2", 100)) == 12
    store.close()
    store = open_store(key_index_entries_per_file=16)
    for r in results:
        assert [m.commitlog_offset for m in store.get_by_msg_id(r.msg_id)] == [r.commitlog_offset]
    assert [m.body for m in store.get_by_key("T", "a4", 2)] == [b"m54", b"m59"]


def test_store_rebuilds_a_lost_or_torn_index_from_the_commitlog(open_store: OpenStore,
                                                                data_dir: Path) -> None:
    # crash safety, SPEC P3: index files lost or damaged behind the checkpoint
    store = open_store(key_index_entries_per_file=16)
    store.create_topic("T", 1)
    results = store.put_batch([PutRequest("T", b"m%d" % i, keys=f"k{i}") for i in range(40)])
    store.close()
    index_files = _files(data_dir / naming.INDEX_DIR)
    index_files[-1].write_bytes(index_files[-1].read_bytes()[:HEADER_SIZE - 1])
    index_files[1].unlink()
    store = open_store(key_index_entries_per_file=16)
    for i, r in enumerate(results):
        assert [m.body for m in store.get_by_key("T", f"k{i}")] == [b"m%d" % i]
        assert [m.commitlog_offset for m in store.get_by_msg_id(r.msg_id)] == [r.commitlog_offset]
    store.close()
    os.unlink(data_dir / naming.CHECKPOINT_FILE)
    for f in _files(data_dir / naming.INDEX_DIR):
        f.unlink()
    os.rmdir(data_dir / naming.INDEX_DIR / naming.KEY_INDEX_DIR)
    store = open_store(key_index_entries_per_file=16)
    assert [m.body for m in store.get_by_key("T", "k39")] == [b"m39"]


def test_store_retention_deletes_index_files_with_the_segments(open_store: OpenStore,
                                                              data_dir: Path) -> None:
    # SPEC P4: index files go with the CommitLog segments they point into
    store = open_store(key_index_entries_per_file=16)
    store.create_topic("T", 1)
    old = store.put_batch([PutRequest("T", b"a" * 1000, keys=f"old{i}") for i in range(130)])
    store.put_batch([PutRequest("T", b"b" * 1000, keys=f"new{i}") for i in range(70)])
    before = len(_files(data_dir / naming.INDEX_DIR))
    assert store.delete_expired_segments(now_ms=int(time.time() * 1000) + FUTURE_MS) >= 2
    low = int(store.stats()["commitlog_min_offset"])
    kept = _files(data_dir / naming.INDEX_DIR)
    assert len(kept) < before
    assert min(int(f.name) for f in kept) <= low  # the file holding the oldest kept record
    assert store.get_by_key("T", "old0") == []
    assert [m.body[:1] for m in store.get_by_key("T", "new69")] == [b"b"]
    assert all(r.commitlog_offset < low for r in old[:60])


def test_every_acknowledged_message_is_found_by_key_and_msg_id_after_kill_9(
        open_store: OpenStore, data_dir: Path) -> None:
    # crash safety, SPEC P2, P3: kill -9 of a writer at random instants, then every
    # acknowledged message is found by its key and by its msgId
    rng = random.Random(14)
    acked: list[int] = []
    for round_no in range(3):
        acked += [offset for offset, _ in _run_writer(data_dir, 100 + round_no,
                                                      rng.randint(5, 300))]
        store = open_store()
        for offset in acked:
            record = store.get_by_commitlog_offset(offset)
            found = store.get_by_msg_id(record.msg_id)
            assert offset in [m.commitlog_offset for m in found]
            (key,) = record.keys
            assert offset in [m.commitlog_offset
                              for m in store.get_by_key(record.topic, key)]
        store.close()


def test_a_file_is_never_longer_than_what_it_holds(tmp_path: Path) -> None:
    # no sparse hole in an index file counts against a disk quota
    # (CLEPSYDRA_STORE_DISK_CAPACITY_BYTES sums file sizes)
    index = KeyIndex(tmp_path, entries_per_file=4_000)
    _fill(index, 0, 10)
    index.fsync()
    (path,) = _files(tmp_path)
    assert os.path.getsize(path) == HEADER_SIZE + 10 * ENTRY.size
    index.close()
    assert os.path.getsize(path) == HEADER_SIZE + 10 * ENTRY.size + 1_000 * 4
    reopened = KeyIndex(tmp_path, entries_per_file=4_000)
    _fill(reopened, 5_000, 1)
    reopened.fsync()
    assert os.path.getsize(path) == HEADER_SIZE + 11 * ENTRY.size  # slots in memory again
    assert reopened.lookup("k0") == [0] and reopened.lookup("k5000") == [5_000]
    reopened.close()
    assert os.path.getsize(path) == HEADER_SIZE + 11 * ENTRY.size + 1_000 * 4


def test_index_files_below_the_commitlog_at_start_are_deleted(open_store: OpenStore,
                                                             data_dir: Path) -> None:
    # SPEC P4: segments gone while their index files stayed (a crash between the
    # two deletions) -> the files go at start
    store = open_store(key_index_entries_per_file=16)
    store.create_topic("T", 1)
    store.put_batch([PutRequest("T", b"a" * 1000, keys=f"k{i}") for i in range(200)])
    store.close()
    segments = sorted((data_dir / naming.COMMITLOG_DIR).iterdir())
    for segment in segments[:2]:
        segment.unlink()
    before = _files(data_dir / naming.INDEX_DIR)
    store = open_store(key_index_entries_per_file=16)
    low = int(store.stats()["commitlog_min_offset"])
    assert low == int(segments[2].name)
    after = _files(data_dir / naming.INDEX_DIR)
    assert len(after) < len(before)
    assert int(after[0].name) <= low < int(after[1].name)
    assert store.get_by_key("T", "k0") == []
    assert [m.body[:1] for m in store.get_by_key("T", "k199")] == [b"a"]


def test_a_file_of_another_format_version_is_rebuilt(tmp_path: Path) -> None:
    # the format is versioned; a file this store cannot read is not trusted
    index = KeyIndex(tmp_path, entries_per_file=16)
    _fill(index, 0, 20)
    index.close()
    first, second = _files(tmp_path)
    raw = bytearray(second.read_bytes())
    raw[4:6] = (VERSION + 1).to_bytes(2, "big")
    second.write_bytes(bytes(raw))
    index = KeyIndex(tmp_path, entries_per_file=16)
    assert index.rebuild_from == 1_600 and _files(tmp_path) == [first]
    index.close()
