"""Writer process for the kill -9 tests: appends with sync flush and prints one line
``<commitlog_offset> <sha256 of body>`` per acknowledged message (SPEC P2), until killed.

    python crash_writer.py DATA_DIR SEED [timers SPILL_PAIRS]

``timers``: every message a timer (``deliver_at``), each batch's due in as many distinct seconds
one to two hours ahead, with the timer index's spill bound lowered to ``SPILL_PAIRS`` so that
kills fall before, during and after spills (DEC-timer-pair-journal).
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path

from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.index import timer_index
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest, PutStatus


def main() -> None:
    data_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
    timers = len(sys.argv) > 3 and sys.argv[3] == "timers"
    if timers:
        timer_index.SPILL_PAIRS = int(sys.argv[4])
    rng = random.Random(seed)
    store = MessageStore(EngineConfig(data_dir=data_dir, segment_size_bytes=64 * 1024,
                                      cq_entries_per_file=64, flush="sync",
                                      flush_interval_ms=20))
    store.create_topic("T", 3)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    n = 0
    ahead = int(time.time() * 1000) + 3_600_000
    while True:
        batch = []
        for _ in range(rng.randint(1, 6) if not timers else rng.randint(10, 60)):
            n += 1
            if timers:
                body = rng.randbytes(rng.randint(16, 64))
                at = ahead + 1000 * rng.randrange(3_600) + rng.randrange(1000)
                batch.append(PutRequest("T", body, deliver_at=at))
                continue
            body = rng.randbytes(rng.randint(0, 3000))
            batch.append(PutRequest("T", body, keys=f"s{seed}-{n}",
                                    delay_level=1 if n % 7 == 0 else 0))
        results = store.put_batch(batch)
        lines = [f"{r.commitlog_offset} {hashlib.sha256(b.body).hexdigest()}\n"
                 for r, b in zip(results, batch, strict=True) if r.status is PutStatus.OK]
        out.write("".join(lines))
        out.flush()


if __name__ == "__main__":
    main()
