"""The exporter does not take the producers' share of the store (DEC-exporter-yields): while
the store's topics grow and the export is behind, it pauses after each pull; once the writes
stop it catches up, every message exactly once; a cycle that reached every queue's end is
followed by the poll interval, not by the next cycle at once; a jobs run's catch-up never
pauses. Against a real store; no wall-clock thresholds (the pauses are counted, not timed)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from clepsydra_analytics.exporter import Exporter, lower_priority
from tests.integration.analytics.conftest import create_topic, exported_ids, produce, settings_for
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration


class Producer(threading.Thread):
    """Writes batches into ``topic`` until stopped; the msgIds it got back."""

    def __init__(self, store_url: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.store_url, self.topic = store_url, topic
        self.stop = threading.Event()
        self.ids: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self.ids += produce(self.store_url, self.topic, 200, batch=200, prefix=f"w{n}")
            n += 1


def exporter_of(store_url: str, home: Path, topic: str, messages: int, *, queues: int = 1,
                **env: str) -> tuple[Exporter, list[str]]:
    """A prepared exporter of a new topic already holding ``messages`` (their msgIds)."""
    create_topic(store_url, topic, queues=queues)
    ids = produce(store_url, topic, messages)
    exporter = Exporter(settings_for(store_url, home, **env))
    exporter.prepare()
    return exporter, ids


class RecordingStop(threading.Event):
    """The exporter loop's stop event, recording every wait it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return super().wait(timeout)


def test_while_the_store_grows_the_export_lags_with_pauses_then_catches_up_exactly_once(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    exporter, before = exporter_of(store.url, tmp_path, "burst", 3_000,  # it starts behind
                                   queues=2, CLEPSYDRA_ANALYTICS_EXPORT_PULL_MAX="50",
                                   CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.2",
                                   CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="0",
                                   CLEPSYDRA_ANALYTICS_EXPORT_BUSY_SHARE="0.2")
    settings = exporter.settings
    writer = Producer(store.url, "burst")
    writer.start()
    stop = RecordingStop()
    loop = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    loop.start()
    try:
        wait_until(lambda: exporter.paused_s > 0, 60, what="a pause while the store grows")
        assert exporter.writes.growing
        writer.stop.set()
        writer.join(30)
        # the writes stopped: the export reaches the end and writes every message
        wait_until(lambda: exporter.lag_messages == 0 and not exporter.writes.growing
                   and sum(exported_ids(settings).values()) >= len(before) + len(writer.ids),
                   120, interval_s=0.2, what="the export caught up")
    finally:
        stop.set()
        loop.join(60)
    assert exported_ids(settings) == {i: 1 for i in before + writer.ids}
    # every pause is the pull's time stretched to its share, at most a poll interval
    assert all(0 <= w <= settings.poll_interval_s for w in stop.waits)


def test_a_cycle_that_reached_every_end_is_followed_by_the_poll_interval(
        start_store: Callable[..., HttpService], tmp_path: Path) -> None:
    store = start_store()
    exporter, ids = exporter_of(store.url, tmp_path, "steady", 10,
                                CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.5",
                                CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="0")
    settings = exporter.settings
    stop = RecordingStop()
    cycles: list[int] = []  # how many waits the loop had made when each cycle began
    cycle = exporter.cycle
    exporter.cycle = lambda **kw: (cycles.append(len(stop.waits)),  # type: ignore[method-assign]
                                   cycle(**kw))[1]
    loop = threading.Thread(target=exporter.run, args=(stop,), daemon=True)
    loop.start()
    try:
        wait_until(lambda: exporter.rows_written_total == 10 and len(cycles) >= 2, 60,
                   what="two cycles")
    finally:
        stop.set()
        loop.join(60)
    # the first cycle pulled rows and reached the end: the loop waited the poll interval
    # before the second (before: a cycle that pulled rows was followed by the next at once)
    assert cycles[:2] == [0, 1]
    assert stop.waits[0] == settings.poll_interval_s
    assert exporter.paused_s == 0  # nothing left behind: no pause after a pull
    assert exported_ids(settings) == {i: 1 for i in ids}


def test_a_catch_up_asked_for_never_pauses(start_store: Callable[..., HttpService],
                                          tmp_path: Path) -> None:
    store = start_store()
    exporter, before = exporter_of(store.url, tmp_path, "asked", 1_000,
                                   CLEPSYDRA_ANALYTICS_EXPORT_PULL_MAX="20",
                                   CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.05")
    writer = Producer(store.url, "asked")
    writer.start()
    try:
        wait_until(lambda: len(writer.ids) >= 400, 60, what="writes under way")
        result = exporter.catch_up(timeout_s=10)
    finally:
        writer.stop.set()
        writer.join(30)
    assert exporter.paused_s == 0
    assert result.rows_written >= len(before)
    assert exporter.pace  # the loop's pacing is back on for later cycles


def test_the_exporter_thread_runs_niced_and_the_process_does_not() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    niced = min(own + 5, 19)
    seen: list[int] = []

    def exporter_thread() -> None:
        lower_priority(niced)
        child = threading.Thread(target=lambda: seen.append(
            os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        child.start()
        child.join()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=exporter_thread)
    thread.start()
    thread.join()
    assert seen == [niced, niced]  # the thread and a thread it started (the pull pool)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
