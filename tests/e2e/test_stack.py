"""The local stack (`python -m tools.stack`, what `make run` starts) as a black box: it becomes
ready, a delayed message goes store -> scheduler -> store, and a stop signal ends every process
it started (README.md, Quick start)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
import requests

from tests.fixtures.stack import (
    READY_LINE,
    RunningStack,
    child_pid,
    descendants,
    still_running,
)
from tools.processes import wait_until

pytestmark = pytest.mark.e2e


def _json(resp: requests.Response, status: int) -> Any:
    assert resp.status_code == status, f"{resp.request.method} {resp.url}: {resp.text}"
    return resp.json()


def _assert_stops(stack: RunningStack, sig: signal.Signals) -> None:
    children = descendants(stack.proc.pid)
    assert len(children) >= 5, f"expected redis, store, retry, worker, beat: {children}"
    assert stack.stop_with(sig) == 0, stack.output()[-4000:]
    wait_until(lambda: not still_running(children), 10.0,
               what=f"every child of the stack to exit after {sig.name}")
    lines = stack.output().splitlines()
    assert lines.count(READY_LINE) == 1


def test_stack_delivers_a_delayed_message_and_stops_on_sigint(
        start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack(CLEPSYDRA_DELAY_LEVELS="1s 2s 3s")
    assert _json(requests.get(stack.store_url + "/healthz", timeout=5), 200)["status"] == "ok"
    assert requests.get(stack.retry_url + "/healthz", timeout=5).status_code == 200
    # every file of the stack lives under CLEPSYDRA_HOME
    assert (stack.home / "logs" / "store.log").is_file()
    assert (stack.home / "redis").is_dir()

    topic = "e2e-delayed"
    created = requests.post(stack.store_url + "/v1/topics", json={"name": topic, "queues": 1},
                            timeout=5)
    assert created.status_code == 201, created.text
    produced = _json(requests.post(f"{stack.store_url}/v1/topics/{topic}/messages",
                                   json={"body": "tick", "delayLevel": 1}, timeout=5), 201)
    assert produced["topic"] == "SCHEDULE_TOPIC_XXXX"  # SPEC S1: parked, not yet visible

    pulled: list[dict[str, Any]] = []

    def delivered() -> bool:
        page = _json(requests.get(f"{stack.store_url}/v1/topics/{topic}/queues/0/messages",
                                  params={"offset": 0, "max": 32}, timeout=5), 200)
        pulled.extend(page["messages"])
        return bool(pulled)

    wait_until(delivered, 30.0, interval_s=0.2, what="the delayed message in its topic")
    [message] = pulled
    assert message["body"] == "tick"
    # SPEC L1/D3: level 1 is 1s, never early
    assert message["storeTimestamp"] >= produced["storeTimestamp"] + 1000

    _assert_stops(stack, signal.SIGINT)


def test_stack_stops_every_process_on_sigterm(start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack()
    _assert_stops(stack, signal.SIGTERM)


def test_a_dead_child_is_restarted_alone(start_stack: Callable[..., RunningStack]) -> None:
    # kill -9 of the retry service restarts it; the store and its data stay
    stack = start_stack()
    store_pid, retry_pid = child_pid(stack, "clepsydra_store"), child_pid(stack, "clepsydra_retry")
    _json(requests.post(stack.store_url + "/v1/topics", json={"name": "heal", "queues": 1},
                        timeout=5), 201)
    _json(requests.put(stack.retry_url + "/v1/groups/heal-group", json={}, timeout=5), 201)
    os.kill(retry_pid, signal.SIGKILL)
    wait_until(lambda: "clepsydra: retry restarted" in stack.output(), 30,
               what="the retry service's restart")
    wait_until(lambda: _listening(stack.retry_url), 60, what="retry healthy again")
    assert stack.proc.poll() is None
    assert child_pid(stack, "clepsydra_store") == store_pid  # the others were left running
    assert child_pid(stack, "clepsydra_retry") != retry_pid
    assert "clepsydra: retry exited with code -9; restarting" in stack.output()
    group = _json(requests.get(stack.retry_url + "/v1/groups/heal-group", timeout=5), 200)
    assert group["group"] == "heal-group"
    # the console, served by the retry service's process (DEC-stack-console-hosted), with it
    assert child_pid(stack, "clepsydra_console") == child_pid(stack, "clepsydra_retry")
    wait_until(lambda: _listening(stack.url("CLEPSYDRA_CONSOLE_PORT")), 60,
               what="the console answering again")
    _assert_stops(stack, signal.SIGTERM)


def test_a_child_that_keeps_dying_is_given_up_on(
        start_stack: Callable[..., RunningStack]) -> None:
    # past --max-restarts within the window: a distinct exit code naming it
    stack = start_stack("--max-restarts", "1", "--restart-window-s", "300")
    os.kill(child_pid(stack, "clepsydra_retry"), signal.SIGKILL)
    wait_until(lambda: "clepsydra: retry restarted" in stack.output(), 30,
               what="the first restart")
    wait_until(lambda: _listening(stack.retry_url), 60, what="retry listening again")
    os.kill(child_pid(stack, "clepsydra_retry"), signal.SIGKILL)
    assert stack.proc.wait(60) == 3
    out = stack.output()
    assert "clepsydra: retry died 2 times within 300s (last exit code -9); giving up" in out
    assert "clepsydra: stopped" in out


def _listening(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False
