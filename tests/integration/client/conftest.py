"""Real parts for the client's integration tests: redis-server, the store, the retry service
and the scheduler (Celery worker + beat) as processes on free ports (the one stack builder,
tools/parts.py), one stack for the session
(starting processes is the slow part on a shared machine); every test works in its own topics
and groups. Levels are all ``1s``; consumers heartbeat every 0.3 s and the store forgets a
silent consumer after 3 s."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clepsydra_client.admin import AdminClient
from clepsydra_client.cli.main import main as cli_main
from clepsydra_client.consumer.listener import ConsumeFromWhere
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.message import Message
from clepsydra_client.producer import Producer
from clepsydra_client.settings import ensure_tracing
from clepsydra_core.runtime import telemetry
from tests.fixtures.scheduler import SCHEDULER_TEST_ENV
from tests.integration.retry.conftest import LEVELS_1S
from tools import parts
from tools.processes import HttpService, Process, free_port, wait_until

HERE = Path(__file__).resolve().parent
EXPIRY_MS = 3000
FAST = {"heartbeat_interval_s": 0.3, "persist_interval_s": 0.3, "pull_idle_max_s": 0.05,
        "consume_threads": 4}
"""Push consumer settings for tests: quick heartbeats, commits and idle pulls."""


@dataclass
class ClientStack:
    """The running parts (a :class:`tools.parts.Stack`) and what the tests ask of them."""

    parts: parts.Stack
    spans_path: Path

    @property
    def root(self) -> Path:
        return self.parts.home

    @property
    def store(self) -> HttpService:
        return self.parts.store

    @property
    def retry(self) -> HttpService:
        return self.parts.retry

    def admin(self) -> AdminClient:
        return AdminClient(self.store.url, self.retry.url)

    def start_retry(self, name: str) -> HttpService:
        """A second retry service, on a port of its own (for tests that stop it)."""
        service = self.parts.add(parts.RETRY, name=name, CLEPSYDRA_RETRY_PORT=str(free_port()))
        assert isinstance(service, HttpService)
        return service


@pytest.fixture(scope="session")
def client_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientStack]:
    root = tmp_path_factory.mktemp("client-stack")
    spans_path = root / "spans.jsonl"
    otel = {"CLEPSYDRA_OTEL_EXPORTER": f"file:{spans_path}"}
    builder = (parts.Stack(root, env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S}).with_redis()
               .with_store(CLEPSYDRA_STORE_CONSUMER_EXPIRY_MS=str(EXPIRY_MS), **otel)
               .with_retry(**otel)
               .with_scheduler(SCHEDULER_TEST_ENV, CLEPSYDRA_DELAY_LEVELS=LEVELS_1S))
    with builder.start():
        yield ClientStack(builder, spans_path)


@pytest.fixture
def stack(client_stack: ClientStack) -> ClientStack:
    return client_stack


@pytest.fixture
def admin(stack: ClientStack) -> Iterator[AdminClient]:
    client = stack.admin()
    yield client
    client.close()


@pytest.fixture
def producer(stack: ClientStack) -> Iterator[Producer]:
    p = Producer(stack.store.url)
    yield p
    p.close()


@pytest.fixture
def consumers(stack: ClientStack) -> Iterator[Callable[..., PushConsumer]]:
    """Factory: consumers(group, topic, listener, **settings) -> a started PushConsumer with
    the test settings (FAST, FIRST); every one is shut down at the end."""
    made: list[PushConsumer] = []

    def make(group: str, topic: str | None, listener: Callable[..., Any], *,
             expression: str = "*", orderly: bool = False, start: bool = True,
             retry_url: str | None = "default", **settings: Any) -> PushConsumer:
        url = stack.retry.url if retry_url == "default" else retry_url
        c = PushConsumer(group, stack.store.url, url,
                         **{**FAST, "consume_from_where": ConsumeFromWhere.FIRST, **settings})
        if topic:
            c.subscribe(topic, expression)
        if orderly:
            c.register_orderly(listener)
        else:
            c.register_concurrent(listener)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.shutdown()


class Recorder:
    """A listener that records every message it sees (thread-safe)."""

    def __init__(self, decide: Callable[[Message, Any], Any] | None = None) -> None:
        import threading

        self.lock = threading.Lock()
        self.seen: list[Message] = []
        self.decide = decide

    def __call__(self, messages: list[Message], context: Any) -> Any:
        result = None
        for m in messages:
            with self.lock:
                self.seen.append(m)
            if self.decide is not None:
                result = self.decide(m, context)
        return result

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.text for m in self.seen]

    def wait_for(self, predicate: Callable[[list[Message]], bool], timeout_s: float = 30.0,
                 what: str = "") -> None:
        def ok() -> bool:
            with self.lock:
                return predicate(list(self.seen))

        wait_until(ok, timeout_s, 0.05, what=what or "recorded messages")


@pytest.fixture
def recorder() -> Callable[..., Recorder]:
    return Recorder


@pytest.fixture
def memory_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Spans of this process's client: the SDK provider as ensure_tracing installs it, but
    sampling every trace (the default samples 1 in 100, SPEC O1), with an in-memory exporter;
    the previous provider is put back afterwards. Ask for it before the fixtures that make
    tracers (``producer``)."""
    for module, attr in ((telemetry, "_provider"), (telemetry, "_memory"),
                         (telemetry, "_exporting"), (trace, "_TRACER_PROVIDER"),
                         (trace, "_TRACER_PROVIDER_SET_ONCE")):
        monkeypatch.setattr(module, attr, getattr(module, attr))
    monkeypatch.setenv(telemetry.SAMPLER_VAR, "parentbased_always_on")
    telemetry.reset_after_fork()
    ensure_tracing("none")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the SDK tracer provider is not installed"
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    provider.shutdown()


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(stack: ClientStack) -> Callable[..., CliResult]:
    """cli("topics", "list") runs the `clepsydra` command in-process against the stack."""

    def run(*argv: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        code = cli_main(["--store-url", stack.store.url, "--retry-url", stack.retry.url,
                         *argv], out=out, err=err)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


class ConsumerProcess(Process):
    """tests/integration/client/consumer_proc.py as a child process."""

    def __init__(self, stack: ClientStack, name: str, *, group: str, topic: str, folder: Path,
                 sleep_ms: float = 0.0, env: dict[str, str] | None = None) -> None:
        self.out_path = folder / f"{name}.jsonl"
        self.status_path = folder / f"{name}.status.json"
        argv = [sys.executable, str(HERE / "consumer_proc.py"), "--store", stack.store.url,
                "--retry", stack.retry.url, "--group", group, "--topic", topic,
                "--out", str(self.out_path), "--status", str(self.status_path),
                "--sleep-ms", str(sleep_ms), "--name", name]
        super().__init__(name, argv, env=env, log_dir=folder)

    def start(self, timeout_s: float = 30.0) -> ConsumerProcess:
        super().start(timeout_s)
        wait_until(lambda: self.status() is not None or not self.alive(), 30,
                   what=f"{self.name} running")
        assert self.alive(), self.log()[-3000:]
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.status_path.read_text())
            return data
        except (FileNotFoundError, ValueError):
            return None

    def owned(self, topic: str) -> set[int]:
        status = self.status() or {}
        return {q for t, q in status.get("owned", []) if t == topic}

    def consumed(self) -> list[dict[str, Any]]:
        try:
            lines = self.out_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line torn by SIGKILL
                continue
        return out


@pytest.fixture
def consumer_procs(stack: ClientStack, tmp_path: Path) -> Iterator[Callable[..., ConsumerProcess]]:
    made: list[ConsumerProcess] = []

    def make(name: str, **kw: Any) -> ConsumerProcess:
        proc = ConsumerProcess(stack, name, folder=tmp_path, **kw)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.stop()


Names = Callable[[str], str]
Consumers = Callable[..., PushConsumer]
Recorders = Callable[..., Recorder]
Cli = Callable[..., CliResult]
ConsumerProcs = Callable[..., ConsumerProcess]
"""Types of the factory fixtures, for test signatures."""
