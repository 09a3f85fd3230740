"""Helpers for the exporter's integration tests: a real store (tests/conftest.py's
``start_store``), messages produced over HTTP, the export read back with pyarrow."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests

from clepsydra_analytics.export_files import ExportFiles
from clepsydra_analytics.settings import AnalyticsSettings
from tools.parts import ANALYTICS_EXPORT, Stack
from tools.processes import Process


def settings_for(store_url: str, home: Path, **env: str) -> AnalyticsSettings:
    return AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(home),
                                       "CLEPSYDRA_STORE_URL": store_url, **env})


def create_topic(store_url: str, topic: str, queues: int = 1) -> None:
    resp = requests.post(f"{store_url}/v1/topics", json={"name": topic, "queues": queues},
                         timeout=10)
    assert resp.status_code in (200, 201), resp.text


def produce(store_url: str, topic: str, count: int, *, batch: int = 500,
            prefix: str = "m", **fields: Any) -> list[str]:
    """``count`` messages spread over the topic's queues; their msgIds."""
    ids: list[str] = []
    for start in range(0, count, batch):
        messages = [{"body": f"{prefix}-{i}", "keys": f"{prefix}-{i}", **fields}
                    for i in range(start, min(count, start + batch))]
        resp = requests.post(f"{store_url}/v1/topics/{quote(topic, safe='')}/messages/batch",
                             json={"messages": messages}, timeout=30)
        assert resp.status_code == 201, resp.text
        ids += [r["msgId"] for r in resp.json()["results"]]
    return ids


def exported(settings: AnalyticsSettings) -> pa.Table:
    files = ExportFiles(settings.export_uri)
    tables = [files.read_table(r) for r in files.ranges()]
    return pa.concat_tables(tables) if tables else pa.table({"msg_id": pa.array([], pa.string())})


def exported_ids(settings: AnalyticsSettings) -> Counter[str]:
    return Counter(exported(settings).column("msg_id").to_pylist())


@pytest.fixture
def exporter_procs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Factory: exporter_procs(env, name) starts ``python -m clepsydra_analytics export`` (the
    stack builder's analytics-export part) with ``env``, its log in ``tmp_path/logs``; every
    one is stopped at the end."""
    made: list[Process] = []

    def make(env: dict[str, str], name: str = "exporter") -> Process:
        proc = Stack(tmp_path).process(ANALYTICS_EXPORT, name=name, **env)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.stop()
