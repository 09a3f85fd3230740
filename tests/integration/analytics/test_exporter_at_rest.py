"""The exporter at rest holds no pyarrow and no Flask (the whole local stack's memory at rest,
DEC-memory-at-rest): it lists, probes and cleans a local export folder with the standard library,
answers /healthz and /metrics on the standard library's HTTP server, and writes a snapshot only when
a report would read something new in it. pyarrow is loaded by the first export, which writes as
before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.snapshots import SnapshotWriter
from tests.integration.analytics.conftest import create_topic, exported_ids, produce, settings_for
from tools.processes import HttpService, Process, free_port, wait_until

pytestmark = pytest.mark.integration


def mapped(proc: Process, library: str) -> bool:
    """Whether ``library``'s shared objects are loaded in the process (its memory map)."""
    assert proc.proc is not None
    return f"/{library}/" in Path(f"/proc/{proc.proc.pid}/maps").read_text()


def imported(proc: Process, module: str) -> bool:
    """Whether the process's log says it imported ``module`` (``-X importtime`` lines)."""
    return any(line.rstrip().endswith(f"| {module}") for line in proc.log().splitlines())


def test_at_rest_without_pyarrow_nor_flask_until_the_first_export(
        start_store: Callable[..., HttpService], exporter_procs: Callable[..., Any],
        tmp_path: Path) -> None:
    store = start_store()
    port = free_port()
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_STORE_URL": store.url,
           "CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S": "0", "CLEPSYDRA_ANALYTICS_EXPORT_POLL_S": "0.05",
           "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(port), "PYTHONPROFILEIMPORTTIME": "1"}
    settings = settings_for(store.url, tmp_path, **{k: v for k, v in env.items()
                                                    if k.startswith("CLEPSYDRA_ANALYTICS")})
    proc = exporter_procs(env)
    health = f"http://127.0.0.1:{port}"
    answer = requests.get(f"{health}/healthz", timeout=10)
    assert answer.status_code == 200 and answer.json()["status"] == "ok"
    assert requests.get(f"{health}/nope", timeout=10).json()["error"] == "NOT_FOUND"
    assert "clepsydra_analytics_exporter_rows_total" in requests.get(f"{health}/metrics",
                                                                      timeout=10).text
    # several cycles (and snapshot looks: the flush interval is 0) over an empty store
    wait_until(lambda: requests.get(f"{health}/healthz", timeout=10).json()["lastCycleAgeS"]
               is not None, 30, what="a cycle")
    requests.post(f"{store.url}/v1/topics", json={"name": "idle", "queues": 1}, timeout=10)
    wait_until(lambda: "exporter ready" in proc.log(), 30, what="the exporter ready")
    assert not mapped(proc, "pyarrow") and not imported(proc, "pyarrow")
    assert not imported(proc, "flask") and not imported(proc, "werkzeug")
    snapshots = ExportFiles(settings.export_uri)
    assert not snapshots.exists(snapshots.snapshot_path(schemas.SCHEDULE_SNAPSHOT)), \
        "no level holds a message: nothing for a report, nothing written"

    create_topic(store.url, "orders")
    ids = produce(store.url, "orders", 30)
    wait_until(lambda: sum(exported_ids(settings).values()) == 30, 60, what="the export")
    assert exported_ids(settings) == {i: 1 for i in ids}
    assert mapped(proc, "pyarrow")  # the first export loaded it
    # a delayed message waits in its level (no scheduler here): the schedule snapshot now
    # holds something a report reads, so it is written
    produce(store.url, "orders", 1, prefix="later", delayLevel=5)
    wait_until(lambda: snapshots.exists(snapshots.snapshot_path(schemas.SCHEDULE_SNAPSHOT)),
               30, what="the schedule snapshot")
    levels = snapshots.read_snapshot(schemas.SCHEDULE_SNAPSHOT)
    assert levels is not None
    assert [r["pending"] for r in levels.to_pylist() if r["level"] == 5] == [1]
    assert proc.stop() == 0


def test_a_snapshot_is_written_only_when_a_report_would_read_something_new(
        tmp_path: Path) -> None:
    files = ExportFiles(str(tmp_path / "export"))
    made: list[int] = []

    def table() -> Any:
        made.append(1)
        return schemas.to_table(schemas.empty_columns()).select([])

    def write(writer: SnapshotWriter, rows: list[dict[str, Any]], now_ms: int, **kw: bool) -> bool:
        return writer.write("probe", rows, now_ms, table=table, **kw)

    hour_ms = 3_600_000
    first = SnapshotWriter(files)
    assert not write(first, [], 0, empty=True, dated=False), "nothing to say, no file"
    row = {"snapshot_ms": 0, "level": 3, "pending": 2}
    assert write(first, [row], 0, empty=False, dated=True)
    assert not write(first, [{**row, "snapshot_ms": 10}], 10, empty=False, dated=True)
    assert write(first, [{**row, "snapshot_ms": hour_ms}], hour_ms, empty=False, dated=True), \
        "pending messages are reported by the hour of the snapshot: a new hour, a new one"
    stamp = json.loads(Path(first.stamp_path("probe")).read_text())
    assert stamp["hour"] == "1970-01-01T01"
    # a restarted exporter reads what was written from the stamp
    again = SnapshotWriter(files)
    assert not write(again, [{**row, "snapshot_ms": hour_ms + 5}], hour_ms + 5, empty=False,
                     dated=True)
    assert write(again, [{**row, "pending": 0, "snapshot_ms": hour_ms + 6}], hour_ms + 6,
                 empty=True, dated=False), "what the file holds is stale: replaced"
    assert len(made) == 3
