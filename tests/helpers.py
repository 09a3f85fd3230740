"""Small plain functions every suite may use (fixtures live in tests/conftest.py). Waiting for a
condition is ``tools.processes.wait_until``, the one the local stack and the benches use too."""

from __future__ import annotations

import itertools
import time

_serial = itertools.count()


def now_ms() -> int:
    """Wall-clock milliseconds, the clock of the store's born and deliver times."""
    return time.time_ns() // 1_000_000


def unique_name(*parts: str) -> str:
    """``part-part-<serial>``: a topic or group name no other call in this process makes
    (letters, digits, ``_`` and ``-``: a dot becomes ``_``)."""
    return "-".join([*parts, str(next(_serial))]).replace(".", "_")
