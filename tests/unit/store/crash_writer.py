"""Writer process for the kill -9 test: appends with sync flush and prints one line
``<commitlog_offset> <sha256 of body>`` per acknowledged message (SPEC P2), until killed.

    python crash_writer.py DATA_DIR SEED
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest, PutStatus


def main() -> None:
    data_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    store = MessageStore(EngineConfig(data_dir=data_dir, segment_size_bytes=64 * 1024,
                                      cq_entries_per_file=64, flush="sync",
                                      flush_interval_ms=20))
    store.create_topic("T", 3)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    n = 0
    while True:
        batch = []
        for _ in range(rng.randint(1, 6)):
            n += 1
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
