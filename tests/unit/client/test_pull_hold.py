"""The pull loop with the store's pull hold (DEC-pull-hold): a pull asks for it (``waitMs``, the
read timeout stretched by it), a pull held the whole wait pulls again at once, one the store
answered at once backs off as before, at most ``threads - 1`` pulls are held, and a stop does not
wait for a held pull (its answer is dropped, C4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from clepsydra_client.consumer.consume_service import Stats
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.pulling import IDLE_MIN_S, PullSettings, QueuePuller
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.message import Message, MessageQueue
from tests.unit.client.fakes import FakeHttp, as_http
from tools.processes import wait_until

Q0, Q1 = MessageQueue("T", 0), MessageQueue("T", 1)
HOLD_MS = 30
LINGER_MS = 5


class Store(FakeHttp):
    """Answers pulls through ``answer(queue_id, params)``; records each pull's params and
    read timeout."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], dict[str, Any]]) -> None:
        super().__init__()
        self.answer = answer
        self.pulls: list[tuple[int, dict[str, Any], float | None]] = []

    def get(self, path: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        queue_id = int(path.split("/")[-2])
        self.pulls.append((queue_id, dict(params), kw.get("timeout_s")))
        return self.answer(queue_id, params)


def empty(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [], "nextOffset": params["offset"], "maxOffset": params["offset"]}


class ManualTimers:
    """The loop's ScheduledPool, run by hand: each scheduled call with its delay."""

    def __init__(self) -> None:
        self.due: list[tuple[float, Callable[[], None]]] = []
        self.lock = threading.Lock()

    def schedule(self, fn: Callable[[], None], delay_s: float = 0.0) -> None:
        with self.lock:
            self.due.append((delay_s, fn))

    def next(self) -> tuple[float, Callable[[], None]]:
        with self.lock:
            return self.due.pop(0)

    def run(self) -> float:
        """Run the next scheduled call; its delay."""
        delay, fn = self.next()
        fn()
        return delay


class Service:
    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def dispatch(self, pq: ProcessQueue, messages: list[Message]) -> None:
        pq.put(messages)
        self.dispatched += [m.text for m in messages]


def puller(store: Store, timers: ManualTimers, service: Service, **kw: Any) -> QueuePuller:
    settings = PullSettings(**{"hold_ms": HOLD_MS, "linger_ms": LINGER_MS, **kw})
    return QueuePuller(as_http(store), timers, service, Stats(),  # type: ignore[arg-type]
                       settings)


@pytest.fixture
def timers() -> ManualTimers:
    return ManualTimers()


def test_a_pull_asks_for_the_hold_and_backs_off_when_not_held(timers: ManualTimers) -> None:
    # the pull asks the store to hold it, its read timeout stretched by the hold; a
    # store that answers it at once with nothing (no hold: its bound reached, an older store)
    # leaves the loop on the back-off as before, still asking for the hold
    store = Store(empty)
    p = puller(store, timers, Service())
    p.start_queue(Q0, TagExpression.parse("*"), 5)
    assert timers.run() == 0.0
    _, params, timeout_s = store.pulls[-1]
    assert params["waitMs"] == HOLD_MS and timeout_s == store.timeout_s + HOLD_MS / 1000
    assert timers.due[0][0] == IDLE_MIN_S  # answered at once, empty: back-off
    timers.run()
    assert store.pulls[-1][1]["waitMs"] == HOLD_MS and timers.due[0][0] == 2 * IDLE_MIN_S


def test_hold_ms_zero_asks_for_no_hold(timers: ManualTimers) -> None:
    store = Store(empty)
    p = puller(store, timers, Service(), hold_ms=0)
    p.start_queue(Q0, TagExpression.parse("*"), 5)
    timers.run()
    _, params, timeout_s = store.pulls[-1]
    assert "waitMs" not in params and timeout_s == store.timeout_s
    assert timers.due[0][0] == IDLE_MIN_S


def test_a_pull_held_the_whole_wait_pulls_again_at_once(timers: ManualTimers) -> None:
    def held(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
        if "waitMs" in params:
            time.sleep(params["waitMs"] / 1000)  # the store held it until the wait ended
        return empty(queue_id, params)

    store = Store(held)
    p = puller(store, timers, Service())
    p.start_queue(Q0, TagExpression.parse("*"), 0)
    timers.run()
    assert "waitMs" in store.pulls[-1][1]
    assert timers.due[0][0] == 0.0
    timers.run()
    assert store.pulls[-1][1]["waitMs"] == HOLD_MS  # held again


def test_a_held_pull_answered_with_a_message_dispatches_it(timers: ManualTimers) -> None:
    def arrives(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
        if "waitMs" not in params:
            return empty(queue_id, params)
        return {"messages": [{"msgId": "M0", "topic": "T", "body": "m0", "queueId": 0,
                              "queueOffset": 0}], "nextOffset": 1, "maxOffset": 1}

    service = Service()
    p = puller(Store(arrives), timers, service)
    pq = p.start_queue(Q0, TagExpression.parse("*"), 0)
    timers.run()
    assert service.dispatched == ["m0"] and pq.tracker.next_offset == 1
    # it took the queue's last message: the next pull lingers, so that the messages arriving
    # meanwhile come in one pull, not in one held pull each
    assert timers.due[0][0] == LINGER_MS / 1000


def test_a_queue_with_more_messages_is_pulled_again_at_once(timers: ManualTimers) -> None:
    def more(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [{"msgId": "M0", "topic": "T", "body": "m0", "queueId": 0,
                              "queueOffset": 0}], "nextOffset": 1, "maxOffset": 5}

    p = puller(Store(more), timers, Service(), linger_ms=LINGER_MS)
    p.start_queue(Q0, TagExpression.parse("*"), 0)
    timers.run()
    assert timers.due[0][0] == 0.0


def _held_in_thread(timers: ManualTimers, store: Store, entered: threading.Event
                    ) -> threading.Thread:
    """Run the next scheduled pull (a held one that blocks in the store) in a thread."""
    _, fn = timers.next()
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    assert entered.wait(10)
    return thread


def test_at_most_threads_minus_one_pulls_ask_for_the_hold(timers: ManualTimers) -> None:
    # the loop's threads: a held pull keeps one busy, so one is always left for the others
    entered, release = threading.Event(), threading.Event()

    def answer(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
        if queue_id == 0 and "waitMs" in params:
            entered.set()
            release.wait(10)
        return empty(queue_id, params)

    store = Store(answer)
    p = puller(store, timers, Service(), threads=2)
    p.start_queue(Q0, TagExpression.parse("*"), 0)
    p.start_queue(Q1, TagExpression.parse("*"), 0)
    held = _held_in_thread(timers, store, entered)  # Q0, held
    timers.run()  # Q1: no hold left
    assert [(q, "waitMs" in params) for q, params, _ in store.pulls] == [(0, True), (1, False)]
    release.set()
    held.join(10)
    timers.run()
    timers.run()
    last_of_q1 = [params for q, params, _ in store.pulls if q == 1][-1]
    assert "waitMs" in last_of_q1  # Q0's hold is free again


def test_stopping_waits_for_no_held_pull_and_drops_its_answer(timers: ManualTimers) -> None:
    # C4: a held pull answered after the stop neither dispatches nor moves the offset; the
    # stop names its thread, which the ScheduledPool then does not wait for
    entered, release = threading.Event(), threading.Event()

    def answer(queue_id: int, params: dict[str, Any]) -> dict[str, Any]:
        if "waitMs" not in params:
            return empty(queue_id, params)
        entered.set()
        release.wait(10)
        return {"messages": [{"msgId": "M0", "topic": "T", "body": "m0", "queueId": 0,
                              "queueOffset": 0}], "nextOffset": 1, "maxOffset": 1}

    service = Service()
    store = Store(answer)
    p = puller(store, timers, service)
    pq = p.start_queue(Q0, TagExpression.parse("*"), 0)
    held = _held_in_thread(timers, store, entered)
    assert p.stop() == {held}
    release.set()
    held.join(10)
    wait_until(lambda: not held.is_alive(), 10)
    assert service.dispatched == [] and pq.tracker.next_offset == 0 and not timers.due
