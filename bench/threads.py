"""Client threads of a bench: run a loop on several threads, wait for all, raise the first
error one of them met (a failed send must fail the bench, not vanish with its thread)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(loop: Callable[[int], object], threads: int) -> None:
    """``loop(index)`` on ``threads`` threads at once; returns when all have, raising the
    first exception any of them raised."""
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            loop(index)
        except BaseException as exc:  # raised below, on the caller's thread
            errors.append(exc)

    workers = [threading.Thread(target=guarded, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
