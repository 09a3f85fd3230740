"""The in-memory store the send-back and DLQ unit tests run against (tests/fixtures/retry.py)."""

from __future__ import annotations

import pytest

from tests.fixtures.retry import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    """One store, not a cluster (a test that wants shards makes its own)."""
    return MemoryStore()
