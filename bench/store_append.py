"""In-process append benchmark (not a test): 1 KiB messages, batches of 100, async flush.

    .venv/bin/python -m bench.store_append [messages] [--profile]

On a shared machine compare the CPU figures (msgs per CPU second, us CPU/msg), and compare
against the raw baseline of the same run.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import PutRequest


def raw_baseline(total: int, directory: Path) -> float:
    """msgs/s of the FACTS baseline: pack a header, crc the body, one os.write per 100."""
    import os
    import struct
    import zlib
    header = struct.Struct(">iiIiiqqiq8sq8sii")
    body = b"x" * 1024
    fd = os.open(directory / "raw", os.O_WRONLY | os.O_CREAT)
    started = time.perf_counter()
    pos = 0
    for _ in range(total // 100):
        parts = []
        for i in range(100):
            parts.append(header.pack(1100, 1, zlib.crc32(body), 0, 0, i, pos, 0, 0, b"\0" * 8,
                                     0, b"\0" * 8, 0, 1024))
            parts.append(body)
            pos += 1100
        os.write(fd, b"".join(parts))
    os.close(fd)
    return total / (time.perf_counter() - started)


def main() -> None:
    total = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 300_000
    profile = "--profile" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        store = MessageStore(EngineConfig(data_dir=Path(tmp), segment_size_bytes=256 << 20))
        store.create_topic("Bench", 4)
        body = b"x" * 1024
        batches = [[PutRequest("Bench", body, tags="t", properties={"UNIQ_KEY": f"u{b}-{i}"})
                    for i in range(100)] for b in range(total // 100)]
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        cpu_started = time.process_time()
        if profiler:
            profiler.enable()
        for batch in batches:
            store.put_batch(batch)
        if profiler:
            profiler.disable()
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        store.close()
        raw = raw_baseline(total, Path(tmp))
    print(f"{total} msgs in {elapsed:.2f}s = {total / elapsed:,.0f} msgs/s wall, "
          f"{total / cpu:,.0f} msgs/s per CPU second ({cpu * 1e6 / total:.2f} us CPU/msg; "
          f"raw encode+write baseline in the same run: {raw:,.0f} msgs/s)")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
