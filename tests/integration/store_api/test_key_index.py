"""The on-disk key index behind the look-up routes, in the real store process
(DEC-key-index-on-disk): the msgId and key look-ups answer across rolled index files, after a clean
restart and after kill -9."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from clepsydra_core import naming
from tests.integration.store_api.helpers import TOPIC
from tools.processes import HttpService, free_port

pytestmark = pytest.mark.integration

ENV = {"CLEPSYDRA_STORE_KEY_INDEX_ENTRIES_PER_FILE": "64"}


def _check_lookups(url: str, sent: dict[str, tuple[str, str]]) -> None:
    """Every message by its msgId, and by its key among the newest ones of that key."""
    with requests.Session() as http:
        for msg_id, (key, body) in sent.items():
            by_id = http.get(f"{url}/v1/messages/{msg_id}", timeout=10)
            assert by_id.status_code == 200, (msg_id, by_id.text)
            assert [m["body"] for m in by_id.json()["messages"]] == [body]
            by_key = http.get(f"{url}/v1/messages", params={"topic": TOPIC, "key": key,
                                                            "max": 1000}, timeout=10)
            assert by_key.status_code == 200
            assert body in [m["body"] for m in by_key.json()["messages"]], key


def test_lookups_answer_the_same_across_files_restart_and_kill_9(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    # look-up by msgId and by key from the index on disk; kill -9 of the store, then
    # every acknowledged message is found again (SPEC P3)
    home = tmp_path / "home"
    port = free_port()
    store = start_store(home, port=port, env=ENV)
    url = store.url
    assert requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 2},
                         timeout=10).status_code == 201
    sent: dict[str, tuple[str, str]] = {}
    with requests.Session() as http:
        for i in range(60):
            body = f"single {i}"
            r = http.post(f"{url}/v1/topics/{TOPIC}/messages",
                          json={"body": body, "keys": f"order-{i % 7} single-{i}"}, timeout=10)
            assert r.status_code == 201
            sent[r.json()["msgId"]] = (f"single-{i}", body)
        for b in range(4):
            bodies = [f"batch {b}/{j}" for j in range(50)]
            r = http.post(f"{url}/v1/topics/{TOPIC}/messages/batch",
                          json={"messages": [{"body": t, "keys": [f"order-{j % 7}"]}
                                             for j, t in enumerate(bodies)]}, timeout=10)
            assert r.status_code == 201
            for j, (t, res) in enumerate(zip(bodies, r.json()["results"], strict=True)):
                sent[res["msgId"]] = (f"order-{j % 7}", t)
    files = list((home / "store" / naming.INDEX_DIR / naming.KEY_INDEX_DIR).iterdir())
    assert len(files) > 5  # 320 entries over files of 64
    newest = requests.get(f"{url}/v1/messages", params={"topic": TOPIC, "key": "order-3",
                                                        "max": 2}, timeout=10).json()
    assert [m["body"] for m in newest["messages"]] == ["batch 3/38", "batch 3/45"]
    _check_lookups(url, sent)

    store.kill()
    restarted = start_store(home, port=port, env=ENV, name="store-after-kill")
    _check_lookups(restarted.url, sent)
    again = requests.get(f"{restarted.url}/v1/messages", params={
        "topic": TOPIC, "key": "order-3", "max": 2}, timeout=10).json()
    assert again == newest
    restarted.stop()
    clean = start_store(home, port=port, env=ENV, name="store-after-stop")
    _check_lookups(clean.url, sent)
