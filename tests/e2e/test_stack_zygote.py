"""The local stack's fork server (DEC-stack-zygote) as real processes: the services it forks are
the supervisor's children as exec'd ones are (parent, process group, command line, log file),
the zygote exits once the stack is ready and a killed service is restarted, forked from a
zygote started again for it (DEC-zygote-retires); kept (``CLEPSYDRA_STACK_KEEP_ZYGOTE``), a
killed zygote is restarted while the services keep running; ``--no-fork`` execs every service
as before."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.fixtures.stack import RunningStack, child_pid, descendants, still_running
from tools.processes import wait_until

pytestmark = pytest.mark.e2e

SERVICES = ("clepsydra_store", "clepsydra_retry", "clepsydra_scheduler", "clepsydra_console",
            "clepsydra_gateway")
HOST = {"clepsydra_retry": "tools.host", "clepsydra_console": "tools.host"}
"""Served by one process by default (tools/host.py, DEC-stack-console-hosted)."""


def _cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [arg.decode() for arg in raw.split(b"\0") if arg]


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _zygote_pid(stack: RunningStack) -> int | None:
    for pid in descendants(stack.proc.pid):
        try:
            if _cmdline(pid)[1:3] == ["-m", "tools.zygote"]:
                return pid
        except (FileNotFoundError, IndexError):
            continue
    return None


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _arg_area(pid: int) -> tuple[int, int]:
    """Where its command line lies (arg_start, arg_end: /proc/pid/stat fields 48 and 49)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[45]), int(fields[46])


def _forked(pid: int, zygote: int | None = None) -> bool:
    """Forked by a zygote, not exec'd: a fork keeps its parent's command-line area, the
    zygote's, longer than the service's own command line written over it (an exec'd
    interpreter's is exactly its own); with ``zygote``, by that one: the area starts where the
    zygote's does (an exec'd interpreter's stack is placed anew, address-space randomisation)."""
    start, end = _arg_area(pid)
    own = len(Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0")) + 1
    if zygote is not None and start != _arg_area(zygote)[0]:
        return False
    return end - start > own


def _check_forked_services(stack: RunningStack, zygote: int | None) -> None:
    for module in SERVICES:
        pid = child_pid(stack, module)  # the supervisor's direct child
        assert _ppid(pid) == stack.proc.pid
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # a session of its own
        assert _cmdline(pid)[:3] == [sys.executable, "-m", HOST.get(module, module)]
        assert _forked(pid, zygote), f"{module} was exec'd, not forked"
        # its environment as /proc shows it is its own, not the zygote's
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"CLEPSYDRA_HOME={stack.home}".encode() in environ
        assert not any(var.startswith(b"CLEPSYDRA_ZYGOTE_ROOM=") for var in environ)


def _restart_retry(stack: RunningStack, times: int) -> int:
    """Kill the retry service; once it is back and healthy, its new pid."""
    retry = child_pid(stack, "clepsydra_retry")
    os.kill(retry, signal.SIGKILL)
    wait_until(lambda: stack.output().count("clepsydra: retry restarted") == times, 60,
               what="the retry service's restart")
    wait_until(lambda: _healthy(stack.retry_url), 60, what="retry healthy again")
    again = child_pid(stack, "clepsydra_retry")
    assert again != retry and _ppid(again) == stack.proc.pid
    return again


def test_the_zygote_exits_once_ready_and_a_restart_is_forked_from_a_new_one(
        start_stack: Callable[..., RunningStack]) -> None:
    # DEC-zygote-retires: once every service is ready the zygote is gone (its own pages given
    # back); a killed service is restarted, forked from a zygote started again for it, which
    # exits too; the services keep running meanwhile
    stack = start_stack("--without-analytics", CLEPSYDRA_STORE_SHARDS="2")
    assert "clepsydra: the zygote exited: every service is ready" in stack.output()
    assert _zygote_pid(stack) is None
    assert "clepsydra zygote:" in (stack.home / "logs" / "zygote.log").read_text()
    _check_forked_services(stack, None)
    # each store shard its own settings (DEC-store-shards) and its own log file
    shards = {}
    for pid in descendants(stack.proc.pid):
        if _ppid(pid) == stack.proc.pid and "clepsydra_store" in _cmdline(pid):
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            shard = [v for v in environ if v.startswith(b"CLEPSYDRA_STORE_SHARD_ID=")]
            shards[shard[0].split(b"=")[1].decode()] = os.readlink(f"/proc/{pid}/fd/1")
    logs = stack.home / "logs"
    assert shards == {"0": str(logs / "store.log"), "1": str(logs / "store-1.log")}
    assert (logs / "store.log").stat().st_size > 0
    assert "started as a new interpreter" not in stack.output()

    store = child_pid(stack, "clepsydra_store")
    for times in (1, 2):  # twice: the zygote started again exits each time
        again = _restart_retry(stack, times)
        assert child_pid(stack, "clepsydra_console") == again  # served by it again
        wait_until(lambda: _healthy(stack.url("CLEPSYDRA_CONSOLE_PORT")), 60,
                   what="the console healthy again")
        assert _forked(again), "the restarted retry service was exec'd, not forked"
        assert stack.output().count("clepsydra: starting a zygote again to fork "
                                    "tools.host") == times
        wait_until(lambda: _zygote_pid(stack) is None, 30, what="the new zygote's exit")
        assert stack.output().count("clepsydra: the zygote exited: tools.host forked") \
            == times
    assert "clepsydra: retry exited with code -9; restarting" in stack.output()
    assert child_pid(stack, "clepsydra_store") == store
    assert _healthy(stack.store_url)
    assert "started as a new interpreter" not in stack.output()

    everything = descendants(stack.proc.pid)
    assert stack.stop_with(signal.SIGTERM) == 0, stack.output()[-4000:]
    wait_until(lambda: not still_running(everything), 10.0,
               what="every process of the stack to exit")


def test_a_kept_zygote_forks_restarts_and_is_started_again_when_killed(
        start_stack: Callable[..., RunningStack]) -> None:
    # CLEPSYDRA_STACK_KEEP_ZYGOTE=true (bench.stack_memory --pages): DEC-stack-zygote as it was
    stack = start_stack("--without-analytics", CLEPSYDRA_STACK_KEEP_ZYGOTE="true")
    zygote = _zygote_pid(stack)
    assert zygote is not None, stack.output()[-3000:]
    assert _ppid(zygote) == stack.proc.pid
    assert "the zygote exited" not in stack.output()
    _check_forked_services(stack, zygote)

    # a killed forked service is restarted by the supervisor, forked again by the same zygote
    assert _forked(_restart_retry(stack, 1), zygote)
    assert "starting a zygote again" not in stack.output()

    # a killed zygote is started again; the services it forked keep running
    before = {module: child_pid(stack, module) for module in SERVICES}
    os.kill(zygote, signal.SIGKILL)
    wait_until(lambda: (_zygote_pid(stack) or zygote) != zygote, 30,
               what="a new zygote")
    assert "clepsydra: the zygote exited with code -9; restarting it" in stack.output()
    assert {module: child_pid(stack, module) for module in SERVICES} == before
    assert _healthy(stack.store_url) and _healthy(stack.retry_url)
    # and the new one forks: a service killed now comes back from it
    new_zygote = _zygote_pid(stack)
    assert new_zygote is not None
    assert _forked(_restart_retry(stack, 2), new_zygote)
    assert "started as a new interpreter" not in stack.output()

    everything = descendants(stack.proc.pid)
    assert stack.stop_with(signal.SIGTERM) == 0, stack.output()[-4000:]
    wait_until(lambda: not still_running(everything), 10.0,
               what="every process of the stack to exit")


def test_no_fork_execs_every_service(start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack("--without-analytics", "--no-fork")
    assert _zygote_pid(stack) is None
    assert not (stack.home / "logs" / "zygote.log").exists()
    for module in SERVICES:
        pid = child_pid(stack, module)
        assert _ppid(pid) == stack.proc.pid
        assert os.getpgid(pid) == pid
        assert _cmdline(pid)[:3] == [sys.executable, "-m", HOST.get(module, module)]
    assert stack.stop_with(signal.SIGTERM) == 0, stack.output()[-4000:]


def test_the_fork_switch_is_read_from_the_environment(
        start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack("--without-analytics", CLEPSYDRA_STACK_FORK="off")
    assert _zygote_pid(stack) is None
    assert stack.stop_with(signal.SIGTERM) == 0, stack.output()[-4000:]
