"""The future ``Producer.send_async`` returns for each message: a
:class:`concurrent.futures.Future` that costs one object until something waits on it.

A plain ``Future`` makes a ``threading.Condition`` (with its lock and waiter deque) and two
lists when it is created: five objects the garbage collector follows for every message an
application sends, and keeps following while the application holds the futures. At 80,000
messages a second they made the collector's full passes most of the SDK's CPU.
:class:`LeanFuture` shares one condition among all lean futures and makes its callback and
waiter lists only when one is added. Its waits re-check their own future after every wake-up
(a shared condition wakes them for any future), so ``result()``, ``exception()``,
``add_done_callback()``, ``concurrent.futures.wait`` and ``as_completed`` behave as a plain
Future's.

:class:`SendFuture` is the one ``send_async`` returns. It keeps the store's answer as decoded
(:data:`Answer`, a dict the collector does not track) and the message's ``UNIQ_KEY``, and makes
the
:class:`SendResult` when ``result()`` is first called: an application that keeps its futures
keeps one tracked object per message, not two. It cannot be cancelled (the message was
accepted and will be sent). :func:`complete` sets a batch's results in one pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, InvalidStateError
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    LOGGER,
    PENDING,
)
from typing import Any, TypeVar

from clepsydra_client.message import SendResult

T = TypeVar("T")

_SHARED = threading.Condition()
"""The one condition of every lean future (its lock is re-entrant)."""
_NO_CALLBACKS: tuple[Any, ...] = ()
_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)


class LeanFuture(Future[T]):
    """A Future whose condition is shared and whose lists are made on first use."""

    __slots__ = ("_waiter_list",)
    _condition = _SHARED
    _done_callbacks: Any = _NO_CALLBACKS

    def __init__(self) -> None:  # Future.__init__ would make the condition and the lists
        self._state = PENDING
        self._result: T | None = None
        self._exception: BaseException | None = None
        self._waiter_list: list[Any] | None = None

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        """``concurrent.futures.wait`` and ``as_completed`` add their waiters here."""
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        with _SHARED:
            if self._state not in _DONE:
                if self._done_callbacks is _NO_CALLBACKS:
                    self._done_callbacks = []
                self._done_callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            LOGGER.exception("exception calling callback for %r", self)

    def _invoke_callbacks(self) -> None:
        for callback in self._done_callbacks:
            try:
                callback(self)
            except Exception:
                LOGGER.exception("exception calling callback for %r", self)

    def set_result(self, result: T) -> None:
        with _SHARED:
            if self._state in _DONE:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._state = FINISHED
            for waiter in self._waiter_list or ():
                waiter.add_result(self)
            _SHARED.notify_all()
        self._invoke_callbacks()

    def set_exception(self, exception: BaseException | None) -> None:
        with _SHARED:
            if self._state in _DONE:
                raise InvalidStateError(f"{self._state}: {self!r}")
            self._exception = exception
            self._state = FINISHED
            for waiter in self._waiter_list or ():
                waiter.add_exception(self)
            _SHARED.notify_all()
        self._invoke_callbacks()

    def _wait_done(self, timeout: float | None) -> None:
        """Wait (holding the shared condition) until this future is done or ``timeout``
        passed; the shared condition also wakes it for other futures."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._state not in _DONE:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            _SHARED.wait(left)

    def result(self, timeout: float | None = None) -> T:
        with _SHARED:
            self._wait_done(timeout)
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                raise CancelledError()
            if self._state != FINISHED:
                raise TimeoutError()
            if self._exception is not None:
                raise self._exception
            return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with _SHARED:
            self._wait_done(timeout)
            if self._state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                raise CancelledError()
            if self._state != FINISHED:
                raise TimeoutError()
            return self._exception


Answer = dict[str, Any]
"""A send's outcome as :class:`SendFuture` keeps it: the store's answer as decoded. A decoded
object of plain values (text, numbers) is a dict the collector never tracks; the message's
``UNIQ_KEY`` is the future's own. (A tuple holding the dict stays tracked: the collector
untracks a tuple only when none of its items is a container, so the answer was copied into
one flat tuple of names and values, a copy per message.)"""


class SendFuture(LeanFuture[SendResult]):
    """The future of one ``send_async`` message (``uniq_key``: its ``UNIQ_KEY``): its
    :class:`SendResult` is made from the kept answer when first asked for."""

    __slots__ = ("uniq_key",)

    def __init__(self, uniq_key: str = "") -> None:  # LeanFuture's, inline (per message)
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiter_list = None
        self.uniq_key = uniq_key

    def cancel(self) -> bool:
        """False: an accepted message is sent (like a running task's future)."""
        return False

    def result(self, timeout: float | None = None) -> SendResult:
        value: Any = super().result(timeout)
        if type(value) is dict:
            value = SendResult.from_json(value, self.uniq_key)
            self._result = value  # the same value for every caller (a race makes equal ones)
        return value  # type: ignore[no-any-return]


def complete(futures: list[SendFuture], values: list[Answer]) -> None:
    """Set each future's answer (the store's, as decoded) in one pass under the shared
    condition and wake the waiters once; a future already done (it cannot be, but never raise
    on the sender thread) is left as it is."""
    with _SHARED:
        for future, value in zip(futures, values, strict=True):
            if future._state in _DONE:
                continue
            future._result = value  # type: ignore[assignment]
            future._state = FINISHED
            for waiter in future._waiter_list or ():
                waiter.add_result(future)
        _SHARED.notify_all()
    for future in futures:
        if future._done_callbacks:
            future._invoke_callbacks()
