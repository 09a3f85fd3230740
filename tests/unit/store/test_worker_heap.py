"""The store worker leaves what it built at start out of the garbage collector's full passes
(DEC-worker-gc-freeze: a 500-message batch set off full passes that walked the whole startup heap
again; ``worker.freeze_startup_objects``)."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from gunicorn.config import Config

from clepsydra_store.worker import StoreThreadWorker


class _App:
    """What gunicorn's worker asks of its application: the WSGI callable."""

    def wsgi(self) -> Any:
        return lambda environ, start_response: [b""]


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_loading_the_app_freezes_the_startup_objects() -> None:
    worker = StoreThreadWorker(0, os.getpid(), [], _App(), 30, Config(),
                               logging.getLogger("test"))
    try:
        assert gc.get_freeze_count() == 0
        worker.load_wsgi()
        assert gc.get_freeze_count() > 0
        assert worker.on_poller is None  # not the store's app: nothing answered on the poller
    finally:
        worker.tmp.close()
