"""Unit fixtures for the scheduler: virtual clock, in-memory store and offset store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from clepsydra_scheduler.delivery import DeliveryConfig, LevelDelivery
from clepsydra_scheduler.level_state import MemoryLevelState
from clepsydra_scheduler.ports import WorkerIdentity
from tests.fixtures.scheduler import FakeClock, FakeStore

DELAYS_MS = [1_000, 2_000, 3_000]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> FakeStore:
    return FakeStore(DELAYS_MS, clock.now_ms)


@pytest.fixture
def offsets(clock: FakeClock) -> MemoryLevelState:
    return MemoryLevelState(clock.now_ms)


@pytest.fixture
def worker(offsets: MemoryLevelState) -> WorkerIdentity:
    """This test's worker process: name ``pod-a/worker``, its first incarnation."""
    return WorkerIdentity("pod-a/worker", offsets.incarnation())


@pytest.fixture
def delivery(clock: FakeClock, store: FakeStore, offsets: MemoryLevelState,
             worker: WorkerIdentity) -> Callable[..., LevelDelivery]:
    """delivery(level=1, worker=None, **config) -> a LevelDelivery over the fakes (run_s 10 by
    default), run by ``worker`` (default: the ``worker`` fixture's)."""

    def make(level: int = 1, worker: WorkerIdentity | None = None,
             **config: Any) -> LevelDelivery:
        values: dict[str, Any] = {"run_s": 10.0, "lease_ms": 3_000, "batch": 100,
                                  "poll_ms": 200, "backoff_s": 2.0, **config}
        cfg = DeliveryConfig(level=level, delay_ms=DELAYS_MS[level - 1], **values)
        return LevelDelivery(cfg, store, offsets, clock, worker=worker or default)

    default = worker

    return make
