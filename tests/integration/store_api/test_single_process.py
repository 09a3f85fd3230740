"""The store with CLEPSYDRA_SINGLE_PROCESS (what ``make run`` sets: the stack's
memory at rest): its gunicorn worker runs in the service's own process, without a master
(clepsydra_web.server.GunicornServer.run_in_process), and behaves as under the master."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.fixtures.stack import descendants
from tests.integration.store_api.helpers import TOPIC
from tools.parts import store_service
from tools.processes import HttpService, free_port

pytestmark = pytest.mark.integration

SINGLE = {"CLEPSYDRA_SINGLE_PROCESS": "true"}


def test_one_process_takes_a_produce_stops_gracefully_and_a_restart_finds_it(
        tmp_path: Path, start_store: Callable[..., HttpService]) -> None:
    """One process (no master, no forked worker) answers health and produce (on the
    poller's inline path too: a second request on the kept-alive connection); SIGTERM stops it
    with exit 0 after closing the MessageStore (worker_exit), and a store started again on the
    same data finds the message."""
    home, port = tmp_path / "home", free_port()
    store = start_store(home, port=port, env=SINGLE)
    assert store.proc is not None
    assert descendants(store.proc.pid) == {}, "no worker process: the worker is this process"
    assert requests.get(f"{store.url}/healthz", timeout=10).status_code == 200
    with requests.Session() as http:
        assert http.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 1},
                         timeout=10).status_code == 201
        ids = [http.post(f"{store.url}/v1/topics/{TOPIC}/messages", json={"body": body},
                         timeout=10).json()["msgId"] for body in ("one", "two")]
    assert store.stop() == 0
    log = store.log()
    assert "no master" in log and "message store closed" in log
    again = start_store(home, port=port, name="store-again", env=SINGLE)
    for msg_id, body in zip(ids, ("one", "two"), strict=True):
        found = requests.get(f"{again.url}/v1/messages/{msg_id}", timeout=10).json()
        assert found["messages"][0]["body"] == body


def test_sigint_closes_the_store_too(start_store: Callable[..., HttpService]) -> None:
    """SIGINT (Ctrl-C) stops at once, as gunicorn's worker does, still closing the store."""
    store = start_store(env=SINGLE)
    assert store.proc is not None
    os.kill(store.proc.pid, signal.SIGINT)
    assert store.proc.wait(15) == 0
    assert "message store closed" in store.log()


@pytest.mark.parametrize("single", ["true", "false"])
def test_a_store_that_cannot_open_its_files_exits_3_either_way(tmp_path: Path,
                                                               single: str) -> None:
    """The same exit status with or without gunicorn's master: the worker failed to boot
    (gunicorn's 3), so a supervisor sees the same failure."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = store_service(tmp_path / "home", env={"CLEPSYDRA_SINGLE_PROCESS": single,
                                                  "CLEPSYDRA_STORE_DIR": str(blocker / "store")})
    try:
        with pytest.raises(RuntimeError, match="exited early"):
            store.start(60)
    finally:
        store.stop()
    assert store.exit_code() == 3, store.log()[-2000:]
