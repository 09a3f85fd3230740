"""``LeanFuture``, the future of each ``Producer.send_async`` message ("a future per
message with its own result or error"): one shared condition and no lists until used, and
still a ``concurrent.futures.Future`` in every way an application uses one."""

from __future__ import annotations

import gc
import threading
from concurrent.futures import (
    FIRST_COMPLETED,
    CancelledError,
    Future,
    InvalidStateError,
    as_completed,
    wait,
)

import pytest

from clepsydra_client.futures import LeanFuture, SendFuture, complete
from clepsydra_client.message import SendResult


def test_it_is_a_future_with_its_own_result_or_error() -> None:
    ok: LeanFuture[int] = LeanFuture()
    bad: LeanFuture[int] = LeanFuture()
    assert isinstance(ok, Future) and not ok.done() and not ok.running()
    ok.set_result(7)
    bad.set_exception(ValueError("refused"))
    assert ok.done() and ok.result(0) == 7 and ok.exception(0) is None
    assert bad.done() and isinstance(bad.exception(0), ValueError)
    with pytest.raises(ValueError, match="refused"):
        bad.result(0)
    with pytest.raises(InvalidStateError):
        ok.set_result(8)
    with pytest.raises(InvalidStateError):
        bad.set_exception(KeyError())
    assert ok.result() == 7


def test_a_pending_future_times_out_and_can_be_cancelled() -> None:
    future: LeanFuture[int] = LeanFuture()
    with pytest.raises(TimeoutError):
        future.result(0.01)
    with pytest.raises(TimeoutError):
        future.exception(0.01)
    assert future.cancel() and future.cancelled()
    with pytest.raises(CancelledError):
        future.result(0)


def test_callbacks_run_once_each_when_done_or_at_once_when_done_already() -> None:
    future: LeanFuture[str] = LeanFuture()
    seen: list[str] = []
    future.add_done_callback(lambda f: seen.append(f"first {f.result()}"))
    future.add_done_callback(lambda f: seen.append(f"second {f.result()}"))
    assert seen == []
    future.set_result("x")
    future.add_done_callback(lambda f: seen.append(f"late {f.result()}"))
    assert seen == ["first x", "second x", "late x"]


def test_a_waiter_wakes_for_its_own_future_only() -> None:
    """The condition is shared: completing another future wakes the waiter, which must wait
    on instead of failing with a TimeoutError."""
    mine: LeanFuture[int] = LeanFuture()
    other: LeanFuture[int] = LeanFuture()
    got: list[object] = []
    waiting = threading.Event()

    def wait_for_mine() -> None:
        waiting.set()
        try:
            got.append(mine.result(30))
        except BaseException as exc:  # reported below
            got.append(exc)

    thread = threading.Thread(target=wait_for_mine)
    thread.start()
    waiting.wait(5)
    other.set_result(1)  # wakes the waiter: not its future
    thread.join(0.2)
    assert thread.is_alive() and got == []
    mine.set_result(2)
    thread.join(10)
    assert got == [2]


def test_concurrent_futures_wait_and_as_completed_take_lean_futures() -> None:
    futures: list[LeanFuture[int]] = [LeanFuture() for _ in range(3)]
    timer = threading.Timer(0.05, futures[1].set_result, args=(11,))
    timer.start()
    done, not_done = wait(futures, timeout=30, return_when=FIRST_COMPLETED)
    assert done == {futures[1]} and len(not_done) == 2
    futures[0].set_result(10)
    futures[2].set_exception(RuntimeError("no"))
    assert {f.exception() is None for f in as_completed(futures, timeout=30)} == {True, False}
    timer.join()


def test_a_lean_future_holds_no_condition_or_lists_of_its_own() -> None:
    """What makes it lean (the collector followed five objects per plain future)."""
    a: LeanFuture[int] = LeanFuture()
    b: LeanFuture[int] = LeanFuture()
    assert a._condition is b._condition
    plain = [r for r in gc.get_referents(Future()) if gc.is_tracked(r)]
    lean = [r for r in gc.get_referents(a) if gc.is_tracked(r) and r is not LeanFuture]
    assert len(lean) < len(plain)
    assert not any(isinstance(r, (list, threading.Condition)) for r in lean)


def test_a_send_future_keeps_the_answer_and_makes_its_result_when_asked() -> None:
    """What ``send_async`` returns: the store's answer kept as decoded, a dict of plain values
    the collector never tracks, the ``SendResult`` made on the first ``result()``,
    the same one after; an accepted message cannot be cancelled."""
    raw = {"msgId": "M1", "topic": "t", "queueId": 1, "queueOffset": 2,
           "commitLogOffset": 3, "storeTimestamp": 4, "offsetMsgId": "O1"}
    futures = [SendFuture("U1"), SendFuture("U2"), SendFuture("U3")]
    seen: list[str] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result().msg_id))
    assert not futures[0].cancel() and not futures[0].cancelled()
    complete(futures, [raw, {**raw, "msgId": "M2"}, {**raw, "msgId": "M3"}])
    assert seen == ["M1"]
    first = futures[0].result(0)
    assert first == SendResult.from_json(raw, "U1") and futures[0].result(0) is first
    assert futures[1].result(0).msg_id == "M2" and futures[1].result(0).uniq_key == "U2"
    kept: object = futures[2]._result  # not asked for: still the answer
    gc.collect()
    assert isinstance(kept, dict) and not gc.is_tracked(kept)
    assert futures[2].result(0).msg_id == "M3"


def test_complete_leaves_a_future_that_is_done_already() -> None:
    done, pending = SendFuture("u"), SendFuture("v")
    done.set_exception(RuntimeError("failed before"))
    complete([done, pending], [{"msgId": "a"}, {"msgId": "b"}])
    assert isinstance(done.exception(0), RuntimeError)
    assert pending.result(0).msg_id == "b"
