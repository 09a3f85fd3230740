"""A cluster of three store shards (DEC-store-shards) as the one stack builder starts it
(tools/parts.py, ``with_store(shards=3)``: the processes ``store``, ``store-1``, ``store-2`` on
free ports, each with its own data folder), with its own Redis; the retry service and the
scheduler when a test asks for them."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tools.parts import Stack

SHARDS = 3
LEVELS = "1s 2s 3s"
TOPIC = "orders"


class Cluster:
    """The stack and what its tests need of it."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.urls = stack.shard_urls
        self.http = requests.Session()

    @property
    def url(self) -> str:
        """Shard 0's: the one address every part and client is given."""
        return self.urls[0]

    def get(self, shard: int, path: str, **kw: Any) -> requests.Response:
        return self.http.get(self.urls[shard] + path, timeout=15, **kw)

    def post(self, shard: int, path: str, body: Any = None, **kw: Any) -> requests.Response:
        return self.http.post(self.urls[shard] + path, json=body if body is not None else {},
                              timeout=15, **kw)

    def produce(self, shard: int, topic: str, **message: Any) -> dict[str, Any]:
        answer = self.post(shard, f"/v1/topics/{topic}/messages", {"body": "x", **message})
        assert answer.status_code == 201, answer.text
        result: dict[str, Any] = answer.json()
        return result

    def name(self, shard: int) -> str:
        return "store" if shard == 0 else f"store-{shard}"

    def kill(self, shard: int) -> None:
        self.stack.by_name[self.name(shard)].kill()

    def restart(self, shard: int, *, stop: bool = False, **env: str) -> None:
        self.stack.restart(self.name(shard), stop=stop, **env)


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Factory: make_cluster(retry=False, scheduler=False, console=False, **env) starts Redis
    and three store shards (and the retry service, the scheduler, the web console given shard
    0's address only, its cookie allowed over plain HTTP); everything is stopped at the
    end."""
    stacks: list[Stack] = []

    def make(*, retry: bool = False, scheduler: bool = False, console: bool = False,
             **env: str) -> Cluster:
        stack = Stack(tmp_path / f"cluster{len(stacks)}",
                      env={"CLEPSYDRA_DELAY_LEVELS": LEVELS, **env})
        stacks.append(stack)
        stack.with_redis().with_store(shards=SHARDS)
        if retry:
            stack.with_retry()
        if scheduler:
            stack.with_scheduler(CLEPSYDRA_SCHEDULER_KEEPALIVE_S="1",
                                 CLEPSYDRA_SCHEDULER_BACKOFF_S="0.5")
        if console:
            stack.with_console(CLEPSYDRA_CONSOLE_COOKIE_SECURE="false")
        stack.start()
        return Cluster(stack)

    yield make
    for stack in reversed(stacks):
        # every part told to stop at once (three stores finish their stops side by side),
        # then each waited for (and killed if it lingers), Redis last
        for proc in stack.processes:
            if proc is not stack.redis and proc.proc is not None and proc.proc.poll() is None:
                proc.signal_group(signal.SIGTERM)
        stack.stop()


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster()

