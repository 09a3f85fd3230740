"""``python -m clepsydra_analytics schedule --export`` (issue 14, the local stack's memory):
the schedule's Celery worker, its beat and the exporter in one process, as ``make run`` starts
them. The exporter answers its health port and exports; a stop writes what it buffered; beat
is a thread, not a forked child; an exporter that cannot run takes the process down."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.stack import descendants
from tests.integration.analytics.conftest import create_topic, exported_ids, produce, settings_for
from tools.parts import ANALYTICS_WORKER, Stack
from tools.processes import HttpService, RedisServer, free_port, wait_until

pytestmark = pytest.mark.integration


def test_one_process_schedules_and_exports_and_writes_its_buffers_at_stop(
        start_store: Callable[..., HttpService], redis_server: RedisServer,
        tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders", queues=2)
    ids = produce(store.url, "orders", 40)
    home = tmp_path / "analytics"
    env = {"CLEPSYDRA_HOME": str(home), "CLEPSYDRA_STORE_URL": store.url,
           "CLEPSYDRA_REDIS_URL": redis_server.url,
           "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(free_port()), "PYTHONPROFILEIMPORTTIME": "1"}
    settings = settings_for(store.url, home)
    proc = Stack(home).process(ANALYTICS_WORKER, **env)
    try:
        proc.start()  # ready: the exporter's /healthz answers
        wait_until(lambda: "analytics@" in proc.log() and " ready." in proc.log(), 30,
                   what="the schedule's Celery worker ready")
        assert "beat embedded in this worker" in proc.log()
        assert descendants(proc.pid) == {}  # beat is a thread: no forked child
        # the exporter buffers (flush every 60 s by default): nothing written yet, then the
        # stop makes it write, once
        assert sum(exported_ids(settings).values()) == 0
        # issue 14: at rest (rows buffered, nothing written) the process holds neither Celery's
        # command line (its worker started without it: what the import log shows before the
        # worker redirects stderr) nor Flask (markupsafe's speed-ups) nor pyarrow (their
        # shared objects are not mapped)
        imported = re.findall(r"^import time:.*\|\s+([\w.]+)$", proc.log(), re.MULTILINE)
        assert "clepsydra_core.celery_worker" in imported
        assert not [m for m in imported if m.split(".")[0] in (
            "prompt_toolkit", "pygments", "click_repl") or m.startswith("celery.bin")]
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "/pyarrow/" not in maps and "/markupsafe/" not in maps
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-3000:]
    assert exported_ids(settings) == {i: 1 for i in ids}


def test_an_exporter_that_cannot_run_stops_the_process(
        start_store: Callable[..., HttpService], redis_server: RedisServer,
        tmp_path: Path) -> None:
    store = start_store()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {"CLEPSYDRA_HOME": str(tmp_path / "analytics"), "CLEPSYDRA_STORE_URL": store.url,
           "CLEPSYDRA_REDIS_URL": redis_server.url,
           "CLEPSYDRA_ANALYTICS_EXPORT_URI": str(blocker / "export"),
           "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(free_port())}
    proc = Stack(tmp_path / "analytics").process(ANALYTICS_WORKER, **env)
    try:
        with pytest.raises(RuntimeError, match="exited early"):
            proc.start(60)
    finally:
        proc.stop()
    assert proc.exit_code() not in (None, 0)
    assert "the exporter stopped" in proc.log() and "not writable" in proc.log()
