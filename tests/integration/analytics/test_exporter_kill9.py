"""kill -9 of the exporter process in the middle of an export, several times, then a restart:
the Parquet rows equal the messages, no msgId twice, none missing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.status import export_status
from clepsydra_analytics.store_reader import StoreReader
from tests.integration.analytics.conftest import (
    create_topic,
    exported_ids,
    produce,
    settings_for,
)
from tools.processes import HttpService, free_port, http_ok, wait_until

pytestmark = pytest.mark.integration


def test_kill9_mid_export_neither_duplicates_nor_skips(
        start_store: Callable[..., HttpService], exporter_procs: Callable[..., Any],
        tmp_path: Path) -> None:
    store = start_store()
    create_topic(store.url, "orders", queues=2)
    create_topic(store.url, "payments", queues=1)
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_STORE_URL": store.url,
           "CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS": "25", "CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S": "0",
           "CLEPSYDRA_ANALYTICS_EXPORT_POLL_S": "0.02",
           "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(free_port())}
    settings = settings_for(store.url, tmp_path, **{k: v for k, v in env.items()
                                                    if k.startswith("CLEPSYDRA_ANALYTICS")})
    ids = produce(store.url, "orders", 4000) + produce(store.url, "payments", 1000, prefix="p")

    for round_no in range(3):
        before = sum(exported_ids(settings).values())
        proc = exporter_procs(env, name=f"exporter-{round_no}")
        wait_until(lambda b=before: sum(exported_ids(settings).values()) >= b + 300, 60,
                   interval_s=0.01, what="the exporter writing files")
        proc.kill()  # SIGKILL: no clean-up, possibly mid-file or between rename and commit
        counts = exported_ids(settings)
        assert max(counts.values()) == 1, "a row was written twice"
        ids += produce(store.url, "orders", 200, prefix=f"r{round_no}")

    final = exporter_procs(env, name="exporter-final")
    health = f"http://127.0.0.1:{env['CLEPSYDRA_ANALYTICS_EXPORTER_PORT']}/healthz"
    wait_until(lambda: http_ok(health), 30, what="the exporter's /healthz")
    files = ExportFiles(settings.export_uri)
    reader = StoreReader(store.url)
    wait_until(lambda: all(s.lag == 0 for s in export_status(files, reader, settings.topics)),
               120, what="the export catching up")
    final.stop()
    assert exported_ids(settings) == {i: 1 for i in ids}
    assert final.log().count('"level": "ERROR"') == 0
