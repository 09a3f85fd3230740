"""The store's disk guard rails and the carry-forward of scheduled messages (SPEC
P4, DEC-disk-full-507), on a real store process over real files: a small configured capacity
(CLEPSYDRA_STORE_DISK_CAPACITY_BYTES) stands for a small disk.

Past the high-water mark produce answers 507 DISK_FULL naming the setting and stores nothing,
the retry service passes the same clear answer on for a send-back, /metrics says so; once the
old segments expire, retention carries the undelivered delayed messages forward, deletes the
segments that held them, writes are accepted again, and every delayed message is handed over
exactly once (D9)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from clepsydra_core import naming
from tests.integration.retry.conftest import retry_service
from tools.processes import HttpService, RedisServer, wait_until

pytestmark = pytest.mark.integration

LEVELS = "1s 2s 3s"
SEGMENT_BYTES = 64 * 1024
CAPACITY_BYTES = 640 * 1024
FILLER = "f" * 2000
DELAYED = 9
HOUR_S = 3600


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def metrics(http: requests.Session, store: HttpService) -> dict[str, float]:
    text = http.get(f"{store.url}/metrics", timeout=5).text
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^(clepsydra_store_engine_\w+) (\S+)$", text, re.MULTILINE)}


def stored(http: requests.Session, store: HttpService, topic: str) -> int:
    queues = http.get(f"{store.url}/v1/topics/{quote(topic, safe='')}", timeout=5).json()
    return sum(q["maxOffset"] for q in queues["queues"])


def produce(http: requests.Session, store: HttpService, topic: str,
            messages: list[dict[str, Any]]) -> requests.Response:
    return http.post(f"{store.url}/v1/topics/{topic}/messages/batch",
                     json={"messages": messages}, timeout=10)


def test_disk_high_water_mark_refuses_writes_and_carry_forward_frees_segments(
        tmp_path: Path, http: requests.Session, redis_server: RedisServer,
        start_store: Callable[..., HttpService]) -> None:
    # SPEC P4 (Beyond), D9
    home = tmp_path / "home"
    store = start_store(home, env={
        "CLEPSYDRA_DELAY_LEVELS": LEVELS, "CLEPSYDRA_STORE_SEGMENT_BYTES": str(SEGMENT_BYTES),
        "CLEPSYDRA_STORE_DISK_CAPACITY_BYTES": str(CAPACITY_BYTES),
        "CLEPSYDRA_STORE_DISK_MAX_RATIO": "0.9", "CLEPSYDRA_STORE_DISK_WARN_RATIO": "0.5"})
    retry = retry_service(tmp_path / "retry", store_url=store.url, redis_url=redis_server.url)
    retry.start()
    try:
        _run(tmp_path, home, http, store, retry)
    finally:
        retry.stop()


def _run(tmp_path: Path, home: Path, http: requests.Session, store: HttpService,
         retry: HttpService) -> None:
    assert http.post(f"{store.url}/v1/topics", json={"name": "T", "queues": 1},
                     timeout=5).status_code == 201
    assert http.put(f"{retry.url}/v1/groups/g", json={}, timeout=5).status_code in (200, 201)
    first = produce(http, store, "T", [{"body": "plain"}]).json()["results"][0]

    # delayed messages spread over the first segments, and filler until writes are refused
    delayed: list[str] = []
    refused: requests.Response | None = None
    for i in range(200):
        batch = [{"body": FILLER} for _ in range(8)]
        if len(delayed) < DELAYED:
            body = f"delayed-{len(delayed)}"
            batch.append({"body": body, "delayLevel": 1 + len(delayed) % 3,
                          "properties": {"order": str(i)}})
            delayed.append(body)
        resp = produce(http, store, "T", batch)
        if resp.status_code == 507:
            refused = resp
            break
        assert resp.status_code == 201, resp.text
        if len(delayed) == DELAYED:
            time.sleep(0.05)  # the guard samples every second
    assert refused is not None, "the high-water mark was never reached"
    answer = refused.json()
    assert answer["error"] == "DISK_FULL"
    assert "CLEPSYDRA_STORE_DISK_MAX_RATIO=0.9" in answer["message"]
    assert len(delayed) == DELAYED

    # nothing of a refused batch is stored; /metrics says why
    before = stored(http, store, "T")
    again = produce(http, store, "T", [{"body": "x"}, {"body": "y", "delayLevel": 1}])
    assert again.status_code == 507
    assert stored(http, store, "T") == before
    assert stored(http, store, naming.SCHEDULE_TOPIC) == DELAYED
    m = metrics(http, store)
    assert m["clepsydra_store_engine_disk_writable"] == 0
    assert m["clepsydra_store_engine_disk_warning"] == 1
    assert m["clepsydra_store_engine_disk_used_ratio"] >= 0.9

    # a send-back through the retry service gets the same clear answer, not a 500
    sent_back = http.post(f"{retry.url}/v1/groups/g/send-back",
                          json={"msgId": first["msgId"], "delayLevel": 1}, timeout=10)
    assert sent_back.status_code == 507, sent_back.text
    assert sent_back.json()["error"] == "DISK_FULL"

    # the old segments expire: retention (every second under pressure) carries the delayed
    # messages forward and deletes the segments that held them
    segments = sorted((home / "store" / naming.COMMITLOG_DIR).iterdir())
    old = time.time() - 100 * HOUR_S
    for path in segments[:-1]:
        os.utime(path, (old, old))
    wait_until(lambda: metrics(http, store)["clepsydra_store_engine_disk_writable"] == 1, 30,
               0.2, what="writes accepted again")
    m = metrics(http, store)
    assert m["clepsydra_store_engine_schedule_carried_total"] == DELAYED
    assert m["clepsydra_store_engine_segments_deleted_total"] >= len(segments) - 2
    assert not segments[0].exists()
    assert produce(http, store, "T", [{"body": "after"}]).status_code == 201

    # every delayed message is handed over once, with its properties, even when asked again
    time.sleep(3.1)  # the longest level is 3 s
    for level in (1, 2, 3):
        url = f"{store.url}/v1/schedule/levels/{level}/handover"
        done = http.post(url, json={"fromOffset": 0, "max": 100}, timeout=10).json()
        assert done["delivered"] == len([d for d in range(DELAYED) if d % 3 == level - 1])
        assert http.post(url, json={"fromOffset": 0, "max": 100},
                         timeout=10).json()["delivered"] == 0
    low = http.get(f"{store.url}/v1/topics/T", timeout=5).json()["queues"][0]["minOffset"]
    pulled = http.get(f"{store.url}/v1/topics/T/queues/0/messages",
                      params={"offset": low, "max": 1000}, timeout=10).json()["messages"]
    got = [m for m in pulled if m.get("body", "").startswith("delayed-")]
    assert sorted(m["body"] for m in got) == sorted(delayed)
    assert all("order" in m["properties"] for m in got)
