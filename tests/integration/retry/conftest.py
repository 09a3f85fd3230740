"""Real parts for the retry service's integration tests: redis-server, the store, the retry
service (``python -m clepsydra_retry``) and the scheduler (Celery worker + beat), as processes on
free ports from the one stack builder (tools/parts.py), with an all-``1s`` level table so a
full 16-step ladder fits in a test.

One stack serves the whole module set (starting processes is the slow part on a shared 2-core
machine); every test works in its own group and topic, so tests do not see each other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_retry.app import create_app
from clepsydra_retry.settings import RetrySettings
from tests.fixtures.otlp import OtlpReceiver
from tools import parts
from tools.processes import HttpService, Process, RedisServer, wait_until

LEVELS_1S = " ".join(["1s"] * 18)


def enc(topic: str) -> str:
    """Topic names travel as percent-encoded path segments."""
    return quote(topic, safe="")


SCHEDULER_ENV = {"CLEPSYDRA_SCHEDULER_KEEPALIVE_S": "1", "CLEPSYDRA_SCHEDULER_POLL_MS": "100",
                 "CLEPSYDRA_SCHEDULER_BACKOFF_S": "1"}
"""The scheduler's settings in these tests: quick keep-alives and polls."""


def retry_service(home: Path, *, store_url: str, redis_url: str,
                  env: dict[str, str] | None = None) -> HttpService:
    """The retry service alone (not started), with the all-``1s`` levels."""
    return parts.service(parts.RETRY, home, store_url=store_url, redis_url=redis_url,
                         env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S, **(env or {})})


@dataclass
class RetryStack:
    """HTTP helpers over the running parts (a :class:`tools.parts.Stack`)."""

    parts: parts.Stack
    spans_path: Path
    http: requests.Session = field(default_factory=requests.Session)

    @property
    def store(self) -> HttpService:
        return self.parts.store

    @property
    def retry(self) -> HttpService:
        return self.parts.retry

    @property
    def redis(self) -> RedisServer:
        assert self.parts.redis is not None
        return self.parts.redis

    # ---- store ---------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 1) -> None:
        resp = self.http.post(f"{self.store.url}/v1/topics", json={"name": name,
                                                                    "queues": queues})
        assert resp.status_code in (200, 201), resp.text

    def produce(self, topic: str, body: str = "hello", **fields: Any) -> dict[str, Any]:
        resp = self.http.post(f"{self.store.url}/v1/topics/{enc(topic)}/messages",
                              json={"body": body, **fields})
        assert resp.status_code == 201, resp.text
        result: dict[str, Any] = resp.json()
        return result

    def message(self, commitlog_offset: int) -> dict[str, Any]:
        resp = self.http.get(f"{self.store.url}/v1/commitlog/{commitlog_offset}")
        assert resp.status_code == 200, resp.text
        result: dict[str, Any] = resp.json()
        return result

    def copies(self, msg_id: str) -> list[dict[str, Any]]:
        """Every stored copy of the message, oldest first."""
        resp = self.http.get(f"{self.store.url}/v1/messages/{msg_id}")
        assert resp.status_code == 200, resp.text
        found: list[dict[str, Any]] = resp.json()["messages"]
        return found

    def by_msg_id(self, msg_id: str) -> dict[str, Any]:
        """The newest copy of the message (a msgId names every copy of it)."""
        resp = self.http.get(f"{self.store.url}/v1/messages/{msg_id}")
        assert resp.status_code == 200, resp.text
        found: dict[str, Any] = resp.json()
        return found["messages"][-1] if "messages" in found else found

    def topic(self, name: str) -> dict[str, Any] | None:
        resp = self.http.get(f"{self.store.url}/v1/topics/{enc(name)}")
        if resp.status_code == 404:
            return None
        assert resp.status_code == 200, resp.text
        result: dict[str, Any] = resp.json()
        return result

    def pull(self, topic: str, queue_id: int = 0, offset: int = 0,
             max_count: int = 32) -> list[dict[str, Any]]:
        resp = self.http.get(f"{self.store.url}/v1/topics/{enc(topic)}/queues/{queue_id}/"
                             f"messages", params={"offset": offset, "max": max_count})
        if resp.status_code == 404:
            return []
        assert resp.status_code == 200, resp.text
        messages: list[dict[str, Any]] = resp.json()["messages"]
        return messages

    def pull_all(self, topic: str) -> list[dict[str, Any]]:
        info = self.topic(topic)
        if info is None:
            return []
        out: list[dict[str, Any]] = []
        for queue in info["queues"]:
            out += self.pull(topic, queue["queueId"], queue["minOffset"], 1000)
        return out

    def wait_message(self, topic: str, queue_id: int, offset: int,
                     timeout_s: float = 20.0) -> dict[str, Any]:
        """Block until the queue holds an entry at ``offset`` (the scheduler delivers it)."""
        found: list[dict[str, Any]] = []

        def arrived() -> bool:
            found[:] = self.pull(topic, queue_id, offset, 1)
            return bool(found)

        wait_until(arrived, timeout_s, 0.05, what=f"{topic}[{queue_id}]@{offset}")
        return found[0]

    def written(self, group: str, *topics: str) -> int:
        """A fingerprint of what a test could have written: the entries of the schedule
        topic, the group's retry and DLQ topics and the given topics (the scheduler may be
        delivering other tests' retries meanwhile, so not the whole store)."""
        total = 0
        for name in (naming.SCHEDULE_TOPIC, naming.retry_topic(group), naming.dlq_topic(group),
                     *topics):
            info = self.topic(name)
            total += sum(q["maxOffset"] for q in info["queues"]) if info else 0
        return total

    # ---- retry service -------------------------------------------------------------------
    def put_group(self, group: str, **settings: int) -> requests.Response:
        return self.http.put(f"{self.retry.url}/v1/groups/{group}", json=settings)

    def send_back(self, group: str, **body: Any) -> requests.Response:
        return self.http.post(f"{self.retry.url}/v1/groups/{group}/send-back", json=body)

    def ok_send_back(self, group: str, **body: Any) -> dict[str, Any]:
        resp = self.send_back(group, **body)
        assert resp.status_code == 200, resp.text
        result: dict[str, Any] = resp.json()
        return result

    def dlq(self, group: str, **params: Any) -> dict[str, Any]:
        resp = self.http.get(f"{self.retry.url}/v1/groups/{group}/dlq", params=params)
        assert resp.status_code == 200, resp.text
        result: dict[str, Any] = resp.json()
        return result

    def dlq_ids(self, group: str, **params: Any) -> list[str]:
        return [m["msgId"] for m in self.dlq(group, max=1000, **params)["messages"]]

    def spans(self) -> list[dict[str, Any]]:
        if not self.spans_path.exists():
            return []
        return [json.loads(line) for line in self.spans_path.read_text().splitlines() if line]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RetryStack]:
    """Redis, store and retry service, shared by the retry integration tests."""
    root = tmp_path_factory.mktemp("retry-stack")
    spans_path = root / "spans.jsonl"
    # the store exports nothing, but its new traces (raw produce requests) are the ones the
    # retry service's spans continue: all sampled (the default samples 1 in 100)
    builder = (parts.Stack(root, env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S}).with_redis()
               .with_store(OTEL_TRACES_SAMPLER="parentbased_always_on")
               .with_retry(CLEPSYDRA_OTEL_EXPORTER=f"file:{spans_path}"))
    with builder.start():
        stack = RetryStack(builder, spans_path=spans_path)
        yield stack
        stack.http.close()  # open keep-alive connections would hold up gunicorn's stop


def add_scheduler(builder: parts.Stack, **env: str) -> list[Process]:
    """The scheduler's worker and beat added to a running stack (the worker ready first)."""
    return [builder.add(part, **SCHEDULER_ENV, **env) for part in parts.SCHEDULER]


@pytest.fixture(scope="session")
def scheduler(stack: RetryStack) -> Iterator[list[Process]]:
    """The scheduler (Celery worker + beat) delivering the stack's delayed messages."""
    processes = add_scheduler(stack.parts)
    yield processes
    for process in processes:
        process.stop()


@dataclass
class TracedStack:
    """Store, retry service and scheduler exporting OTLP to a receiver in this process."""

    receiver: OtlpReceiver
    store: HttpService
    retry: HttpService


OTLP_TEST_RESOURCE = "deployment.environment.name=trace-test"
"""OTEL_RESOURCE_ATTRIBUTES given to every traced process (the resource must carry it)."""


@pytest.fixture(scope="module")
def traced_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedStack]:
    """Its own Redis, store, retry service and scheduler (worker + beat), every one exporting
    its spans over OTLP/HTTP to an :class:`OtlpReceiver` (SPEC O1)."""
    root = tmp_path_factory.mktemp("traced-stack")
    receiver = OtlpReceiver().start()
    otel = {"CLEPSYDRA_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_RESOURCE_ATTRIBUTES": OTLP_TEST_RESOURCE,
            # every trace, hand-over batches included (otlp's default samples 1 in 100)
            "OTEL_TRACES_SAMPLER": "parentbased_always_on"}
    builder = (parts.Stack(root, env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S, **otel})
               .with_redis().with_store().with_retry().with_scheduler(SCHEDULER_ENV))
    try:
        with builder.start():
            yield TracedStack(receiver=receiver, store=builder.store, retry=builder.retry)
    finally:
        receiver.stop()


@pytest.fixture
def app_client(stack: RetryStack) -> Iterator[FlaskClient]:
    """The retry app in this process (Flask test client) over the stack's Redis and store:
    for bad input, and to read what it left in Redis."""
    settings = RetrySettings.for_test(stack.store.url, stack.redis.url,
                                      CLEPSYDRA_DELAY_LEVELS=LEVELS_1S)
    app = create_app(settings)
    yield app.test_client()
    app.extensions["clepsydra_retry"].store.close()
    app.extensions["clepsydra_retry"].redis.close()
