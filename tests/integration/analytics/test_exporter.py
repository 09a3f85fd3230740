"""The exporter against a real store: every message exactly once in Parquet, new topics picked
up without a restart, kill -9 at any point neither duplicates nor skips."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.exporter import Exporter
from clepsydra_analytics.status import export_status
from clepsydra_analytics.store_reader import StoreReader
from clepsydra_core import naming
from clepsydra_core.errors import ConfigError, Unavailable
from tests.integration.analytics.conftest import (
    create_topic,
    exported,
    exported_ids,
    produce,
    settings_for,
)
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration


def test_exports_every_message_once_with_ranges_in_file_names(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders", queues=2)
    ids = produce(store.url, "orders", 700)
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS="100")
    exporter = Exporter(settings)
    exporter.prepare()
    result = exporter.catch_up(timeout_s=60)

    assert result.caught_up and result.rows_written == 700
    assert exported_ids(settings) == {i: 1 for i in ids}
    files = ExportFiles(settings.export_uri)
    for r in files.ranges():
        table = files.read_table(r)
        offsets = table.column("queue_offset").to_pylist()
        assert offsets == list(range(r.start_offset, r.end_offset))
        assert set(table.column("queue_id").to_pylist()) == {r.queue_id}
        assert set(table.column("topic").to_pylist()) == {"orders"}
    reader = StoreReader(store.url)
    committed = reader.committed(settings.export_group, "orders")
    assert sum(committed.values()) == 700
    [status] = export_status(files, reader, settings.topics)
    assert (status.topic, status.lag, status.exported_rows) == ("orders", 0, 700)


def test_columns_carry_the_message_fields(start_store: Callable[..., HttpService],
                                          tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders")
    props = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
             "color": "blue"}
    [msg_id] = produce(store.url, "orders", 1, tags="pay", properties=props)
    settings = settings_for(store.url, tmp_path)
    exporter = Exporter(settings)
    exporter.prepare()
    exporter.catch_up(timeout_s=30)
    [row] = exported(settings).to_pylist()
    assert row["msg_id"] == msg_id and row["tags"] == "pay" and row["keys"] == "m-0"
    assert row["body_size_bytes"] == len("m-0") and row["body"] is None
    assert dict(row["properties"])["color"] == "blue"
    assert row["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert row["consumer_group"] is None and row["reconsume_times"] == 0


def test_a_new_matching_topic_is_picked_up_without_restart(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders")
    produce(store.url, "orders", 10)
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.05",
                            CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="0",
                            CLEPSYDRA_ANALYTICS_TOPICS="orders,pay*")
    exporter = Exporter(settings)
    exporter.prepare()
    stop = threading.Event()
    thread = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: sum(exported_ids(settings).values()) == 10, 30, what="orders")
        create_topic(store.url, "payments")
        create_topic(store.url, "audit")  # matches no pattern: never exported
        new_ids = produce(store.url, "payments", 5, prefix="p")
        produce(store.url, "audit", 5, prefix="a")
        wait_until(lambda: sum(exported_ids(settings).values()) == 15, 30, what="payments")
    finally:
        stop.set()
        thread.join(30)
    topics = exported(settings).column("topic").to_pylist()
    assert topics.count("payments") == 5 and "audit" not in topics
    assert set(new_ids) <= set(exported_ids(settings))


class CrashAfterRename(Exception):
    """Stands for the process dying between a file's rename and its offset commit."""


class CrashingReader(StoreReader):
    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        raise CrashAfterRename


def test_crash_between_rename_and_commit_resumes_after_the_file(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders")
    ids = produce(store.url, "orders", 300)
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS="100")
    first = Exporter(settings, reader=CrashingReader(store.url))
    first.prepare()
    with pytest.raises(CrashAfterRename):
        first.catch_up(timeout_s=30)
    assert sum(exported_ids(settings).values()) == 100  # one file landed, nothing committed
    assert StoreReader(store.url).committed(settings.export_group, "orders") == {}

    second = Exporter(settings)
    second.prepare()
    second.catch_up(timeout_s=30)
    assert exported_ids(settings) == {i: 1 for i in ids}


def test_half_written_temp_files_are_removed_and_never_read(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders")
    produce(store.url, "orders", 20)
    settings = settings_for(store.url, tmp_path)
    files = ExportFiles(settings.export_uri)
    folder = Path(files.hour_dir("orders", "2026-01-01T00"))
    folder.mkdir(parents=True)
    temp = folder / f"{naming.EXPORT_TEMP_PREFIX}dead-{naming.export_file_name(0, 0, 20)}"
    temp.write_bytes(b"PAR1 half")
    exporter = Exporter(settings)
    exporter.prepare()
    assert not temp.exists()
    exporter.catch_up(timeout_s=30)
    assert sum(exported_ids(settings).values()) == 20


def test_unwritable_export_folder_is_a_clear_error(start_store: Callable[..., HttpService],
                                                   tmp_path: Path) -> None:
    store = start_store()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    settings = settings_for(store.url, tmp_path,
                            CLEPSYDRA_ANALYTICS_EXPORT_URI=str(blocker / "export"))
    with pytest.raises(ConfigError, match=r"export folder .* is not writable"):
        Exporter(settings).prepare()


def test_store_away_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    settings = settings_for("http://127.0.0.1:9", tmp_path)
    exporter = Exporter(settings)
    exporter.prepare()
    with pytest.raises(Unavailable):
        exporter.cycle()
    stop = threading.Event()
    stop.set()
    exporter.run(stop)  # returns: a stopped exporter with nothing buffered
    assert requests is not None


def test_a_jobs_run_makes_the_running_exporter_flush_now(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    from clepsydra_analytics.runner import request_flush

    store = start_store()
    create_topic(store.url, "orders")
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.05",
                            CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="600")
    exporter = Exporter(settings)
    exporter.prepare()
    ids = produce(store.url, "orders", 30)
    for _ in range(3):
        exporter.cycle()
    assert sum(exported_ids(settings).values()) == 0  # buffered, the interval not reached
    request_flush(settings)
    assert exporter.cycle().rows_written == 30
    assert exported_ids(settings) == {i: 1 for i in ids}
    assert exporter.cycle().rows_written == 0  # one request, one flush


class FailingOnce(ExportFiles):
    """The second file write fails once (a full disk, say)."""

    writes = 0

    def write_range(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        FailingOnce.writes += 1
        if FailingOnce.writes == 2:
            raise OSError(28, "No space left on device")
        return super().write_range(*args, **kwargs)


def test_a_write_error_is_retried_without_duplicates_or_gaps(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders")
    ids = produce(store.url, "orders", 30)
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.05",
                            CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="0",
                            CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS="10")
    exporter = Exporter(settings, files=FailingOnce(settings.export_uri))
    exporter.prepare()
    stop = threading.Event()
    thread = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: sum(exported_ids(settings).values()) >= 30, 30, what="the export")
    finally:
        stop.set()
        thread.join(30)
    assert exported_ids(settings) == {i: 1 for i in ids}
    assert FailingOnce.writes >= 4  # three files, one of them written twice


def test_a_jobs_run_leaves_exporting_to_a_live_exporter_without_its_lock(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    """On a cluster the exporter's lock may not reach the CronJob's pod: its heartbeat does
    (the shared state folder), so the run asks it to flush instead of exporting too."""
    from clepsydra_analytics.runner import catch_up

    store = start_store()
    create_topic(store.url, "orders", queues=2)
    settings = settings_for(store.url, tmp_path, CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.05",
                            CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="600")
    exporter = Exporter(settings)  # runs without taking the lock, as on another machine
    exporter.prepare()
    stop = threading.Event()
    thread = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: (settings.state_dir / naming.EXPORTER_HEARTBEAT).exists(), 30,
                   what="the heartbeat")
        ids = produce(store.url, "orders", 50)
        assert catch_up(settings).mode == "waited"
        assert exported_ids(settings) == {i: 1 for i in ids}
    finally:
        stop.set()
        thread.join(30)
    assert exported_ids(settings) == {i: 1 for i in ids}
