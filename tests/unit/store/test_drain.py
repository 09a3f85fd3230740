"""Draining a due backlog (DEC-drain-splice-shapes): timers take the levels' splice path, a backlog
of due timers is not read again on every hand-over, the sentinels of the entries handed over are
looked up one by one, and splice templates are parsed once per shape of properties block. Every
speed-up keeps D4 (the same bytes as the rebuild) and D9 (once)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.properties import encode_properties
from clepsydra_store.engine.index.consume_queue import ENTRY
from clepsydra_store.engine.index.dispatcher import TIMER_LEVEL
from clepsydra_store.engine.index.entry_states import CANCELLED, DELIVERED, EntryStates
from clepsydra_store.engine.index.timer_index import SLOT_MS, TimerIndex
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.schedule.drain import Drain
from clepsydra_store.engine.schedule.splice_shapes import SpliceShapes
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.engine.write.codec import splice_properties, splice_template
from tests.unit.store.conftest import OpenStore

TOPIC = "orders"
BASE = 1_700_000_000_000
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _timers(store: MessageStore, deliver_at: int) -> list[PutRequest]:
    """Timers of every shape the hand-over meets: plain, tags, keys, traceparent, producer
    properties, a given UNIQ_KEY, binary and empty bodies."""
    puts = [
        PutRequest(TOPIC, b"plain", deliver_at=deliver_at),
        PutRequest(TOPIC, b"", deliver_at=deliver_at, queue_id=1),
        PutRequest(TOPIC, bytes(range(256)), deliver_at=deliver_at, flag=7, born_timestamp=5),
        PutRequest(TOPIC, b"keys", tags="tg", keys="k1 k2", deliver_at=deliver_at,
                   properties={P.UNIQ_KEY: "u-1", P.TRACEPARENT: TP, "app": "x"}),
        PutRequest(TOPIC, "ünï".encode(), delay_ms=0, reconsume_times=3,
                   properties={"ключ": "значение 🎉", "z": "", "a": "1" * 300}),
    ]
    puts += [PutRequest(TOPIC, f"sdk{i}".encode(), tags="tg", keys=f"order-{i * 7 % 13}",
                        deliver_at=deliver_at, properties={
                            P.UNIQ_KEY: f"u-{i:04d}-ü",
                            P.TRACEPARENT: f"00-{i:032x}-b7ad6b7169203331-01"})
             for i in range(6)]
    return puts


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every properties block the splice shapes parse whole (``splice_template``), in order."""
    from clepsydra_store.engine.schedule import splice_shapes

    blocks: list[bytes] = []
    parse = splice_shapes.splice_template

    def counting(block: bytes) -> Any:
        blocks.append(block)
        return parse(block)

    monkeypatch.setattr(splice_shapes, "splice_template", counting)
    return blocks


def test_a_timer_splice_builds_exactly_what_the_rebuild_builds(open_store: OpenStore) -> None:
    # SPEC D4, T2: a timer's hand-over copy spliced from its stored bytes equals,
    # field by field and byte for byte, the decode + re-encode rebuild it used to take
    store = open_store()
    store.create_topic(TOPIC, 2)
    puts = _timers(store, BASE)
    store.put_batch(puts)
    scheduler = store._drain
    cq = store._dispatcher.timer_log()
    raw = cq.read_raw(cq.min_offset, cq.max_offset - cq.min_offset)
    compared = 0
    for q, (offset, size, _code) in enumerate(ENTRY.iter_unpack(raw)):
        segment = store._commitlog.segment_for(offset)
        assert segment is not None
        buf = segment.read(offset - segment.start, size)
        deliver_ts = BASE + 17 + q
        spliced = scheduler._splice(TIMER_LEVEL, q, buf, 0, size, offset, deliver_ts)
        rebuilt, ok, traceparent = scheduler._rebuild(TIMER_LEVEL, q, offset, size, deliver_ts)
        assert spliced is not None and ok, q
        assert spliced[0] == rebuilt, q
        assert spliced[1] == traceparent
        assert spliced[0].tail == rebuilt.tail
        compared += 1
    assert compared == len(puts)


def test_due_timers_are_spliced_and_a_park_is_still_rebuilt(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # the timer hand-over takes the splice path (it rebuilt every timer before);
    # D7: a timer whose real topic is gone is parked through the rebuild, as before
    store = open_store()
    store.create_topic(TOPIC, 2)
    store.create_topic("gone", 1)
    puts = _timers(store, BASE)
    store.put_batch(puts)
    store.put(PutRequest("gone", b"lost", deliver_at=BASE))
    store.delete_topic("gone")
    rebuilt: list[int] = []
    rebuild = Drain._rebuild

    def counting(self: Drain, *args: Any) -> Any:
        rebuilt.append(args[1])
        return rebuild(self, *args)

    monkeypatch.setattr(Drain, "_rebuild", counting)
    later = time.time_ns() // 1_000_000 + 60_000  # (times in the past deliver at store time)
    result = store._timers.handover(later, 1_000)
    assert (result.delivered, result.parked) == (len(puts), 1)
    assert rebuilt == [len(puts)]  # only the park
    bodies = sorted(m.body for q in (0, 1) for m in store.read_queue(TOPIC, q, 0, 100).messages)
    assert bodies == sorted(p.body for p in puts)
    (parked,) = store.read_queue(naming.SCHEDULE_ERROR_TOPIC, 0, 0, 10).messages
    assert parked.body == b"lost" and parked.properties[P.SCHEDULE_OFFSET] == f"0:{len(puts)}"
    assert store._timers.handover(later + 60_000, 1_000).delivered == 0  # D9: once


def test_a_due_backlog_is_not_read_again_on_every_hand_over(tmp_path: Path) -> None:
    # 5,000 timers due in one second, handed over 100 at a time; each call asks for
    # the codes of the pairs it takes and the next one, not of the whole due backlog (which
    # made a drain cost grow with the backlog: 5,000 + 4,900 + ... codes)
    index = TimerIndex(tmp_path)
    n, batch = 5_000, 100
    live = {q: BASE + q % SLOT_MS for q in range(n)}
    for q, ts in live.items():
        index.add(q, ts)
    asked = 0

    def codes(qs: list[int]) -> list[int | None]:
        nonlocal asked
        asked += len(qs)
        return [live.get(q) for q in qs]

    handed: list[int] = []
    while True:
        due = index.due(BASE + SLOT_MS, batch, codes)
        if not due:
            break
        assert len(due) <= batch
        handed += [q for q, _ in due]
        for q, _ in due:
            live[q] = DELIVERED
        index.confirm()
    assert sorted(handed) == list(range(n))  # each once, none left
    assert [live[q] for q in handed[:3]] == [DELIVERED] * 3
    assert asked <= 2 * n + (n // batch + 2) * 64


def test_pairs_a_confirmed_hand_over_took_are_never_asked_for_again(tmp_path: Path) -> None:
    # SPEC T2: the pairs a hand-over took are stale once it is confirmed
    # (appended); the next call skips them without asking for their codes (it asked for them
    # all once more: ~9 % of a timer drain). Unconfirmed, they are asked again (never lost).
    index = TimerIndex(tmp_path)
    n, batch = 1_000, 100
    live = {q: BASE + q % 7 for q in range(n)}  # one slot; stale pairs mixed in
    for q, ts in live.items():
        index.add(q, ts)
    for q in range(0, n, 9):
        live[q] = CANCELLED
    asked: list[int] = []

    def codes(qs: list[int]) -> list[int | None]:
        asked.extend(qs)
        return [live.get(q) for q in qs]

    first = index.due(BASE + SLOT_MS, batch, codes)
    assert index.due(BASE + SLOT_MS, batch, codes) == first  # not confirmed: asked again
    handed_over: set[int] = set()
    while first:
        for q, _ in first:
            live[q] = DELIVERED
        handed_over.update(q for q, _ in first)
        index.confirm()
        asked.clear()
        first = index.due(BASE + SLOT_MS, batch, codes)
        assert not handed_over.intersection(asked)
    assert len(handed_over) == n - len(range(0, n, 9))


def test_overrides_are_the_sentinels_of_the_entries_asked(tmp_path: Path) -> None:
    # the read order kept (sentinels before entries), without copying them all
    from clepsydra_store.engine.index.consume_queue import ConsumeQueue

    cq = ConsumeQueue(tmp_path / "cq", naming.TIMER_TOPIC, 0, 64)
    other = ConsumeQueue(tmp_path / "other", naming.TIMER_TOPIC, 1, 64)
    states = EntryStates()
    assert states.overrides(cq, [0, 1]) == {}
    states.set(cq, 1, DELIVERED)
    states.set(other, 2, CANCELLED)
    taken = states.take()  # being written by a flush
    states.set(cq, 3, CANCELLED)
    assert states.overrides(cq, [0, 1, 2, 3]) == {1: DELIVERED, 3: CANCELLED}
    full = states.of_queue(cq)
    assert states.overrides(cq, list(range(5))) == {q: full[q] for q in full if q < 5}
    states.apply(taken)
    assert states.overrides(cq, [1, 3]) == {3: CANCELLED}
    cq.close()
    other.close()


def _spliced_and_rebuilt(store: MessageStore, count: int,
                         now: int) -> list[tuple[Any, Any]]:
    """Level 1's first ``count`` entries, each (its splice, its rebuild) at ``now``: what the
    hand-over copies, by the shapes' path and by the whole parse (D4)."""
    scheduler = store._drain
    out = []
    raw = store._handover.queue(1).read_raw(0, count)
    for q, (offset, size, _code) in enumerate(ENTRY.iter_unpack(raw)):
        segment = store._commitlog.segment_for(offset)
        assert segment is not None
        buf = segment.read(offset - segment.start, size)
        out.append((scheduler._splice(1, q, buf, 0, size, offset, now),
                    scheduler._rebuild(1, q, offset, size, now)))
    return out


_TRAP = "\x00\x08UNIQ_KEY\x00\x00\x00\x02ab"
"""A value holding the bytes of a UNIQ_KEY field: the first match is not a field."""
_NAMES = st.sampled_from([P.DELAY, P.DELIVER_AT, P.DELAY_MS, P.SCHEDULE_OFFSET, P.DELIVER_TS,
                          P.REAL_TOPIC, P.REAL_QID, P.TAGS, P.KEYS, P.UNIQ_KEY, P.TRACEPARENT,
                          "app", "UNIQ_KEY2", "x"])
_VALUES = st.text(st.characters(exclude_categories=("Cs",)), max_size=10) | st.just(_TRAP)


_TRACES = st.none() | _VALUES | st.from_regex(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]",
                                                fullmatch=True)
_DELIVER_ATS = st.none() | _VALUES | st.integers(BASE, BASE + 10 ** 9).map(str)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, _VALUES, max_size=7),
       st.lists(_VALUES | st.text("0123456789ABCDEF", min_size=32, max_size=32), min_size=1,
                max_size=6),
       st.lists(_TRACES, min_size=1, max_size=4),
       st.lists(_DELIVER_ATS, min_size=1, max_size=4))
def test_fields_by_shape_are_the_codec_fields(props: dict[str, str], uniqs: list[str],
                                              traces: list[str | None],
                                              deliver_ats: list[str | None]) -> None:
    # SPEC D4: a block of a learned shape gets its D4 fields straight from the
    # shape's pieces with its own UNIQ_KEY and TRACEPARENT values put between them and its
    # own DELIVER_AT dropped (no template built and joined per block): exactly the bytes of
    # codec.splice_properties over codec.splice_template's template, with the same values;
    # blocks the shapes cannot take are parsed whole or left to the rebuild, as before
    shapes = SpliceShapes()
    for i, uniq in enumerate(uniqs * 3):  # a shape is learned at its 2nd block, used from the 3rd
        own = {P.UNIQ_KEY: uniq}
        trace = traces[i % len(traces)]
        if trace is not None:
            own[P.TRACEPARENT] = trace
        deliver_at = deliver_ats[i % len(deliver_ats)]
        if deliver_at is not None:
            own[P.DELIVER_AT] = deliver_at
        block = encode_properties({**props, **own})
        level, queue_offset, deliver_ts = 1 + i % 3, 10 ** i, BASE + i
        expected = splice_template(block)
        found = shapes.fields(block, level, queue_offset, deliver_ts)
        if expected is None or not expected[4].get(P.UNIQ_KEY):
            assert found is None
            continue
        if found is None:
            # a value holding the bytes of the UNIQ_KEY field's name ahead of the field (a
            # DELAY of "UNIQ_KEY": its length's last bytes and the text) hides the field from
            # the shapes' look-up: the block goes to the rebuild, which parses it whole
            assert block.find(P.name_field(P.UNIQ_KEY)) < block.rfind(P.name_field(P.UNIQ_KEY))
            continue
        fields, values, got_uniq, got_trace = found
        assert got_uniq == uniq
        assert got_trace == expected[4].get(P.TRACEPARENT)
        assert b"".join(fields) == b"".join(
            splice_properties(expected, level, queue_offset, deliver_ts))
        holes = {P.UNIQ_KEY: got_uniq} if got_trace is None else {
            P.UNIQ_KEY: got_uniq, P.TRACEPARENT: got_trace}
        assert {**values, **holes} == expected[4]


def test_blocks_that_differ_in_their_traceparent_share_a_shape(
        open_store: OpenStore, parsed: list[bytes]) -> None:
    # the SDK gives every message its own traceparent (its send span),
    # so blocks differed in two values and every one was parsed whole; the traceparent is a
    # hole of the shape like UNIQ_KEY: two parses and a check per shape, the copies the
    # rebuild's byte for byte (D4), each with its own traceparent for its deliver span (O1)
    store = open_store(levels="1s 2s")
    store.create_topic(TOPIC, 1)
    traces = [f"00-{i:032x}-{i * 7:016x}-01" for i in range(200)]
    results = store.put_batch([PutRequest(TOPIC, b"%d" % i, tags="t", delay_level=1,
                                          properties={P.TRACEPARENT: traces[i]})
                               for i in range(200)])
    now = results[-1].store_timestamp + 1_000
    for q, (spliced, rebuilt) in enumerate(_spliced_and_rebuilt(store, 200, now)):
        assert spliced is not None and spliced == (rebuilt[0], rebuilt[2])
        assert spliced[1] == traces[q]
    assert len(parsed) == 3
    result = store.handover(1, 0, 1_000, now_ms=now)
    assert result.delivered == 200 and len(parsed) == 3
    assert [m[2] for m in result.delivered_messages] == traces
    messages = store.read_queue(TOPIC, 0, 0, 1_000).messages
    assert [m.properties[P.TRACEPARENT] for m in messages] == traces


def test_timers_that_differ_in_their_deliver_at_share_a_shape(
        open_store: OpenStore, parsed: list[bytes]) -> None:
    # each parked timer keeps its own DELIVER_AT in its properties block,
    # so two timers falling due rarely shared a shape and most were parsed whole; DELIVER_AT
    # is a hole of the shape like UNIQ_KEY (D4 drops it): two parses and a check per shape,
    # the copies the rebuild's byte for byte (D4), each handed over once (D9)
    store = open_store()
    store.create_topic(TOPIC, 1)
    due = time.time_ns() // 1_000_000 + 3_600_000
    store.put_batch([PutRequest(TOPIC, b"%d" % i, tags="t", deliver_at=due + 7 * i)
                     for i in range(200)])
    scheduler = store._drain
    cq = store._dispatcher.timer_log()
    raw = cq.read_raw(cq.min_offset, cq.max_offset - cq.min_offset)
    for q, (offset, size, _code) in enumerate(ENTRY.iter_unpack(raw)):
        segment = store._commitlog.segment_for(offset)
        assert segment is not None
        buf = segment.read(offset - segment.start, size)
        assert str(due + 7 * q).encode() in buf  # each block holds its own DELIVER_AT
        spliced = scheduler._splice(TIMER_LEVEL, q, buf, 0, size, offset, due + 7 * q)
        rebuilt = scheduler._rebuild(TIMER_LEVEL, q, offset, size, due + 7 * q)
        assert spliced is not None and spliced[0] == rebuilt[0], q
    assert len(parsed) == 3
    result = store._timers.handover(due + 7 * 200, 1_000)
    assert result.delivered == 200 and len(parsed) == 3
    messages = store.read_queue(TOPIC, 0, 0, 1_000).messages
    assert [m.body for m in messages] == [b"%d" % i for i in range(200)]
    assert all(P.DELIVER_AT not in m.properties for m in messages)
    assert store._timers.handover(due + 7 * 400, 1_000).delivered == 0


def test_blocks_of_one_shape_are_parsed_once(open_store: OpenStore,
                                            parsed: list[bytes]) -> None:
    # every parked message has its own UNIQ_KEY, so its properties block is new; the
    # codec parses two blocks per shape (plus one check), not one per message, and the copies
    # are the rebuild's, byte for byte (D4)
    store = open_store(levels="1s 2s")
    store.create_topic(TOPIC, 1)
    results = store.put_batch([PutRequest(TOPIC, b"%d" % i, tags="t", delay_level=1)
                               for i in range(200)])
    now = results[-1].store_timestamp + 1_000
    for spliced, rebuilt in _spliced_and_rebuilt(store, 200, now):
        assert spliced is not None and spliced[0] == rebuilt[0]
    assert len(parsed) == 3
    assert store.handover(1, 0, 1_000, now_ms=now).delivered == 200
    assert len(parsed) == 3
    bodies = [m.body for m in store.read_queue(TOPIC, 0, 0, 1_000).messages]
    assert bodies == [b"%d" % i for i in range(200)]


def test_runs_of_records_are_read_into_one_buffer(open_store: OpenStore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # each run of due records was read into a new bytes object of up to
    # 8 MiB, which the allocator took from the kernel and gave back every time (~0.8 page
    # faults a message); runs are now read into the hand-over's one buffer. A shorter run
    # after a longer one leaves older bytes past its end, never read as its records: every
    # copy is still spliced (no rebuild) and is the message handed over (D4), once (D9)
    from clepsydra_store.engine.log.segment import Segment

    store = open_store(levels="1s 2s")
    store.create_topic(TOPIC, 1)
    big = [b"B" * 5_000 + b"%d" % i for i in range(20)]
    small = [b"s%d" % i for i in range(20)]
    store.put_batch([PutRequest(TOPIC, body, delay_level=1) for body in big])
    results = store.put_batch([PutRequest(TOPIC, body, delay_level=1) for body in small])
    now = results[-1].store_timestamp + 1_000
    reads: list[int] = []
    rebuilt: list[int] = []
    read, rebuild = Segment.read, Drain._rebuild

    def counting_read(self: Segment, file_pos: int, size: int) -> bytes:
        if self.path.parent.name == naming.COMMITLOG_DIR:  # (not a ConsumeQueue's file)
            reads.append(size)
        return read(self, file_pos, size)

    def counting_rebuild(self: Drain, *args: Any) -> Any:
        rebuilt.append(args[1])
        return rebuild(self, *args)

    monkeypatch.setattr(Segment, "read", counting_read)
    monkeypatch.setattr(Drain, "_rebuild", counting_rebuild)
    assert store.handover(1, 0, 20, now_ms=now).delivered == 20  # the long run
    assert store.handover(1, 20, 20, now_ms=now).delivered == 20  # a shorter one after it
    assert store.handover(1, 0, 40, now_ms=now).delivered == 0  # D9: once
    assert reads == [] and rebuilt == []
    copies = store.read_queue(TOPIC, 0, 0, 100).messages
    assert [m.body for m in copies] == big + small
    assert [m.properties[P.SCHEDULE_OFFSET] for m in copies] == [f"1:{q}" for q in range(40)]
    assert len(store._drain._buffer) == 0  # nothing due: given back (memory at rest)


def test_a_flush_writes_sentinels_a_run_at_a_time(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC D9, T2: sentinels written only at a flush, as before; the sentinels of a drain are
    # consecutive entries; each run is read and written once, across the queue's files, and
    # only the codes change
    from clepsydra_store.engine.index.consume_queue import ConsumeQueue

    cq = ConsumeQueue(tmp_path / "cq", naming.TIMER_TOPIC, 0, 64)
    n = 200
    cq.write(0, b"".join(ENTRY.pack(1_000 + 7 * q, 100 + q, BASE + q) for q in range(n)))
    states = EntryStates()
    runs = [range(3, 4), range(60, 140), range(150, 152), range(199, 200)]
    changed = {q: (DELIVERED if q % 3 else CANCELLED) for run in runs for q in run}
    for q, code in changed.items():
        states.set(cq, q, code)
    writes: list[tuple[int, int]] = []
    write = ConsumeQueue.write

    def counting(self: ConsumeQueue, queue_offset: int, packed: bytes) -> None:
        writes.append((queue_offset, len(packed) // len(ENTRY.pack(0, 0, 0))))
        write(self, queue_offset, packed)

    monkeypatch.setattr(ConsumeQueue, "write", counting)
    states.apply(states.take())
    assert writes == [(run.start, len(run)) for run in runs]
    entries = list(ENTRY.iter_unpack(cq.read_raw(0, n)))
    assert entries == [(1_000 + 7 * q, 100 + q, changed.get(q, BASE + q)) for q in range(n)]
    assert states.overrides(cq, list(range(n))) == {}
    cq.close()


def test_a_large_level_hand_over_is_done_a_lock_chunk_at_a_time(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC D9, DEC-handover-lock-chunk: one request hands over up to its max, a LOCK_CHUNK per hold
    # of the writer lock, and answers for the whole range; every entry once, in order
    from clepsydra_store.engine.schedule import handover as chunked

    monkeypatch.setattr(chunked, "LOCK_CHUNK", 7)
    store = open_store(levels="1s 2s")
    store.create_topic(TOPIC, 1)
    results = store.put_batch([PutRequest(TOPIC, b"%d" % i, delay_level=1) for i in range(30)])
    due = results[-1].store_timestamp + 1_000
    asked: list[int] = []
    plan = store._handover.plan

    def counting(level: int, from_offset: int, max_count: int, now_ms: int) -> Any:
        asked.append(max_count)
        return plan(level, from_offset, max_count, now_ms)

    monkeypatch.setattr(store._handover, "plan", counting)
    first = store.handover(1, 0, 25, now_ms=due)
    assert asked == [7, 7, 7, 4]
    assert (first.from_offset, first.next_offset, first.delivered, first.handed_over) == \
        (0, 25, 25, 24)
    assert len(first.lateness_ms) == len(first.delivered_messages) == 25 and not first.not_due
    asked.clear()
    rest = store.handover(1, 0, 100, now_ms=due)  # from behind the mark: skips, then the rest
    assert asked == [7]
    assert (rest.from_offset, rest.next_offset, rest.delivered, rest.skipped) == (25, 30, 5, 25)
    bodies = [m.body for m in store.read_queue(TOPIC, 0, 0, 100).messages]
    assert bodies == [b"%d" % i for i in range(30)]


def test_a_large_timer_hand_over_is_done_a_lock_chunk_at_a_time(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC T2, DEC-handover-lock-chunk: the same for timers: appended a LOCK_CHUNK at a time,
    # answered as one
    from clepsydra_store.engine.schedule import handover as chunked

    monkeypatch.setattr(chunked, "LOCK_CHUNK", 7)
    store = open_store()
    store.create_topic(TOPIC, 1)
    store.put_batch([PutRequest(TOPIC, b"%d" % i, delay_ms=0) for i in range(30)])
    appended: list[int] = []
    append = store._writer.append_copies

    def counting(items: Any) -> Any:
        appended.append(len(items))
        return append(items)

    monkeypatch.setattr(store._writer, "append_copies", counting)
    later = time.time_ns() // 1_000_000 + 1_000
    first = store._timers.handover(later, 25)
    assert appended == [7, 7, 7, 4]
    assert first.delivered == len(first.lateness_ms) == len(first.delivered_messages) == 25
    assert store._timers.handover(later, 25).delivered == 5
    assert store._timers.handover(later, 25).delivered == 0  # D9: once
    bodies = sorted(m.body for m in store.read_queue(TOPIC, 0, 0, 100).messages)
    assert bodies == sorted(b"%d" % i for i in range(30))


def test_a_hand_over_asks_for_no_codes_of_pairs_far_from_due(tmp_path: Path) -> None:
    # a large batch size must not make each call read the codes of the slot's pairs
    # that are not due (timers falling due a few at a time: the scheduler asks for 10,000)
    index = TimerIndex(tmp_path)
    live = {q: BASE + q for q in range(1_000)}  # one slot, a pair every millisecond
    for q, ts in live.items():
        index.add(q, ts)
    asked: list[int] = []

    def codes(qs: list[int]) -> list[int | None]:
        asked.extend(qs)
        return [live.get(q) for q in qs]

    assert index.due(BASE + 9, 10_000, codes) == [(q, BASE + q) for q in range(10)]
    assert index.next_due == BASE + 10
    assert len(asked) == 10 + 1  # the due ones, then the next (live): not 64 more


def test_a_hand_over_batch_raises_its_level_mark_once(open_store: OpenStore,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # SPEC D9: the records of one hand-over batch raise their level's handed-over
    # mark once, to the highest entry handed over (not once per record); timers' copies in
    # the same dispatch still set each entry's DELIVERED sentinel
    store = open_store(levels="1s 2s")
    store.create_topic(TOPIC, 2)
    results = store.put_batch([PutRequest(TOPIC, b"%d" % i, delay_level=1 + i % 2)
                               for i in range(50)])
    timers = store.put_batch([PutRequest(TOPIC, b"t%d" % i, deliver_at=BASE)
                              for i in range(5)])
    now = max(r.store_timestamp for r in results + timers) + 5_000
    disp = store._dispatcher
    raised: list[tuple[int, int]] = []
    raise_mark = disp.raise_mark

    def counting(level: int, queue_offset: int) -> None:
        raised.append((level, queue_offset))
        raise_mark(level, queue_offset)

    monkeypatch.setattr(disp, "raise_mark", counting)
    assert store.handover(1, 0, 100, now_ms=now).delivered == 25
    assert raised == [(1, 24)] and disp.mark(1) == 24
    raised.clear()
    assert store._timers.handover(now, 100).delivered == 5
    assert sorted(raised) == [(TIMER_LEVEL, q) for q in range(5)]
    states = disp.states.of_queue(disp.timer_log())
    assert [states.get(q) for q in range(5)] == [DELIVERED] * 5
    assert store.handover(1, 0, 100, now_ms=now).delivered == 0  # once (D9)


def test_the_deliver_ts_field_kept_between_entries_is_each_entrys_own() -> None:
    # SPEC D4: splice_properties keeps the last DELIVER_TS field it encoded for a
    # run of entries of one deliver time; an entry of another time gets its own, every time
    template = splice_template(encode_properties({P.REAL_TOPIC: TOPIC, P.UNIQ_KEY: "u"}))
    assert template is not None
    for deliver_ts in (BASE, BASE, BASE + 1, BASE, 0, 0, BASE + 10):
        block = b"".join(splice_properties(template, 1, 7, deliver_ts))
        values = splice_template(block)
        assert values is not None and values[4] == {P.REAL_TOPIC: TOPIC, P.UNIQ_KEY: "u"}
        assert block.endswith(P.DELIVER_TS.encode() + len(str(deliver_ts)).to_bytes(4, "big")
                              + str(deliver_ts).encode())
