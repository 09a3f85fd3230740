"""The one stack builder: each part is defined once in tools/parts.py, and
``make run`` (tools/stack.py) starts exactly those definitions; no process is started here."""

from __future__ import annotations

import io
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tools import parts
from tools.parts import (
    EVERYTHING,
    EVERYTHING_SEPARATE_BEAT,
    RETRY_WITH_CONSOLE,
    SCHEDULER_WITH_BEAT,
    SCHEDULER_WORKER,
    STORE,
    Stack,
)
from tools.processes import REPO, Console, HttpService, free_port
from tools.stack import StackSettings, Supervisor


def test_every_part_is_told_where_the_others_are(tmp_path: Path) -> None:
    stack = (Stack(tmp_path, redis_url="redis://127.0.0.1:1/0", base_env={})
             .with_store().with_retry().with_scheduler())
    env = stack.shared_env()
    store_port = stack.ports["CLEPSYDRA_STORE_PORT"]
    assert env["CLEPSYDRA_HOME"] == str(tmp_path)
    assert env["CLEPSYDRA_REDIS_URL"] == "redis://127.0.0.1:1/0"
    assert env["CLEPSYDRA_STORE_URL"] == f"http://127.0.0.1:{store_port}"
    assert env["CLEPSYDRA_RETRY_URL"] == stack.url(parts.RETRY)
    # several workers on one machine: no health servers unless asked for
    assert env["CLEPSYDRA_SCHEDULER_PORT"] == env["CLEPSYDRA_SCHEDULER_BEAT_PORT"] == "0"
    names = [child.name for child in stack.children()]
    assert names == ["store", "retry", "scheduler-worker", "scheduler-beat"]
    store = stack.children()[0]
    assert isinstance(store, HttpService) and store.port == store_port
    assert store.argv[1:] == ["-m", "clepsydra_store"]
    assert store.log_path == tmp_path / "logs" / "store.log"


def test_readiness_is_the_health_port_when_given_else_the_log_line(tmp_path: Path) -> None:
    assert SCHEDULER_WORKER.health_url({"CLEPSYDRA_SCHEDULER_PORT": "0"}) is None
    assert SCHEDULER_WORKER.health_url(
        {"CLEPSYDRA_SCHEDULER_PORT": "8183"}) == "http://127.0.0.1:8183"
    stack = Stack(tmp_path, redis_url="redis://127.0.0.1:1/0", base_env={})
    worker = stack.process(SCHEDULER_WORKER, CLEPSYDRA_SCHEDULER_PORT="0")
    worker.log_path.parent.mkdir(parents=True)
    worker.log_path.write_text('{"message": "celery@x ready."}\n')
    assert not worker.ready(worker)
    worker.log_path.write_text('{"message": "scheduler worker ready levels=3"}\n')
    assert worker.ready(worker)
    assert isinstance(stack.process(SCHEDULER_WORKER, CLEPSYDRA_SCHEDULER_PORT="8183"),
                      HttpService)


def test_make_run_starts_the_builders_parts(tmp_path: Path) -> None:
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:1/0",
           "CLEPSYDRA_STORE_PORT": "18081", "PATH": "/usr/bin",
           "CLEPSYDRA_STACK_HOST_CONSOLE": "false"}
    supervisor = Supervisor(StackSettings.from_env(env), env=env,
                            console=Console(io.StringIO()), echo=False)
    children = supervisor.planned()
    assert [c.name for c in children] == [p.name for p in EVERYTHING] == [
        "store", "retry", "scheduler", "gateway", "analytics", "console"]
    assert [c.argv for c in children] == [p.argv() for p in EVERYTHING]
    store = children[0]
    assert isinstance(store, HttpService) and store.port == 18081
    assert store.health_url == store.env[STORE.url_var or ""] == "http://127.0.0.1:18081"
    # the parts' environment is make run's: the resolved settings, one home for all
    assert all(c.env["CLEPSYDRA_HOME"] == str(tmp_path) for c in children)
    assert all(c.env["CLEPSYDRA_REDIS_URL"] == "redis://127.0.0.1:1/0" for c in children)
    # the scheduler is one process, its beat a thread of its worker, answering the
    # worker's health port and beat's
    scheduler = {c.name: c for c in children}["scheduler"]
    assert scheduler.argv[1:] == ["-m", "clepsydra_scheduler", "worker", "--beat"]
    assert (scheduler.env["CLEPSYDRA_SCHEDULER_PORT"],
            scheduler.env["CLEPSYDRA_SCHEDULER_BEAT_PORT"]) == ("8083", "8084")
    # ... and the analytics is one process: the API, with the schedule's worker and the
    # exporter on threads of it (ready when the API answers; the exporter on its own port)
    analytics = {c.name: c for c in children}["analytics"]
    assert analytics.argv[1:] == ["-m", "clepsydra_analytics", "serve", "--schedule",
                                  "--export"]
    assert isinstance(analytics, HttpService) and analytics.port == 8085
    assert analytics.env["CLEPSYDRA_ANALYTICS_EXPORTER_PORT"] == "8086"
    # the web console on its own port, told where the store and the retry service are
    console = {c.name: c for c in children}["console"]
    assert console.argv[1:] == ["-m", "clepsydra_console"]
    assert isinstance(console, HttpService) and console.port == 8087
    assert console.env["CLEPSYDRA_STORE_URL"] == "http://127.0.0.1:18081"
    # the RocketMQ 5 gateway: gRPC on 8088, ready when its health port (8089) answers
    gateway = {c.name: c for c in children}["gateway"]
    assert gateway.argv[1:] == ["-m", "clepsydra_gateway"]
    assert isinstance(gateway, HttpService) and gateway.port == 8089
    assert gateway.env["CLEPSYDRA_GATEWAY_PORT"] == "8088"


def test_the_separate_beat_stack_runs_beat_as_a_process_as_deployed(tmp_path: Path) -> None:
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:1/0",
           "PATH": "/usr/bin", "CLEPSYDRA_STACK_HOST_CONSOLE": "false"}
    supervisor = Supervisor(StackSettings.from_env(env), env=env, console=Console(io.StringIO()),
                            echo=False, separate_beat=True)
    children = supervisor.planned()
    assert [c.name for c in children] == [p.name for p in EVERYTHING_SEPARATE_BEAT] == [
        "store", "retry", "scheduler-worker", "scheduler-beat", "gateway", "analytics",
        "console"]
    assert SCHEDULER_WITH_BEAT not in EVERYTHING_SEPARATE_BEAT


def test_make_run_runs_the_one_worker_services_without_a_gunicorn_master(
        tmp_path: Path) -> None:
    """DEC-memory-at-rest: make run gives every child
    CLEPSYDRA_SINGLE_PROCESS=true, so the store, the retry service and the analytics API each
    run gunicorn's worker in their own process; a value the user set wins (the fault matrix
    keeps the masters, as deployed)."""
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:1/0",
           "PATH": "/usr/bin", "CLEPSYDRA_STACK_HOST_CONSOLE": "false"}
    children = Supervisor(StackSettings.from_env(env), env=env, console=Console(io.StringIO()),
                          echo=False).planned()
    assert {c.name: c.env["CLEPSYDRA_SINGLE_PROCESS"] for c in children
            if c.name in ("store", "retry", "analytics", "console")} == {
        "store": "true", "retry": "true", "analytics": "true", "console": "true"}
    kept = {**env, "CLEPSYDRA_SINGLE_PROCESS": "false"}
    children = Supervisor(StackSettings.from_env(kept), env=kept,
                          console=Console(io.StringIO()), echo=False).planned()
    assert {c.env["CLEPSYDRA_SINGLE_PROCESS"] for c in children} == {"false"}


def test_make_run_core_starts_no_analytics_part(tmp_path: Path) -> None:
    # DEC-memory-at-rest: `make run-core` (--without-analytics) is the core alone,
    # with the console (it needs no Java either)
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:1/0",
           "PATH": "/usr/bin", "CLEPSYDRA_STACK_HOST_CONSOLE": "false"}
    for separate_beat, names in ((False, ["store", "retry", "scheduler", "gateway", "console"]),
                                 (True, ["store", "retry", "scheduler-worker", "scheduler-beat",
                                         "gateway", "console"])):
        supervisor = Supervisor(StackSettings.from_env(env), env=env,
                                console=Console(io.StringIO()), echo=False,
                                separate_beat=separate_beat, analytics=False)
        assert [c.name for c in supervisor.planned()] == names
        assert "analytics not started" in " ".join(supervisor.address_table().split())


def test_each_scheduler_worker_is_named_by_its_slot_in_the_stack(tmp_path: Path) -> None:
    # DEC-scheduler-lease: a worker's name in its leases is its slot, the same each time the
    # stack (re)starts it, so a restarted worker takes its own levels back at once; two
    # workers of one stack are two names; a name given by the caller or the environment wins
    stack = Stack(tmp_path, redis_url="redis://127.0.0.1:1/0", base_env={})
    first = stack.process(SCHEDULER_WORKER, name="worker-a")
    again = stack.process(SCHEDULER_WORKER, name="worker-a")
    other = stack.process(SCHEDULER_WORKER, name="worker-b")
    with_beat = stack.process(SCHEDULER_WITH_BEAT)
    var = "CLEPSYDRA_SCHEDULER_WORKER_ID"
    assert first.env[var] == again.env[var] == "worker-a" != other.env[var] == "worker-b"
    assert with_beat.env[var] == "scheduler"
    assert stack.process(SCHEDULER_WORKER, name="w", **{var: "given"}).env[var] == "given"
    named = Stack(tmp_path, redis_url="redis://127.0.0.1:1/0", base_env={var: "mine"})
    assert named.process(SCHEDULER_WORKER, name="w").env[var] == "mine"  # the environment's
    assert var not in stack.process(STORE).env


def _health_server(port: int, status: int) -> ThreadingHTTPServer:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_make_run_serves_the_console_from_the_retry_services_process(tmp_path: Path) -> None:
    # DEC-stack-console-hosted: by default one process (tools/host.py) serves the retry
    # service and the console, each on its own port, ready once both answer /healthz; with
    # CLEPSYDRA_AUTH=on or CLEPSYDRA_STACK_HOST_CONSOLE=false the console is its own process
    retry_port, console_port = free_port(), free_port()
    env = {"CLEPSYDRA_HOME": str(tmp_path), "CLEPSYDRA_REDIS_URL": "redis://127.0.0.1:1/0",
           "PATH": "/usr/bin", "CLEPSYDRA_RETRY_PORT": str(retry_port),
           "CLEPSYDRA_CONSOLE_PORT": str(console_port)}
    supervisor = Supervisor(StackSettings.from_env(env), env=env,
                            console=Console(io.StringIO()), echo=False)
    children = {c.name: c for c in supervisor.planned()}
    assert list(children) == ["store", "retry", "scheduler", "gateway", "analytics"]
    host = children["retry"]
    assert host.argv[1:] == ["-m", "tools.host", "clepsydra_retry", "clepsydra_console"]
    assert host.argv == RETRY_WITH_CONSOLE.argv()
    assert host.env["CLEPSYDRA_CONSOLE_PORT"] == str(console_port)
    assert children["store"].env["CLEPSYDRA_CONSOLE_URL"] == f"http://127.0.0.1:{console_port}"
    assert str(REPO) in host.env["PYTHONPATH"].split(os.pathsep)  # tools is not installed
    assert supervisor.console_url == f"http://127.0.0.1:{console_port}"
    described = supervisor._ready_what(host)
    assert f":{retry_port}/healthz" in described and f":{console_port}/healthz" in described
    # ready when both ports answer, not one
    retry = _health_server(retry_port, 200)
    try:
        assert not host.ready(host)
        console = _health_server(console_port, 503)
        try:
            assert not host.ready(host)
        finally:
            console.shutdown()
            console.server_close()
        console = _health_server(console_port, 200)
        try:
            assert host.ready(host)
        finally:
            console.shutdown()
            console.server_close()
    finally:
        retry.shutdown()
        retry.server_close()
    for apart in ({"CLEPSYDRA_STACK_HOST_CONSOLE": "false"},
                  {"CLEPSYDRA_AUTH": "on", "CLEPSYDRA_AUTH_ADMIN_TOKEN": "x" * 32},
                  {"CLEPSYDRA_SINGLE_PROCESS": "false"}, {"CLEPSYDRA_RETRY_WORKERS": "2"}):
        own = {**env, **apart}
        names = [c.name for c in Supervisor(StackSettings.from_env(own), env=own,
                                            console=Console(io.StringIO()),
                                            echo=False).planned()]
        assert names == ["store", "retry", "scheduler", "gateway", "analytics", "console"]
