"""The e2e suite's fixture: a local stack of its own per call (tests/fixtures/stack.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.stack import RunningStack, stack_factory


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[Callable[..., RunningStack]]:
    """Factory: `python -m tools.stack` with its own CLEPSYDRA_HOME and ports, returned once
    ready; whatever is left is killed at the end."""
    yield from stack_factory(tmp_path)
