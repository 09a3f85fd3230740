"""HTTP client of the store's schedule hand-over routes (docs/contracts.md), over the one HTTP
client of clepsydra_core.runtime.http (keep-alive sessions per thread, timeouts, trace context, the
error tree). Every failure - connection refused, timeout, 5xx, 4xx, a body that does not fit
its wire type - is a StoreCallFailed, which the delivery loop answers with a back-off (D6).
"""

from __future__ import annotations

from typing import Any, TypeVar

from clepsydra_core.errors import ClepsydraError, ValidationError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.schedule import (
    HandoverAnswer,
    HandoverRequest,
    LevelInfo,
    LevelTable,
    ScheduleEntries,
)
from clepsydra_core.wire.timers import TimerHandoverAnswer, TimerHandoverRequest
from clepsydra_scheduler.ports import StoreCallFailed

W = TypeVar("W", bound=WireValue)


class HttpHandoverApi:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 connect_timeout_s: float = 2.0) -> None:
        self._http = HttpClient(base_url, timeout_s=timeout_s,
                                connect_timeout_s=connect_timeout_s, service="store",
                                env_proxies=False)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, params: dict[str, int] | None = None,
              json: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            return self._http.request(method, path, params=params, json=json, headers=headers)
        except ClepsydraError as exc:
            raise StoreCallFailed(f"{method} {path} -> {exc.http_status} {exc.code}: "
                                  f"{exc.message}", status=exc.http_status,
                                  error_code=exc.code) from exc

    def table(self) -> LevelTable:
        return _answer(LevelTable, self._call("GET", "/v1/schedule/levels"))

    def levels(self) -> list[LevelInfo]:
        return self.table().levels

    def timer_fence(self) -> int | None:
        return self.table().timer_fence

    def entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries:
        return _answer(ScheduleEntries, self._call(
            "GET", f"/v1/schedule/levels/{level}/entries",
            params={"offset": queue_offset, "max": max_count}))

    def handover(self, level: int, from_offset: int, max_count: int,
                 headers: dict[str, str] | None = None,
                 fence: int | None = None) -> HandoverAnswer:
        asked = HandoverRequest(from_offset=from_offset, max_count=max_count, fence=fence)
        return _answer(HandoverAnswer, self._call("POST", f"/v1/schedule/levels/{level}/handover",
                                            json=asked.to_json(), headers=headers))

    def timer_handover(self, max_count: int, wait_ms: int,
                       fence: int | None = None) -> TimerHandoverAnswer:
        """The store's timer hand-over (SPEC T1); it may wait up to ``wait_ms`` in the store."""
        asked = TimerHandoverRequest(max_count=max_count, wait_ms=wait_ms, fence=fence)
        return _answer(TimerHandoverAnswer, self._call("POST", "/v1/schedule/timers/handover",
                                                       json=asked.to_json()))


def _answer(kind: type[W], body: dict[str, Any]) -> W:
    """The store's answer as its wire type; one that does not fit is a failed call (D6)."""
    try:
        return kind.from_json(body)
    except ValidationError as exc:
        raise StoreCallFailed(f"unexpected {kind.__name__} answer: {exc.message}") from exc
