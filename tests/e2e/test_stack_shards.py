"""``CLEPSYDRA_STORE_SHARDS=N make run`` (DEC-store-shards): N store processes on the ports
rule, each with its own data folder and log, every other part given shard 0's address only; the
CLI sees the shards (`clepsydra cluster`); growing is a restart with a larger N, whose new shard
starts empty and takes the topics."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import requests

from clepsydra_core.shards import shard_port
from tests.fixtures.stack import RunningStack
from tools.processes import REPO, wait_until

pytestmark = pytest.mark.e2e


def _clepsydra(stack: RunningStack, *args: str) -> Any:
    env = {"CLEPSYDRA_STORE_URL": stack.store_url, "CLEPSYDRA_RETRY_URL": stack.retry_url,
           "PATH": ""}
    out = subprocess.run([sys.executable, "-m", "clepsydra_client.cli.main", "--json", *args],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                         check=True)
    return json.loads(out.stdout)


def test_make_run_starts_every_shard_and_grows_by_a_restart(
        start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack("--without-analytics", CLEPSYDRA_STORE_SHARDS="2",
                        CLEPSYDRA_DELAY_LEVELS="1s 2s")
    port = int(stack.env["CLEPSYDRA_STORE_PORT"])
    urls = [f"http://127.0.0.1:{shard_port(port, i)}" for i in range(2)]
    assert urls[0] == stack.store_url
    output = stack.output()
    assert f"store-1   {urls[1]} (store shard 1)" in output  # the ready table lists it
    for i, name in enumerate(("store", "store-1")):
        assert (stack.home / name / "commitlog").is_dir()  # its own data folder
        assert (stack.home / "logs" / f"{name}.log").is_file()
        assert requests.get(urls[i] + "/healthz", timeout=5).status_code == 200
    members = _clepsydra(stack, "cluster")
    assert [(s["id"], s["url"], s["state"]) for s in members["shards"]] == [
        (0, urls[0], "up"), (1, urls[1], "up")]
    created = _clepsydra(stack, "topics", "create", "grow", "--queues", "2")
    assert created["shards"]["applied"] == [0, 1]
    sent = _clepsydra(stack, "send", "grow", "tick", "--delay-level", "1")
    assert sent
    assert stack.stop_with(signal.SIGTERM) == 0

    grown = start_stack("--without-analytics", CLEPSYDRA_STORE_SHARDS="3",
                        CLEPSYDRA_DELAY_LEVELS="1s 2s", CLEPSYDRA_HOME=str(stack.home),
                        CLEPSYDRA_STORE_PORT=str(port))
    third = f"http://127.0.0.1:{shard_port(port, 2)}"
    wait_until(lambda: requests.get(third + "/v1/topics/grow", timeout=5).status_code == 200,
               30, what="the new shard to take the topic from its peers")
    shown = _clepsydra(grown, "topics", "show", "grow")
    assert sorted({q["shard"] for q in shown["queues"]}) == [0, 1, 2]
    assert len(shown["queues"]) == 6
    wait_until(lambda: _clepsydra(grown, "topics", "show", "grow")["messages"] == 1, 30,
               what="the delayed message delivered on the shard that stored it")
    shown = _clepsydra(grown, "topics", "show", "grow")
    assert [q["shard"] for q in shown["queues"] if q["maxOffset"]] in ([0], [1])  # not moved
