"""The writer: the one place records are appended to the CommitLog (SPEC P2, S2), under the
store's writer lock, with their dispatch into the indexes in the same hold (so an index never
names a record a reader cannot find, and a hand-over's mark is exactly as durable as its copy).

A batch of :class:`~clepsydra_store.engine.write.codec.Prepared` records is placed (offsets,
the store timestamp, each entry's code completed by ``marks.entry_code``, headers packed by
``records.pack_header``), written with one write per segment, then dispatched. With sync flush
the caller is acknowledged only once the batch is fsync'd (:meth:`Writer.acknowledge`, the
group commit of ``log/flush.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence

from clepsydra_core.msgid import pack_host
from clepsydra_core.records import MIN_END_MARKER, offset_msg_id, pack_header
from clepsydra_store.engine.index.consume_queue import ENTRY, ConsumeQueue
from clepsydra_store.engine.index.dispatcher import Dispatcher
from clepsydra_store.engine.index.marks import Mark, entry_code
from clepsydra_store.engine.log.commitlog import AppendBatch, CommitLog
from clepsydra_store.engine.log.flush import GroupCommit
from clepsydra_store.engine.types import PutResult, PutStatus
from clepsydra_store.engine.write.codec import Prepared

logger = logging.getLogger(__name__)

_Placed = tuple[list[tuple[ConsumeQueue, int, bytes]], list[int], list[int],
                list[tuple[Mark, int, int]]]
"""(packed ConsumeQueue entries per queue, key hashes, their CommitLog offsets,
(mark, own queue offset, own entry code) of the records with a mark) of a placed batch."""


class Writer:
    """Appends placed records; ``lock`` is the store's writer lock (appends, dispatch,
    hand-overs, cancels, retention's segment deletion)."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, store_host: str, *,
                 sync_flush: bool, group_commit: GroupCommit, counters: Counter[str],
                 shard_id: int = 0) -> None:
        self.lock = threading.Lock()
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._store_host = pack_host(store_host, shard_id)  # DEC-shard-in-msgid
        self._msg_id_prefix = self._store_host.hex().upper()
        self._sync = sync_flush
        self._group_commit = group_commit
        self._counters = counters

    def store(self, items: Sequence[Prepared]) -> list[PutResult]:
        """Append ``items`` (taking the lock) and acknowledge them (P2)."""
        results: list[PutResult] = []
        with self.lock:
            _, end = self._append_into(items, results)
        return self.acknowledge(results, end)

    # ---- append (caller holds the writer lock) ---------------------------------------------
    def append(self, items: Sequence[Prepared]) -> tuple[list[PutResult], int]:
        """Place, write (one write per segment) and dispatch ``items``; (results, end)."""
        results: list[PutResult] = []
        _, end = self._append_into(items, results)
        return results, end

    def append_copies(self, items: Sequence[Prepared]) -> tuple[int, int]:
        """:meth:`append` of hand-over copies, whose callers read no ``PutResult`` (their msgId
        is ``Prepared.uniq_key``, their store timestamp the batch's): no offsetMsgId and no
        result built per message; (store timestamp, end)."""
        return self._append_into(items, None)

    def _append_into(self, items: Sequence[Prepared], results: list[PutResult] | None
                     ) -> tuple[int, int]:
        batch = self._commitlog.begin()
        now = time.time_ns() // 1_000_000
        try:
            placed = self._place(batch, items, now, results)
            end = batch.commit()
        except BaseException:
            batch.abort()
            raise
        entries, key_hashes, key_offsets, marks = placed
        self._dispatcher.dispatch(entries, key_hashes, key_offsets, marks)
        counters = self._counters
        counters["puts_total"] += len(items)
        counters["put_bytes_total"] += end - batch.start
        return now, end

    def _place(self, batch: AppendBatch, items: Sequence[Prepared], now: int,
               results: list[PutResult] | None) -> _Placed:
        """Place records (rolling to a new segment where one does not fit), their headers
        packed now that offsets and the store timestamp are known; each one's ``PutResult``
        added to ``results`` unless it is None."""
        pack = pack_header
        msg_id = offset_msg_id
        entry_pack = ENTRY.pack
        host = self._store_host
        prefix = self._msg_id_prefix
        queue = self._dispatcher.queue
        queues: dict[tuple[str, int], tuple[ConsumeQueue, list[bytes]]] = {}
        """(topic, queue id) -> (its ConsumeQueue, the packed entries of this batch)."""
        hashes: list[int] = []
        offsets: list[int] = []
        marks: list[tuple[Mark, int, int]] = []
        result = None if results is None else results.append
        new = tuple.__new__  # PutResult(...) without its Python-level __new__
        ok = PutStatus.OK
        parts = batch.parts  # cleared in place by a roll, never replaced
        append = parts.append
        position, segment_end = batch.position, batch.segment_end
        for (size, topic, queue_id, code, delay_ms, crc, flag, sys_flag, born_timestamp,
             born_host, reconsume_times, body_len, tail, key_hashes, mark, _, uniq) in items:
            if position + size + MIN_END_MARKER > segment_end:
                batch.position = position
                position = batch.place(size)
                segment_end = batch.segment_end
            pending = queues.get((topic, queue_id))
            if pending is None:
                pending = queues[topic, queue_id] = (queue(topic, queue_id), [])
            entries = pending[1]
            queue_offset = pending[0].next_offset + len(entries)
            deliver_at = None
            if delay_ms:  # a deliver time (S2, T1)
                code = deliver_at = entry_code(code, delay_ms, now)
            entries.append(entry_pack(position, size, code))
            append(pack(size, crc, queue_id, flag, queue_offset, position, sys_flag,
                        born_timestamp, born_host, now, host, reconsume_times, body_len))
            append(tail)
            if result is not None:
                offset_id = msg_id(prefix, position)
                result(new(PutResult, (ok, uniq or offset_id, topic, queue_id, queue_offset,
                                       position, now, size, offset_id, deliver_at)))
            hashes += key_hashes  # in place: one offset per key hash (half the bytecodes
            offsets += (position,) * len(key_hashes)  # of a loop, DEC-one-routing-decision)
            if mark is not None:
                marks.append((mark, queue_offset, code))
            position += size
        batch.position = position
        return ([(cq, cq.next_offset, b"".join(packed)) for cq, packed in queues.values()],
                hashes, offsets, marks)

    def acknowledge(self, results: list[PutResult], end: int | None) -> list[PutResult]:
        """P2: with sync flush, wait (group commit) until ``end`` is fsync'd; the results as
        FLUSH_TIMEOUT when that does not happen in time."""
        if end is None or not self._sync or self._group_commit.wait(end):
            return results
        logger.warning("sync flush timed out end_offset=%d flushed_offset=%d", end,
                       self._commitlog.flushed_offset)
        return [r._replace(status=PutStatus.FLUSH_TIMEOUT) for r in results]
