"""The engine's held pulls (engine/index/arrivals.py) and their bound's setting: an append
wakes the pulls held on its queue only, the bound refuses past it, a release frees a place,
close wakes every held pull and refuses new ones; a live append through the MessageStore
wakes a held pull of its queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from clepsydra_core.errors import ConfigError
from clepsydra_store.engine.index.arrivals import Arrivals
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.settings import StoreSettings
from tests.unit.store.conftest import OpenStore


def test_an_append_wakes_the_pulls_held_on_its_queue_only() -> None:
    arrivals = Arrivals()
    a, b = arrivals.hold("T", 0, 4), arrivals.hold("T", 1, 4)
    assert a is not None and b is not None and arrivals.held == 2
    arrivals.notify("T", 1)
    assert b.event.is_set() and not a.event.is_set()
    arrivals.release(b)
    arrivals.release(b)  # twice: counted once
    assert arrivals.held == 1 and set(arrivals.waiting) == {("T", 0)}


def test_the_bound_refuses_past_it_and_a_release_frees_a_place() -> None:
    arrivals = Arrivals()
    first = arrivals.hold("T", 0, 1)
    assert first is not None and arrivals.hold("T", 0, 1) is None
    arrivals.release(first)
    assert arrivals.hold("T", 0, 1) is not None
    assert Arrivals().hold("T", 0, 0) is None  # CLEPSYDRA_STORE_PULL_HOLD_MAX=0


def test_close_wakes_every_held_pull_and_holds_no_more() -> None:
    arrivals = Arrivals()
    held = [arrivals.hold("T", q, 4) for q in range(3)]
    arrivals.close()
    assert all(h is not None and h.event.is_set() for h in held)
    assert arrivals.hold("T", 0, 4) is None


def test_a_live_append_wakes_a_pull_held_on_its_queue(open_store: OpenStore) -> None:
    # the dispatcher notifies once it wrote the queue's entries: a woken pull reads them
    store = open_store()
    store.create_topic("T", 2)
    held = store._arrivals.hold("T", 1, 4)
    assert held is not None
    store.put(PutRequest("T", b"q0", queue_id=0))
    assert not held.event.is_set()
    store.put_batch([PutRequest("T", b"q1", queue_id=1), PutRequest("T", b"q1b", queue_id=1)])
    assert held.event.is_set()
    assert [r.body for r in store.read_queue("T", 1, 0, 10).messages] == [b"q1", b"q1b"]
    store.close()
    assert store._arrivals.closed


def test_the_hold_bound_is_a_setting_below_the_threads(tmp_path: Path) -> None:
    base = {"CLEPSYDRA_HOME": str(tmp_path)}
    assert StoreSettings.from_env(base).pull_hold_max == 4
    assert StoreSettings.from_env({**base, "CLEPSYDRA_STORE_THREADS": "2"}).pull_hold_max == 1
    assert StoreSettings.from_env({**base, "CLEPSYDRA_STORE_PULL_HOLD_MAX": "0"}
                                  ).pull_hold_max == 0
    for bad in ("8", "-1", "x"):
        with pytest.raises(ConfigError, match="CLEPSYDRA_STORE_PULL_HOLD_MAX"):
            StoreSettings.from_env({**base, "CLEPSYDRA_STORE_PULL_HOLD_MAX": bad})
