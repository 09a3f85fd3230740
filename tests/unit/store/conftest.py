"""Fixtures for the store engine tests: real files under tmp_path, tiny segments."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clepsydra_core.levels import DelayLevels
from clepsydra_store.engine.config import EngineConfig
from clepsydra_store.engine.message_store import MessageStore

SEGMENT_BYTES = 64 * 1024
OpenStore = Callable[..., MessageStore]


def engine_config(data_dir: Path, **overrides: Any) -> EngineConfig:
    levels = overrides.pop("levels", None)
    if levels is not None:
        overrides["delay_levels"] = DelayLevels.parse(levels)
    values: dict[str, Any] = {"segment_size_bytes": SEGMENT_BYTES, "cq_entries_per_file": 64,
                              "flush_interval_ms": 50}
    values.update(overrides)
    return EngineConfig(data_dir=data_dir, **values)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def open_store(data_dir: Path) -> Iterator[OpenStore]:
    """open_store(**config overrides) opens a MessageStore on ``data_dir``; every store opened
    is closed at the end (closing twice is fine)."""
    opened: list[MessageStore] = []

    def open_(**overrides: Any) -> MessageStore:
        store = MessageStore(engine_config(data_dir, **overrides))
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()
