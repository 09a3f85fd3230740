"""HTTP client of the store's schedule hand-over routes (docs/contracts.md), over one
keep-alive ``requests.Session``. One client per thread (a Session is not shared across
threads). Every failure - connection refused, timeout, 5xx, 4xx, a body that does not parse -
is a StoreCallFailed, which the delivery loop answers with a back-off (SPEC D6).
"""

from __future__ import annotations

from typing import Any, TypeVar

import requests

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.schedule import (
    Handover,
    HandoverRequest,
    LevelInfo,
    LevelTable,
    ScheduleEntries,
)
from clepsydra_scheduler.ports import StoreCallFailed

W = TypeVar("W", bound=WireValue)


class HttpStoreClient:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 connect_timeout_s: float = 2.0) -> None:
        self._base = base_url.rstrip("/")
        self._timeout = (connect_timeout_s, timeout_s)
        self._session = requests.Session()
        # No ~/.netrc and proxy look-ups on every call: the store is a cluster address.
        self._session.trust_env = False

    def close(self) -> None:
        self._session.close()

    def _call(self, method: str, path: str, *, params: dict[str, int] | None = None,
              json: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> dict[str, Any]:
        url = self._base + path
        try:
            resp = self._session.request(method, url, params=params, json=json,
                                         headers=headers, timeout=self._timeout)
        except requests.RequestException as exc:
            raise StoreCallFailed(f"{method} {url} failed: {exc}") from exc
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 400 or not isinstance(body, dict):
            code = body.get("error") if isinstance(body, dict) else None
            message = body.get("message") if isinstance(body, dict) else resp.text[:200]
            raise StoreCallFailed(f"{method} {url} -> {resp.status_code} {code}: {message}",
                                  status=resp.status_code, error_code=code)
        return body

    def levels(self) -> list[LevelInfo]:
        return _answer(LevelTable, self._call("GET", "/v1/schedule/levels")).levels

    def entries(self, level: int, queue_offset: int, max_count: int) -> ScheduleEntries:
        return _answer(ScheduleEntries, self._call(
            "GET", f"/v1/schedule/levels/{level}/entries",
            params={"offset": queue_offset, "max": max_count}))

    def handover(self, level: int, from_offset: int, max_count: int,
                 headers: dict[str, str] | None = None) -> Handover:
        asked = HandoverRequest(from_offset=from_offset, max_count=max_count)
        return _answer(Handover, self._call("POST", f"/v1/schedule/levels/{level}/handover",
                                            json=asked.to_json(), headers=headers))


def _answer(kind: type[W], body: dict[str, Any]) -> W:
    """The store's answer as its wire type; one that does not fit is a failed call (D6)."""
    try:
        return kind.from_json(body)
    except ValidationError as exc:
        raise StoreCallFailed(f"unexpected {kind.__name__} answer: {exc.message}") from exc
