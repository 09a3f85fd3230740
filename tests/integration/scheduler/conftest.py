"""Integration fixtures for the scheduler: a real redis-server, a real store process (levels
``1s 2s 3s``), and real Celery worker / beat processes started on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.scheduler import STORE_LEVELS, TOPIC, SchedulerStack, StoreApi
from tools.processes import HttpService, RedisServer


@pytest.fixture
def stack(tmp_path: Path, redis_server: RedisServer,
          start_store: Callable[..., HttpService]) -> Iterator[SchedulerStack]:
    store = start_store(tmp_path / "store-home", env={"CLEPSYDRA_DELAY_LEVELS": STORE_LEVELS})
    api = StoreApi(store.url)
    api.create_topic(TOPIC, 2)
    s = SchedulerStack(tmp_path, redis_server, start_store, store, api)
    yield s
    s.stop_all()
    s.api.close()
