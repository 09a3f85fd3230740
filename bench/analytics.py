"""Analytics benchmark: exporter rows/s, and the four jobs over generated rows.

    .venv/bin/python -m bench.analytics [--export-rows 200000] [--job-rows 10000000]
                                        [--only export,jobs]

- export: a store process on a free port (temporary CLEPSYDRA_HOME), ``--export-rows``
  messages (256-byte bodies) produced into 4 queues, then one in-process Exporter catching up:
  rows/s, and where the time goes (store pulls incl. JSON parsing / row conversion / Parquet
  writes). Target >= 50,000 rows/s on 2 cores.
- jobs: ``--job-rows`` export rows generated straight into Parquet (4 user topics, half of
  them delayed over the 18 levels, retry and DLQ copies with reasons), then the SparkSession
  start and each job timed on its own, and the JVM's peak resident memory (VmHWM).
  Targets: lateness <= 60 s, all four <= 180 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import requests

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportFiles, hour_of
from clepsydra_analytics.exporter import Exporter, tune_gc
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.store_reader import StoreReader
from tools.parts import store_service

REPO = Path(__file__).resolve().parents[1]

TOPICS = ("orders", "payments", "audit", "mail")
GROUPS = ("billing", "shipping")
REASONS = tuple(f"ValueError: reason {i}" for i in range(8))


class TimedReader(StoreReader):
    pull_s = 0.0

    def pull(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return super().pull(*args, **kwargs)
        finally:
            TimedReader.pull_s += time.perf_counter() - started


def bench_export(rows: int, home: Path) -> None:
    store = store_service(home / "store-home").start()
    try:
        requests.post(f"{store.url}/v1/topics", json={"name": "bench", "queues": 4},
                      timeout=10).raise_for_status()
        body = "x" * 256
        session = requests.Session()
        for start in range(0, rows, 1000):
            n = min(1000, rows - start)
            session.post(f"{store.url}/v1/topics/bench/messages/batch",
                         json={"messages": [{"body": body, "tags": "t", "keys": f"k{start + i}"}
                                            for i in range(n)]},
                         timeout=60).raise_for_status()
        settings = AnalyticsSettings.from_env({
            "CLEPSYDRA_HOME": str(home), "CLEPSYDRA_STORE_URL": store.url,
            "CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS": "200000"})
        tune_gc()  # as the exporter process does
        exporter = Exporter(settings, reader=TimedReader(store.url))
        exporter.prepare()
        write_s = [0.0]
        original = exporter.files.write_range

        def timed_write(*a, **kw):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                write_s[0] += time.perf_counter() - started

        exporter.files.write_range = timed_write  # type: ignore[method-assign]
        apply_s = [0.0]
        original_apply = exporter._apply

        def timed_apply(*a, **kw):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return original_apply(*a, **kw)
            finally:
                apply_s[0] += time.perf_counter() - started

        exporter._apply = timed_apply  # type: ignore[method-assign]
        cpu0, started = time.process_time(), time.perf_counter()
        result = exporter.catch_up(600)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
        assert result.rows_written == rows, result
        print(f"export: {rows:,} rows in {elapsed:.1f}s = {rows / elapsed:,.0f} rows/s "
              f"(target >= 50,000); exporter CPU {cpu:.1f}s")
        print(f"  store pulls (HTTP + server + orjson, in a prefetch thread) "
              f"{TimedReader.pull_s:.1f}s, row conversion {apply_s[0]:.1f}s, Parquet writes "
              f"{write_s[0]:.1f}s, load average {os.getloadavg()[0]:.1f}")
    finally:
        store.stop()


def _strings(prefix: str, values: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(prefix, pa.array(values).cast(pa.string()), "")


def generate(files: ExportFiles, rows: int, now_ms: int, seed: int = 7) -> None:
    """``rows`` export rows in 1M-row files: user topics (half delayed), retry and DLQ copies."""
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    written = 0
    serial = 0
    while written < rows:
        n = min(chunk, rows - written)
        kind = rng.choice(3, size=n, p=[0.75, 0.2, 0.05])  # user / retry / dlq
        topic_idx = rng.integers(0, len(TOPICS), n)
        group_idx = rng.integers(0, len(GROUPS), n)
        store_ms = now_ms - rng.integers(0, 2 * 3_600_000, n)
        delayed = (kind == 0) & (rng.random(n) < 0.5) | (kind == 1)
        level = np.where(delayed, rng.integers(1, 19, n), 0)
        lateness = rng.exponential(15.0, n).astype(np.int64)
        ids = np.arange(serial, serial + n)
        origin = rng.integers(0, max(serial + n, 1), n)
        user_topic = np.array(TOPICS, dtype=object)[topic_idx]
        group = np.array(GROUPS, dtype=object)[group_idx]
        topic = np.where(kind == 0, user_topic,
                         np.where(kind == 1, "%RETRY%" + group, "%DLQ%" + group))
        reason = np.where(kind == 2, np.array(REASONS, dtype=object)[rng.integers(0, 8, n)],
                          None)
        cols = {
            "msg_id": _strings("M", ids), "topic": pa.array(topic, pa.string()),
            "queue_id": pa.array(np.zeros(n, np.int32)),
            "queue_offset": pa.array(ids, pa.int64()), "commitlog_offset": pa.array(ids * 300),
            "store_timestamp_ms": pa.array(store_ms), "born_timestamp_ms": pa.array(store_ms),
            "tags": pa.nulls(n, pa.string()), "keys": pa.nulls(n, pa.string()),
            "flag": pa.array(np.zeros(n, np.int32)),
            "body_size_bytes": pa.array(np.full(n, 256, np.int64)),
            "body": pa.nulls(n, pa.binary()),
            "properties": pa.nulls(n, schemas.EXPORT_SCHEMA.field("properties").type),
            "reconsume_times": pa.array(np.where(kind == 1, rng.integers(1, 4, n),
                                                 np.where(kind == 2, 3, 0)).astype(np.int32)),
            "max_reconsume_times": pa.nulls(n, pa.int32()),
            "retry_topic": pa.array(np.where(kind == 0, None, user_topic), pa.string()),
            "origin_message_id": pa.array(np.where(kind == 0, None, _strings(
                "M", origin).to_numpy(zero_copy_only=False)), pa.string()),
            "real_topic": pa.nulls(n, pa.string()),
            "delay_level": pa.array(np.where(delayed, level, None), pa.int32()),
            "deliver_ts_ms": pa.array(np.where(delayed, store_ms - lateness, None), pa.int64()),
            "consumer_group": pa.array(np.where(kind == 0, None, group), pa.string()),
            "failure_reason": pa.array(reason, pa.string()),
            "failure_history": pa.nulls(n, schemas.EXPORT_SCHEMA.field("failure_history").type),
            "dlq_reason": pa.nulls(n, pa.string()),
            "trace_id": pa.nulls(n, pa.string()),
            "exported_at_ms": pa.array(np.full(n, now_ms, np.int64)),
        }
        table = pa.table(cols, schema=schemas.EXPORT_SCHEMA)
        files.write_range("generated", 0, serial, serial + n, hour_of(now_ms), table)
        written += n
        serial += n


def _java_peak_rss_mb() -> float:
    peak = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            ppid = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
            if ppid != os.getpid():
                continue
            hwm = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
        except (OSError, StopIteration, ValueError):
            continue
        if hwm:
            peak = max(peak, int(hwm.split()[1]) / 1024)
    return peak


def bench_jobs(rows: int, home: Path) -> None:
    from clepsydra_analytics.runner import run_jobs
    from clepsydra_analytics.session import session_for

    settings = AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(home),
                                           "CLEPSYDRA_SPARK_MASTER": "local[*]"})
    files = ExportFiles(settings.export_uri)
    now_ms = int(time.time() * 1000)
    started = time.perf_counter()
    generate(files, rows, now_ms)
    print(f"jobs: generated {rows:,} export rows in {time.perf_counter() - started:.1f}s")
    started = time.perf_counter()
    session_for(settings)
    print(f"  SparkSession start (JVM) {time.perf_counter() - started:.1f}s")
    total = 0.0
    for job in ("lateness", "funnel", "dead-letters", "throughput"):
        started = time.perf_counter()
        run_jobs(settings, [job], 3 * 3600, export_first=False)
        took = time.perf_counter() - started
        total += took
        print(f"  {job:<13} {took:6.1f}s")
    print(f"  all four      {total:6.1f}s (targets: lateness <= 60 s, all <= 180 s)")
    print(f"  peak memory: JVM {_java_peak_rss_mb():,.0f} MB resident, Python driver "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export-rows", type=int, default=200_000)
    parser.add_argument("--job-rows", type=int, default=10_000_000)
    parser.add_argument("--only", default="export,jobs")
    args = parser.parse_args()
    only = set(args.only.split(","))
    home = Path(tempfile.mkdtemp(prefix="clepsydra-bench-analytics-"))
    try:
        if "export" in only:
            bench_export(args.export_rows, home / "export-bench")
        if "jobs" in only:
            bench_jobs(args.job_rows, home / "jobs-bench")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
