"""The consume services over real process queues, thread pools and a fake HTTP service:
listener outcomes (R11), broadcasting (R14), consume timeout (R13), orderly retry (R12), C4."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.consume_service import (
    ConcurrentConsumeService,
    ConsumeSettings,
    OrderlyConsumeService,
    Stats,
)
from clepsydra_client.consumer.listener import (
    ConcurrentContext,
    ConsumeResult,
    MessageModel,
    OrderlyContext,
    OrderlyResult,
)
from clepsydra_client.consumer.process_queue import ProcessQueue
from clepsydra_client.consumer.sendback import SendBack
from clepsydra_client.consumer.thread_pools import ScheduledPool, WorkerPool
from clepsydra_client.message import Message, MessageQueue
from clepsydra_core import properties as P
from clepsydra_core.errors import Unavailable
from tests.unit.client.fakes import FakeHttp, FakeRetry, as_http, failing, sent_back, stored
from tools.processes import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable


Q = MessageQueue("T", 0)


def msg(offset: int, body: str | None = None, reconsume: int = 0) -> Message:
    return Message(msg_id=f"M{offset}", topic="T", body=(body or f"m{offset}").encode(),
                   queue_offset=offset, commitlog_offset=1000 + offset,
                   reconsume_times=reconsume, store_topic="T")


class Rig:
    def __init__(self) -> None:
        self.executor = WorkerPool(4, "test-consume")
        self.timers = ScheduledPool(1, "test")
        self.timers.start()
        self.retry = FakeRetry(lambda item: sent_back("RETRY", "%RETRY%g", item["delayLevel"],
                                                      "X"))
        self.store = FakeHttp(lambda m, p, b: stored("%RETRY%g", "N"))
        self.stats = Stats()

    def settings(self, **kw: Any) -> ConsumeSettings:
        base: dict[str, Any] = {"group": "g", "client_id": "c1",
                                "model": MessageModel.CLUSTERING, "batch_size": 1,
                                "max_reconsume_times": None, "consume_timeout_s": 60.0,
                                "suspend_time_ms": 10, "local_retry_delay_s": 0.05}
        return ConsumeSettings(**{**base, **kw})

    def common(self) -> dict[str, Any]:
        sendback = SendBack("g", "c1", store=as_http(self.store), retry=as_http(self.retry))
        return {"executor": self.executor, "timers": self.timers, "sendback": sendback,
                "stats": self.stats}

    def concurrent(self, listener: Callable[..., Any], **kw: Any) -> ConcurrentConsumeService:
        return ConcurrentConsumeService(listener, self.settings(**kw), **self.common())

    def orderly(self, listener: Callable[..., Any], **kw: Any) -> OrderlyConsumeService:
        return OrderlyConsumeService(listener, self.settings(**kw), **self.common())

    def close(self) -> None:
        self.timers.stop()
        self.executor.shutdown(wait=True)


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def drained(pq: ProcessQueue, end: int) -> Callable[[], bool]:
    return lambda: pq.committable() == end and pq.count == 0


def test_success_completes_messages_and_moves_the_commit(rig: Rig) -> None:  # SPEC C4
    seen: list[str] = []
    service = rig.concurrent(lambda ms, ctx: seen.extend(m.text for m in ms))
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1), msg(2)])
    wait_until(drained(pq, 3), 5)
    assert sorted(seen) == ["m0", "m1", "m2"]
    assert rig.retry.calls == []
    assert rig.stats.snapshot()["consumed"] == 3


def test_reconsume_later_sends_back_with_the_listeners_level(rig: Rig) -> None:  # SPEC R11
    def listener(ms: list[Message], ctx: ConcurrentContext) -> ConsumeResult:
        ctx.delay_level_when_next_consume = {"m0": -1, "m1": 0, "m2": 7}[ms[0].text]
        ctx.failure_reason = "no stock"
        return ConsumeResult.RECONSUME_LATER

    service = rig.concurrent(listener)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1), msg(2)])
    wait_until(drained(pq, 3), 5)
    levels = sorted((b["commitLogOffset"], b["delayLevel"]) for b in rig.retry.items)
    assert levels == [(1000, -1), (1001, 0), (1002, 7)]
    assert all(b["reason"] == "no stock" for b in rig.retry.items)


def test_an_exception_is_reconsume_later_with_its_type_and_text(rig: Rig) -> None:  # SPEC R11
    def listener(ms: list[Message], ctx: ConcurrentContext) -> None:
        raise KeyError("sku-9")

    service = rig.concurrent(listener)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0)])
    wait_until(drained(pq, 1), 5)
    assert rig.retry.items[0]["reason"] == "KeyError: 'sku-9'"


def test_ack_index_fails_the_rest_of_a_batch(rig: Rig) -> None:  # SPEC R11
    def listener(ms: list[Message], ctx: ConcurrentContext) -> ConsumeResult:
        ctx.ack_index = 0
        return ConsumeResult.SUCCESS

    service = rig.concurrent(listener, batch_size=3)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1), msg(2)])
    wait_until(drained(pq, 3), 5)
    assert sorted(b["commitLogOffset"] for b in rig.retry.items) == [1001, 1002]


def test_broadcasting_never_sends_back(rig: Rig) -> None:  # SPEC R14
    service = rig.concurrent(lambda ms, ctx: ConsumeResult.RECONSUME_LATER,
                             model=MessageModel.BROADCASTING)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1)])
    wait_until(drained(pq, 2), 5)
    assert rig.retry.calls == [] and rig.store.calls == []
    assert rig.stats.snapshot()["skipped"] == 2


def test_when_send_back_and_fallback_fail_the_message_is_consumed_again_locally(
        rig: Rig) -> None:  # SPEC R9
    rig.retry.handler = failing(Unavailable("retry down"))
    store_up = threading.Event()

    def store(method: str, path: str, body: Any) -> dict[str, Any]:
        if not store_up.is_set():
            raise Unavailable("store down")
        return {"msgId": "N", "topic": "%RETRY%g"}

    rig.store.handler = store
    attempts: list[int] = []

    def listener(ms: list[Message], ctx: ConcurrentContext) -> ConsumeResult:
        attempts.append(ms[0].reconsume_times)
        if len(attempts) >= 2:
            store_up.set()
        return ConsumeResult.RECONSUME_LATER if len(attempts) < 3 else ConsumeResult.SUCCESS

    service = rig.concurrent(listener)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0)])
    wait_until(drained(pq, 1), 5)
    assert pq.committable() == 1
    assert attempts[:2] == [0, 1]  # consumed again locally, reconsumeTimes + 1
    assert rig.stats.snapshot()["local_retry"] >= 1


def test_a_message_held_past_the_timeout_is_sent_back_with_level_3(rig: Rig) -> None:  # SPEC R13
    release = threading.Event()

    def slow(ms: list[Message], ctx: ConcurrentContext) -> ConsumeResult:
        release.wait(5)
        return ConsumeResult.RECONSUME_LATER  # too late: must not be sent back again

    service = rig.concurrent(slow, consume_timeout_s=0.1)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1)])
    wait_until(lambda: pq.in_flight() == 2, 5)
    time.sleep(0.15)
    service.expire(pq)
    assert sorted(b["delayLevel"] for b in rig.retry.items) == [3, 3]
    assert pq.committable() == 2  # slots freed while the listener still runs
    assert "consume timeout" in rig.retry.items[0]["reason"]
    release.set()
    time.sleep(0.1)
    assert len(rig.retry.items) == 2


def test_orderly_failure_is_retried_locally_in_order(rig: Rig) -> None:  # SPEC R12
    seen: list[str] = []
    fails = {"m1": 2}

    def listener(ms: list[Message], ctx: OrderlyContext) -> OrderlyResult:
        seen.append(ms[0].text)
        if fails.get(ms[0].text, 0) > 0:
            fails[ms[0].text] -= 1
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyResult.SUCCESS

    service = rig.orderly(listener)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1), msg(2), msg(3)])
    wait_until(drained(pq, 4), 5)
    assert seen == ["m0", "m1", "m1", "m1", "m2", "m3"]
    assert rig.retry.calls == [] and rig.store.calls == []


def test_orderly_gives_up_after_max_and_dead_letters_through_r10(rig: Rig) -> None:  # SPEC R12, R10
    seen: list[tuple[str, int]] = []

    def listener(ms: list[Message], ctx: OrderlyContext) -> OrderlyResult:
        seen.append((ms[0].text, ms[0].reconsume_times))
        if ms[0].text == "m0":
            raise RuntimeError("poison")
        return OrderlyResult.SUCCESS

    service = rig.orderly(listener, max_reconsume_times=2)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1)])
    wait_until(drained(pq, 2), 5)
    assert seen == [("m0", 0), ("m0", 1), ("m0", 2), ("m1", 0)]
    (_method, path, body), = rig.store.calls
    assert path == "/v1/topics/%25RETRY%25g/messages"
    assert body["properties"][P.RECONSUME_TIME] == "2"
    assert "RuntimeError: poison" in body["properties"][P.FAILURE_HISTORY]
    assert rig.stats.snapshot()["dead_lettered"] == 1


def test_orderly_consumes_one_batch_of_a_queue_at_a_time(rig: Rig) -> None:  # SPEC R12
    active = []
    overlap = []

    def listener(ms: list[Message], ctx: OrderlyContext) -> None:
        active.append(1)
        if len(active) > 1:
            overlap.append(ms[0].text)
        time.sleep(0.005)
        active.pop()

    service = rig.orderly(listener)
    pq = ProcessQueue(Q, 0)
    for start in range(0, 40, 5):
        service.dispatch(pq, [msg(i) for i in range(start, start + 5)])
    wait_until(drained(pq, 40), 10)
    assert overlap == []


@pytest.mark.parametrize("how", ["dropped", "stopped"])
def test_a_pull_answered_after_the_queue_was_given_up_does_not_move_the_commit(
        rig: Rig, how: str) -> None:
    # SPEC C1, C4: a pull on the wire when its queue is dropped (rebalance) or the consumer
    # stops must not advance the offset: the last commit would skip messages nobody consumed
    from clepsydra_client.consumer.pulling import PullSettings, QueuePuller
    from clepsydra_client.consumer.tags import TagExpression

    asked, release = threading.Event(), threading.Event()

    def handler(method: str, path: str, body: Any) -> dict[str, Any]:
        asked.set()
        release.wait(5)
        return {"messages": [{"msgId": f"M{i}", "topic": "T", "body": f"m{i}", "queueId": 0,
                              "queueOffset": i} for i in range(5, 9)], "nextOffset": 9}

    seen: list[str] = []
    service = rig.concurrent(lambda ms, ctx: seen.extend(m.text for m in ms))
    puller = QueuePuller(as_http(FakeHttp(handler)), rig.timers, service, rig.stats,
                         PullSettings())
    pq = puller.start_queue(Q, TagExpression.parse("*"), 5)
    assert asked.wait(5)
    if how == "dropped":
        assert puller.drop_queue(Q) is pq
    else:
        puller.stop_all(0.0)
    release.set()
    after = threading.Event()
    rig.timers.schedule(after.set)  # one timer thread: runs once the pull has returned
    assert after.wait(5)
    assert pq.committable() == 5  # would be 9 if the answer had advanced the tracker
    assert seen == [] and pq.count == 0


def test_orderly_max_zero_dead_letters_the_first_failure(rig: Rig) -> None:
    # SPEC R5, R12: 0 means no retry; it used to mean "unlimited" here
    seen: list[str] = []

    def listener(ms: list[Message], ctx: OrderlyContext) -> OrderlyResult:
        seen.append(ms[0].text)
        if ms[0].text == "m0":
            raise RuntimeError("poison")
        return OrderlyResult.SUCCESS

    service = rig.orderly(listener, max_reconsume_times=0)
    pq = ProcessQueue(Q, 0)
    service.dispatch(pq, [msg(0), msg(1)])
    wait_until(drained(pq, 2), 5)
    assert seen == ["m0", "m1"]
    (_method, _path, body), = rig.store.calls
    assert body["properties"][P.RECONSUME_TIME] == "0"
    assert rig.stats.snapshot()["dead_lettered"] == 1


def test_max_of_minus_one_is_the_default_for_both_modes(rig: Rig) -> None:
    # SPEC R5: -1 is RocketMQ's "the default": 16 concurrent, unlimited orderly
    def never(*_args: Any) -> Any:
        raise AssertionError("not called")

    assert rig.concurrent(never, max_reconsume_times=-1).max_reconsume == 16
    assert rig.orderly(never, max_reconsume_times=-1).max_reconsume == 2**31 - 1
    assert rig.concurrent(never, max_reconsume_times=0).max_reconsume == 0
