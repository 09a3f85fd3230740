"""Fixtures shared by every suite: real redis-server and store processes on free ports (the
store as the one stack builder, tools/parts.py, starts it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import store_disk_quota, unique_name
from tools.parts import store_service
from tools.processes import HttpService, RedisServer


def pytest_configure(config: pytest.Config) -> None:
    """Every process a test starts from this environment gets the tests' disk quota
    (tests.helpers.store_disk_quota) unless the caller set one."""
    try:
        quota = store_disk_quota()
    except ModuleNotFoundError:  # an env without the store (k8s) starts none
        return
    for var, value in quota.items():
        os.environ.setdefault(var, value)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server for one test."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def start_store(tmp_path: Path) -> Iterator[Callable[..., HttpService]]:
    """Factory: start_store(home, port=, env=) runs the store service as a process under
    tmp_path; every store it started is stopped at the end of the test."""
    started: list[HttpService] = []

    def start(home: Path | None = None, **kwargs: Any) -> HttpService:
        service = store_service(home or tmp_path / "home", **kwargs)
        started.append(service)  # tracked first: stopped even if it never gets ready
        return service.start()

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic/group names for one test: ``names("topic")`` is ``topic-<test>-<serial>``,
    the same name for the same kind within the test."""
    stem = unique_name(request.node.name.replace("test_", "").replace("[", "_")
                       .replace("]", "")[:40])
    return lambda kind: f"{kind}-{stem}"
