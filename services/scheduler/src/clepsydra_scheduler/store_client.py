"""HTTP client of the store's schedule hand-over routes (docs/contracts.md), over one
keep-alive ``requests.Session``. One client per thread (a Session is not shared across
threads). Every failure - connection refused, timeout, 5xx, 4xx, a body that does not parse -
is a StoreCallFailed, which the delivery loop answers with a back-off (SPEC D6).
"""

from __future__ import annotations

from typing import Any

import requests

from clepsydra_scheduler.ports import Entries, Handover, LevelInfo, StoreCallFailed


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
              json: dict[str, int] | None = None,
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
        body = self._call("GET", "/v1/schedule/levels")
        try:
            return [LevelInfo(level=int(item["level"]), delay_ms=int(item["delayMs"]),
                              queue_id=int(item["queueId"]), min_offset=int(item["minOffset"]),
                              max_offset=int(item["maxOffset"]),
                              handed_over=int(item["handedOver"]))
                    for item in body["levels"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCallFailed(f"unexpected schedule levels body: {exc!r}") from exc

    def entries(self, level: int, queue_offset: int, max_count: int) -> Entries:
        body = self._call("GET", f"/v1/schedule/levels/{level}/entries",
                          params={"offset": queue_offset, "max": max_count})
        try:
            return Entries(level=int(body["level"]), queue_offset=int(body["queueOffset"]),
                           deliver_ts=[int(ts) for ts in body["deliverTs"]],
                           min_offset=int(body["minOffset"]), max_offset=int(body["maxOffset"]),
                           handed_over=int(body["handedOver"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCallFailed(f"unexpected schedule entries body: {exc!r}") from exc

    def handover(self, level: int, from_offset: int, max_count: int,
                 headers: dict[str, str] | None = None) -> Handover:
        body = self._call("POST", f"/v1/schedule/levels/{level}/handover",
                          json={"fromOffset": from_offset, "max": max_count}, headers=headers)
        try:
            next_ts = body.get("nextDeliverTs")
            return Handover(level=int(body["level"]), from_offset=int(body["fromOffset"]),
                            next_offset=int(body["nextOffset"]),
                            delivered=int(body["delivered"]), parked=int(body["parked"]),
                            skipped=int(body["skipped"]), not_due=bool(body["notDue"]),
                            next_deliver_ts=None if next_ts is None else int(next_ts),
                            lateness_ms=[int(v) for v in body.get("latenessMs", [])],
                            handed_over=int(body["handedOver"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCallFailed(f"unexpected handover body: {exc!r}") from exc
