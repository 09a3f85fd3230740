"""HTTP client of the store's API (DESIGN "Store", docs/contracts.md internal routes).

One ``requests.Session`` per thread (keep-alive connections, no shared mutable state between
request threads). The store's ``{"error", "message"}`` answers become the matching
``ClepsydraError``; a store that does not answer is ``Unavailable`` (503).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import orjson
import requests
from requests.adapters import HTTPAdapter

from clepsydra_core.errors import (
    ClepsydraError,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    TopicNotFound,
    Unavailable,
    ValidationError,
)
from clepsydra_core.groups import GroupSettings
from clepsydra_core.wire.copy import CopyBatch, CopyItem, RangeCopy, RangeCopyAnswer


class StoreRejected(ClepsydraError):
    """The store refused a request for a reason this service passes on as is (its code and,
    for 4xx, its status; a store 5xx becomes 502)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"store: {message}")
        self.code = code
        self.http_status = status if 400 <= status < 500 else 502


_JSON = {"Content-Type": "application/json"}


def topic_path(topic: str) -> str:
    """Topic names travel as percent-encoded path segments (`%RETRY%G` -> `%25RETRY%25G`)."""
    return quote(topic, safe="")


class StoreClient:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0, writable_ttl_ms: int = 1000,
                 pool_size: int = 16) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._pool_size = pool_size
        self._local = threading.local()
        self._writable_ttl_s = writable_ttl_ms / 1000
        self._writable: tuple[float, bool] | None = None
        self._topics: dict[str, int] = {}
        self._topics_lock = threading.Lock()
        self._sessions: list[requests.Session] = []

    # ---- plumbing ----------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            # No proxy/netrc look-ups in the environment on every call (~1 ms each): the
            # store is a cluster-internal address.
            session.trust_env = False
            adapter = HTTPAdapter(pool_connections=2, pool_maxsize=self._pool_size)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
            with self._topics_lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        """Close every thread's connections (idle keep-alives would hold up a store's stop)."""
        with self._topics_lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()

    def _call(self, method: str, path: str, *, json_body: Any = None,
              params: dict[str, Any] | None = None, ok: Sequence[int] = (200, 201)) -> Any:
        return self._call_status(method, path, json_body=json_body, params=params, ok=ok)[1]

    def _call_status(self, method: str, path: str, *, json_body: Any = None,
                     params: dict[str, Any] | None = None,
                     ok: Sequence[int] = (200, 201)) -> tuple[int, Any]:
        """(status, JSON answer) of a call answered with a status in ``ok``; the store's
        errors as ``ClepsydraError``, no answer as ``Unavailable``."""
        url = self.base_url + path
        data = None if json_body is None else orjson.dumps(json_body)
        try:
            resp = self._session().request(method, url, data=data, params=params,
                                           headers=_JSON if data is not None else None,
                                           timeout=self._timeout_s)
        except requests.RequestException as exc:
            raise Unavailable(f"store at {self.base_url} did not answer {method} {path}: "
                              f"{exc}") from exc
        if resp.status_code in ok:
            try:
                return resp.status_code, orjson.loads(resp.content)
            except orjson.JSONDecodeError as exc:
                raise StoreRejected("SYSTEM_ERROR", f"{method} {path} answered non-JSON",
                                    502) from exc
        raise self._error(resp)

    def _error(self, resp: requests.Response) -> ClepsydraError:
        try:
            body = resp.json()
            code = str(body.get("error") or "SYSTEM_ERROR")
            message = str(body.get("message") or resp.text)
        except ValueError:
            code, message = "SYSTEM_ERROR", resp.text[:500]
        if code == "NO_PERMISSION":
            self._writable = (time.monotonic(), False)
            return NoPermission(f"store refuses writes: {message}", rule="R2")
        if resp.status_code == 404 and code == "TOPIC_NOT_EXIST":
            return TopicNotFound(message)
        if resp.status_code == 404 and code == "MESSAGE_NOT_FOUND":
            return MessageNotFound(message)
        if resp.status_code == 404 and code == GroupNotFound.code:
            return GroupNotFound(message, rule="R2")
        return StoreRejected(code, message, resp.status_code)

    # ---- health ----------------------------------------------------------------------------
    def healthz(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/healthz")
        return result

    def is_writable(self) -> bool:
        """R2: the store's own answer (``/healthz`` ``writable``), trusted for a short TTL; a
        write answered NO_PERMISSION marks it not writable at once."""
        cached = self._writable
        now = time.monotonic()
        if cached is not None and now - cached[0] < self._writable_ttl_s:
            return cached[1]
        writable = bool(self.healthz().get("writable", True))
        self._writable = (now, writable)
        return writable

    # ---- consumer-group settings (the store keeps them durably) -----------------------------
    def group_settings(self, group: str) -> GroupSettings | None:
        """``GET /v1/groups/{group}/settings``, or None when the group has no settings."""
        try:
            doc = self._call("GET", f"/v1/groups/{quote(group, safe='')}/settings")
        except GroupNotFound:
            return None
        return GroupSettings.from_json(doc)

    def put_group_settings(self, group: str, settings: GroupSettings) -> bool:
        """``PUT /v1/groups/{group}/settings`` (written durably by the store before it
        answers); True when the group is new."""
        status, _ = self._call_status("PUT", f"/v1/groups/{quote(group, safe='')}/settings",
                                      json_body=settings.to_json())
        return status == 201

    def all_group_settings(self) -> dict[str, GroupSettings]:
        """``GET /v1/groups``: every group that has settings."""
        doc = self._call("GET", "/v1/groups")
        return {str(g["group"]): GroupSettings.from_json(g) for g in doc["groups"]}

    # ---- topics ----------------------------------------------------------------------------
    def topic(self, name: str) -> dict[str, Any] | None:
        """``GET /v1/topics/{topic}``, or None when the store has no such topic."""
        try:
            result: dict[str, Any] = self._call("GET", f"/v1/topics/{topic_path(name)}")
        except TopicNotFound:
            return None
        except StoreRejected as exc:
            if exc.http_status == 404:
                return None
            raise
        return result

    def ensure_topic(self, name: str, queues: int) -> int:
        """R3/R6: create a `%RETRY%`/`%DLQ%` topic on first use; the number of queues it really
        has (an existing topic keeps its count). Remembered per process."""
        known = self._topics.get(name)
        if known is not None:
            return known
        try:
            created = self._call("POST", "/v1/internal/topics",
                                 json_body={"name": name, "queues": queues})
            count = len(created.get("queues") or []) or queues
        except StoreRejected:
            # Exists with another queue count (retryQueueNums changed): use what it has.
            info = self.topic(name)
            if info is None:
                raise
            count = len(info.get("queues") or []) or 1
        with self._topics_lock:
            self._topics[name] = count
        return count

    def forget_topic(self, name: str) -> None:
        with self._topics_lock:
            self._topics.pop(name, None)

    # ---- messages --------------------------------------------------------------------------
    def headers(self, commitlog_offset: int) -> dict[str, Any]:
        """The message at a CommitLog offset without its body; MessageNotFound if none."""
        result: dict[str, Any] = self._call(
            "GET", f"/v1/commitlog/{commitlog_offset}", params={"body": "false"})
        return result

    def message(self, commitlog_offset: int, *, with_body: bool = True) -> dict[str, Any]:
        """The message at a CommitLog offset (``GET /v1/commitlog/{offset}``)."""
        params = None if with_body else {"body": "false"}
        result: dict[str, Any] = self._call("GET", f"/v1/commitlog/{commitlog_offset}",
                                            params=params)
        return result

    def copy(self, items: Sequence[CopyItem]) -> list[dict[str, Any]]:
        """``POST /v1/internal/copy``: the store copies stored messages (bodies stay there)."""
        result = self._call("POST", "/v1/internal/copy",
                            json_body=CopyBatch(list(items)).to_json())
        results: list[dict[str, Any]] = result["results"]
        return results

    def copy_range(self, request: RangeCopy) -> RangeCopyAnswer:
        """``POST /v1/internal/copy-range``: the store copies a range of a queue to a topic
        (or each message to its origin) in one write."""
        result = self._call("POST", "/v1/internal/copy-range", json_body=request.to_json())
        try:
            return RangeCopyAnswer.from_json(result)
        except ValidationError as exc:
            raise StoreRejected("SYSTEM_ERROR", f"unexpected copy-range answer: {exc.message}",
                                502) from exc

    def pull(self, topic: str, queue_id: int, queue_offset: int,
             max_count: int, *, with_body: bool = True) -> dict[str, Any]:
        """A pull: ``{messages, nextOffset, minOffset, maxOffset}``; TopicNotFound if none.
        ``with_body=False``: headers only (``?body=false``), what scans and hints need."""
        params: dict[str, Any] = {"offset": queue_offset, "max": max_count}
        if not with_body:
            params["body"] = "false"
        result: dict[str, Any] = self._call(
            "GET", f"/v1/topics/{topic_path(topic)}/queues/{queue_id}/messages", params=params)
        return result
