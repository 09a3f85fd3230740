"""``python -m clepsydra_analytics serve --schedule --export`` (the local stack's memory,
DEC-memory-at-rest): the analytics API, the schedule's Celery worker with its beat and the exporter
in one process, as ``make run`` starts them. The API and the exporter answer their ports and the
exporter exports; a stop writes what it buffered; beat is a thread, not a forked child; an exporter
or a schedule worker that stops unasked takes the process down. Also
:class:`clepsydra_core.runtime.celery_worker.WorkerThread` against a real Redis."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from celery import Celery

from clepsydra_core.runtime.celery_worker import WorkerThread
from tests.fixtures.stack import descendants
from tests.integration.analytics.conftest import create_topic, exported_ids, produce, settings_for
from tools.parts import ANALYTICS_LOCAL, Stack
from tools.processes import HttpService, RedisServer, free_port, wait_until

pytestmark = pytest.mark.integration


def _env(home: Path, store: HttpService, redis_server: RedisServer, **more: str) -> dict[str, str]:
    return {"CLEPSYDRA_HOME": str(home), "CLEPSYDRA_STORE_URL": store.url,
            "CLEPSYDRA_REDIS_URL": redis_server.url, "CLEPSYDRA_SINGLE_PROCESS": "true",
            "CLEPSYDRA_ANALYTICS_PORT": str(free_port()),
            "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(free_port()), **more}


def test_one_process_serves_schedules_and_exports_and_writes_its_buffers_at_stop(
        start_store: Callable[..., HttpService], redis_server: RedisServer,
        tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders", queues=2)
    ids = produce(store.url, "orders", 40)
    home = tmp_path / "analytics"
    env = _env(home, store, redis_server, PYTHONPROFILEIMPORTTIME="1")
    settings = settings_for(store.url, home)
    proc = Stack(home).process(ANALYTICS_LOCAL, **env)
    assert isinstance(proc, HttpService)
    try:
        proc.start()  # ready: the API's /healthz answers
        wait_until(lambda: "celery worker analytics@" in proc.log()
                   and "ready (a thread of this process)" in proc.log(), 30,
                   what="the schedule's Celery worker ready")
        assert "beat embedded in this worker" in proc.log()
        assert descendants(proc.pid) == {}  # beat and the worker are threads: no child
        exporter = f"http://127.0.0.1:{env['CLEPSYDRA_ANALYTICS_EXPORTER_PORT']}"
        wait_until(lambda: _ok(exporter + "/healthz"), 30, what="the exporter's /healthz")
        assert requests.get(proc.url + "/v1/export/status", timeout=10).status_code == 200
        # the exporter buffers (flush every 60 s by default): nothing written yet, then the
        # stop makes it write, once
        assert sum(exported_ids(settings).values()) == 0
        # at rest (rows buffered, nothing written) the process holds neither Celery's
        # command line nor pyarrow (its shared objects are not mapped)
        imported = re.findall(r"^import time:.*\|\s+([\w.]+)$", proc.log(), re.MULTILINE)
        assert "clepsydra_core.runtime.celery_worker" in imported
        assert not [m for m in imported if m.split(".")[0] in (
            "prompt_toolkit", "pygments", "click_repl") or m.startswith("celery.bin")]
        assert "/pyarrow/" not in Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-3000:]
    assert exported_ids(settings) == {i: 1 for i in ids}


def _ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_an_exporter_that_cannot_run_stops_the_process(
        start_store: Callable[..., HttpService], redis_server: RedisServer,
        tmp_path: Path) -> None:
    store = start_store()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    home = tmp_path / "analytics"
    env = _env(home, store, redis_server,
               CLEPSYDRA_ANALYTICS_EXPORT_URI=str(blocker / "export"))
    proc = Stack(home).process(ANALYTICS_LOCAL, **env)
    try:
        try:
            proc.start(60)
        except RuntimeError as exc:  # it may stop before its API answers
            assert "exited early" in str(exc)
        wait_until(lambda: proc.exit_code() is not None, 60, what="the process stopped")
    finally:
        proc.stop()
    assert proc.exit_code() not in (None, 0)
    assert "the exporter stopped" in proc.log() and "not writable" in proc.log()


def test_the_exporter_in_the_apis_process_needs_a_port_of_its_own(
        start_store: Callable[..., HttpService], redis_server: RedisServer,
        tmp_path: Path) -> None:
    store = start_store()
    home = tmp_path / "analytics"
    port = str(free_port())
    env = _env(home, store, redis_server, CLEPSYDRA_ANALYTICS_PORT=port,
               CLEPSYDRA_ANALYTICS_EXPORTER_PORT=port)
    proc = Stack(home).process(ANALYTICS_LOCAL, **env)
    with pytest.raises(RuntimeError, match="exited early"):
        proc.start(60)
    assert proc.exit_code() == 2
    assert "CLEPSYDRA_ANALYTICS_EXPORTER_PORT must differ" in proc.log()


def test_a_celery_worker_on_a_thread_stops_when_asked_and_reports_an_unasked_stop(
        redis_server: RedisServer) -> None:
    app = Celery("worker-thread-test", broker=redis_server.url, set_as_current=False)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)
    ran = threading.Event()

    @app.task(name="stop-the-worker")  # type: ignore[untyped-decorator]
    def stop_the_worker() -> None:
        from celery.worker import state
        ran.set()
        state.should_terminate = 1  # what ends a worker from inside, as a crash would

    def start(on_stopped: Callable[[], None]) -> WorkerThread:
        worker = WorkerThread(app, pool="solo", concurrency=1, queues=["wt"], loglevel="INFO",
                              hostname="wt@%h", on_stopped=on_stopped,
                              without_gossip=True, without_mingle=True).start()
        assert worker.ready.wait(30)
        return worker

    unasked: list[bool] = []
    asked = start(lambda: unasked.append(True))
    assert asked.stop(30)
    assert not asked.failed and unasked == []

    stopped = threading.Event()
    crashing = start(stopped.set)
    try:
        stop_the_worker.apply_async(queue="wt")
        assert ran.wait(30)
        assert stopped.wait(30)  # on_stopped: the process would stop with it
        assert crashing.failed
    finally:
        from celery.worker import state
        crashing.stop(30)
        state.should_terminate = None
