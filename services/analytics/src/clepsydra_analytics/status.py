"""Export status: for each exported topic, how far the files reach and how far behind the
store's queues they are (the lag, in messages)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from clepsydra_analytics.settings import TopicPatterns
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core.wire.analytics import TopicStatus

if TYPE_CHECKING:  # pyarrow: the API imports it only once a status is asked (app.py)
    from clepsydra_analytics.export_files import ExportFiles


def export_status(files: ExportFiles, reader: StoreReader,
                  patterns: TopicPatterns) -> list[TopicStatus]:
    ranges = files.ranges()
    ends: dict[tuple[str, int, int], int] = {}
    rows: dict[str, int] = {}
    for r in ranges:
        key = (r.topic, r.queue_id, r.shard)
        ends[key] = max(ends.get(key, 0), r.end_offset)
        rows[r.topic] = rows.get(r.topic, 0) + (r.end_offset - r.start_offset)
    out = []
    for info in reader.every_shard_topics():  # every store shard's queues (DEC-store-shards)
        if not patterns.matches(info.name):
            continue
        store_end = sum(q.max_offset for q in info.queues)
        exported = sum(min(max(ends.get((info.name, q.queue_id, q.shard), q.min_offset),
                               q.min_offset), q.max_offset) for q in info.queues)
        out.append(TopicStatus.of(info.name, len(info.queues), rows.get(info.name, 0),
                                  store_end, exported))
    return sorted(out, key=lambda s: s.topic)


def wait_caught_up(files: ExportFiles, reader: StoreReader, patterns: TopicPatterns,
                   timeout_s: float, poll_s: float = 0.5) -> bool:
    """Until the files reach every queue's end as it was when called (another process
    exports); False on timeout."""
    targets = {(t.name, q.queue_id, q.shard): q.max_offset for t in reader.every_shard_topics()
               if patterns.matches(t.name) for q in t.queues}
    deadline = time.monotonic() + timeout_s
    while True:
        ends = files.shard_ends()
        if all(ends.get(k, 0) >= v for k, v in targets.items() if v > 0):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
