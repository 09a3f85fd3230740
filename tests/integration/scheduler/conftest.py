"""Integration fixtures for the scheduler: a real redis-server, a real store process (levels
``1s 2s 3s``) from the one stack builder (tools/parts.py), and real Celery worker / beat
processes added to it on demand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.scheduler import STORE_LEVELS, TOPIC, SchedulerStack, StoreApi
from tools.parts import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[SchedulerStack]:
    with Stack(tmp_path / "stack").with_redis().with_store(
            CLEPSYDRA_DELAY_LEVELS=STORE_LEVELS).start() as parts:
        api = StoreApi(parts.store.url)
        api.create_topic(TOPIC, 2)
        s = SchedulerStack(parts, api)
        yield s
        s.api.close()
