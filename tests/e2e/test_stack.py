"""The local stack (`python -m tools.stack`, what `make run` starts) as a black box: it becomes
ready, a delayed message goes store -> scheduler -> store, and a stop signal ends every process
it started (DESIGN.md "make run" rules)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fixtures.processes import REPO, free_port, wait_until

pytestmark = pytest.mark.e2e

READY_LINE = "clepsydra: ready"
READY_TIMEOUT_S = 120.0


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time in clock ticks) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live process below ``root``."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
            starts[int(entry.name)] = stat[2]
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            if pid in starts and pid not in found:
                found[pid] = starts[pid]
                todo.append(pid)
    return found


def still_running(pids: dict[int, int]) -> list[int]:
    """The pids of ``pids`` that are still the same process and not a zombie."""
    alive = []
    for pid, start in pids.items():
        stat = _proc_stat(pid)
        if stat is not None and stat[2] == start and stat[1] != "Z":
            alive.append(pid)
    return alive


@dataclass
class RunningStack:
    proc: subprocess.Popen[bytes]
    output_path: Path
    home: Path
    store_url: str
    retry_url: str

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def why(self) -> str:
        """The stack's own account of a failure: from its first `clepsydra:` line that is
        not a progress line (the child that died and the tail of its log) on, at most 60
        lines; the last 60 lines when it gave none."""
        lines = self.output().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("clepsydra: ") and not line.startswith(
                    ("clepsydra: starting", "clepsydra: ready", "clepsydra: stopping")):
                return "\n".join(lines[i:i + 60])
        return "\n".join(lines[-60:])

    def stop_with(self, sig: signal.Signals, timeout_s: float = 60.0) -> int:
        os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout_s)


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[Callable[..., RunningStack]]:
    """Factory: runs `python -m tools.stack` with its own CLEPSYDRA_HOME and free ports and
    returns once it printed `clepsydra: ready`; kills whatever is left at the end."""
    started: list[RunningStack] = []

    def start(*args: str, **extra_env: str) -> RunningStack:
        home = tmp_path / f"home{len(started)}"
        store_port, retry_port, redis_port = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CLEPSYDRA_") or k == "CLEPSYDRA_REDIS_SERVER"}
        env.update({
            "CLEPSYDRA_HOME": str(home),
            "CLEPSYDRA_STORE_PORT": str(store_port),
            "CLEPSYDRA_RETRY_PORT": str(retry_port),
            "CLEPSYDRA_REDIS_PORT": str(redis_port),
            "CLEPSYDRA_SCHEDULER_PORT": str(free_port()),
            "CLEPSYDRA_SCHEDULER_BEAT_PORT": str(free_port()),
            "CLEPSYDRA_ANALYTICS_PORT": str(free_port()),
            "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": str(free_port()),
            **extra_env,
        })
        output_path = tmp_path / f"stack{len(started)}.out"
        with open(output_path, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tools.stack", *args], cwd=REPO,
                                    env=env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        stack = RunningStack(proc, output_path, home, f"http://127.0.0.1:{store_port}",
                             f"http://127.0.0.1:{retry_port}")
        started.append(stack)

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"the stack exited with {proc.returncode} before it was ready:\n"
                            f"{stack.why()}")
            return READY_LINE in stack.output().splitlines()

        try:
            wait_until(ready, READY_TIMEOUT_S, interval_s=0.2, what=READY_LINE)
        except TimeoutError:
            pytest.fail(f"no `{READY_LINE}` after {READY_TIMEOUT_S}s:\n{stack.output()[-6000:]}")
        return stack

    yield start
    for stack in started:
        if stack.proc.poll() is None:
            os.killpg(stack.proc.pid, signal.SIGTERM)
            try:
                stack.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(stack.proc.pid, signal.SIGKILL)
                stack.proc.wait(10)


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


def child_pid(stack: RunningStack, module: str) -> int:
    """The pid of the stack's direct child running ``python -m module``."""
    for pid in descendants(stack.proc.pid):
        stat = _proc_stat(pid)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if stat is not None and stat[0] == stack.proc.pid and module.encode() in argv:
            return pid
    raise AssertionError(f"no child runs {module}")


def test_a_dead_child_is_restarted_alone(start_stack: Callable[..., RunningStack]) -> None:
    # issue 18.5: kill -9 of the retry service restarts it; the store and its data stay
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
    _assert_stops(stack, signal.SIGTERM)


def test_a_child_that_keeps_dying_is_given_up_on(
        start_stack: Callable[..., RunningStack]) -> None:
    # issue 18.5: past --max-restarts within the window: a distinct exit code naming it
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
