"""The retry service's calls to the store (DESIGN "Store", docs/contracts.md internal routes), over
the one HTTP client of clepsydra_core.runtime.http: a keep-alive session per request thread, the
current span's trace context on every call, the store's ``{"error", "message"}`` answers as the
matching ``ClepsydraError``; a store that does not answer is ``Unavailable`` (503). Every answer is
read through the wire type the store writes it with (:mod:`clepsydra_core.wire`); one that does not
read is a ``RemoteError`` naming the field.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from clepsydra_core.errors import (
    ClepsydraError,
    DiskFull,
    GroupNotFound,
    NoPermission,
    NotFound,
    Unavailable,
)
from clepsydra_core.groups import GroupSettings
from clepsydra_core.runtime.http import HttpClient, segment
from clepsydra_core.runtime.shard_map import ShardMap
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.copy import CopyBatch, CopyItem, RangeCopy, RangeCopyAnswer
from clepsydra_core.wire.groups import GroupSettingsList
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.messages import MessageList, PullAnswer, StoredMessage
from clepsydra_core.wire.produce import ProduceAnswer, ProduceResults
from clepsydra_core.wire.topics import TopicAnswer, TopicCreate

_BAD_GATEWAY = 502


class StoreClient:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0, writable_ttl_ms: int = 1000,
                 pool_size: int = 16, service: str = "store") -> None:
        self.base_url = base_url.rstrip("/")
        self._http = HttpClient(base_url, timeout_s=timeout_s, service=service,
                                env_proxies=False, pool_size=pool_size)
        self._settings = (timeout_s, writable_ttl_ms, pool_size)
        self._writable_ttl_s = writable_ttl_ms / 1000
        self._writable: tuple[float, bool] | None = None
        self._topics: dict[str, int] = {}
        self._topics_lock = threading.Lock()

    def close(self) -> None:
        """Close every thread's connections (idle keep-alives would hold up a store's stop)."""
        self._http.close()

    @property
    def http(self) -> HttpClient:
        return self._http

    def sibling(self, base_url: str, shard: int) -> StoreClient:
        """A client of another store shard with this one's settings."""
        timeout_s, writable_ttl_ms, pool_size = self._settings
        return StoreClient(base_url, timeout_s=timeout_s, writable_ttl_ms=writable_ttl_ms,
                           pool_size=pool_size, service=f"store shard {shard}")

    def _call(self, method: str, path: str, *, json_body: Any = None,
              params: dict[str, Any] | None = None) -> Any:
        return self._call_status(method, path, json_body=json_body, params=params)[1]

    def _call_status(self, method: str, path: str, *, json_body: Any = None,
                     params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """(status, JSON answer); the store's errors as the error tree
        (clepsydra_core.runtime.http), passed on with their code: a store 5xx other than 503 and 507
        as 502 (the store failed, not this service); 507 DISK_FULL as it is (the store refuses
        writes past its disk high-water mark); a NO_PERMISSION answer also marks the store not
        writable (R2)."""
        try:
            return self._http.request_status(method, path, params=params, json=json_body)
        except NoPermission:
            self._writable = (time.monotonic(), False)
            raise
        except DiskFull:
            raise
        except ClepsydraError as exc:
            if exc.http_status >= 500 and exc.http_status != Unavailable.http_status:
                exc.http_status = _BAD_GATEWAY
            raise

    # ---- health ----------------------------------------------------------------------------
    def healthz(self) -> StoreHealth:
        return read_answer(StoreHealth, self._call("GET", "/healthz"), "healthz")

    def is_writable(self) -> bool:
        """R2: the store's own answer (``/healthz`` ``writable``), trusted for a short TTL; a
        write answered NO_PERMISSION marks it not writable at once."""
        cached = self._writable
        now = time.monotonic()
        if cached is not None and now - cached[0] < self._writable_ttl_s:
            return cached[1]
        writable = self.healthz().writable
        self._writable = (now, writable)
        return writable

    # ---- consumer-group settings (the store keeps them durably) -----------------------------
    def group_settings(self, group: str) -> GroupSettings | None:
        """``GET /v1/groups/{group}/settings``, or None when the group has no settings."""
        try:
            doc = self._call("GET", f"/v1/groups/{segment(group)}/settings")
        except GroupNotFound:
            return None
        return GroupSettings.from_json(doc)

    def put_group_settings(self, group: str, settings: GroupSettings) -> bool:
        """``PUT /v1/groups/{group}/settings`` (written durably by the store before it
        answers); True when the group is new."""
        status, _ = self._call_status("PUT", f"/v1/groups/{segment(group)}/settings",
                                      json_body=settings.to_json())
        return status == 201

    def all_group_settings(self) -> dict[str, GroupSettings]:
        """``GET /v1/groups``: every group that has settings."""
        listing = read_answer(GroupSettingsList, self._call("GET", "/v1/groups"), "groups")
        return {g.group: GroupSettings(g.retry_queue_nums, g.retry_max_times)
                for g in listing.groups}

    # ---- topics ----------------------------------------------------------------------------
    def topic(self, name: str) -> TopicAnswer | None:
        """``GET /v1/topics/{topic}``, or None when the store has no such topic."""
        try:
            doc = self._call("GET", f"/v1/topics/{segment(name)}")
        except NotFound:
            return None
        return read_answer(TopicAnswer, doc, "topic")

    def ensure_topic(self, name: str, queues: int) -> int:
        """R3/R6: create a `%RETRY%`/`%DLQ%` topic on first use; the number of queues it really
        has (an existing topic keeps its count). Remembered per process."""
        known = self._topics.get(name)
        if known is not None:
            return known
        try:
            created = read_answer(TopicAnswer, self._call(
                "POST", "/v1/internal/topics", json_body=TopicCreate(name, queues).to_json()),
                "topic")
            count = len(created.queues) or queues
        except ClepsydraError as exc:
            if exc.http_status != 409:
                raise
            # Exists with another queue count (retryQueueNums changed): use what it has.
            info = self.topic(name)
            if info is None:
                raise
            count = len(info.queues) or 1
        with self._topics_lock:
            self._topics[name] = count
        return count

    def forget_topic(self, name: str) -> None:
        with self._topics_lock:
            self._topics.pop(name, None)

    # ---- messages --------------------------------------------------------------------------
    def headers(self, commitlog_offset: int) -> StoredMessage:
        """The message at a CommitLog offset without its body; MessageNotFound if none."""
        return self.message(commitlog_offset, with_body=False)

    def copies(self, msg_id: str) -> list[StoredMessage]:
        """``GET /v1/messages/{msgId}``: every stored copy of the message whose msgId (or one
        of whose offsetMsgIds) this is, oldest first; [] when there is none."""
        try:
            doc = self._call("GET", f"/v1/messages/{segment(msg_id)}")
        except NotFound:
            return []
        return read_answer(MessageList, doc, "message look-up").messages

    def message(self, commitlog_offset: int, *, with_body: bool = True) -> StoredMessage:
        """The message at a CommitLog offset (``GET /v1/commitlog/{offset}``)."""
        params = None if with_body else {"body": "false"}
        doc = self._call("GET", f"/v1/commitlog/{commitlog_offset}", params=params)
        return read_answer(StoredMessage, doc, "message")

    def copy(self, items: Sequence[CopyItem]) -> list[ProduceAnswer]:
        """``POST /v1/internal/copy``: the store copies stored messages (bodies stay there);
        where each copy was stored, in order."""
        doc = self._call("POST", "/v1/internal/copy", json_body=CopyBatch(list(items)).to_json())
        return read_answer(ProduceResults, doc, "copy").results

    def copy_range(self, request: RangeCopy) -> RangeCopyAnswer:
        """``POST /v1/internal/copy-range``: the store copies a range of a queue to a topic
        (or each message to its origin) in one write."""
        result = self._call("POST", "/v1/internal/copy-range", json_body=request.to_json())
        return read_answer(RangeCopyAnswer, result, "copy-range")

    def pull(self, topic: str, queue_id: int, queue_offset: int,
             max_count: int, *, with_body: bool = True) -> PullAnswer:
        """A pull (messages, nextOffset, minOffset, maxOffset); TopicNotFound if none.
        ``with_body=False``: headers only (``?body=false``), what scans and hints need."""
        params: dict[str, Any] = {"offset": queue_offset, "max": max_count}
        if not with_body:
            params["body"] = "false"
        doc = self._call("GET", f"/v1/topics/{segment(topic)}/queues/{queue_id}/messages",
                         params=params)
        return read_answer(PullAnswer, doc, "pull")


class StoreShards:
    """The retry service's store clients, one per store shard (DEC-store-shards): a send-back
    is read and written on the shard that holds its message, a group's dead letters are on
    every shard. The membership is read from the store it was given (``CLEPSYDRA_STORE_URL``);
    with one shard that store's client is shard 0's."""

    def __init__(self, bootstrap: StoreClient) -> None:
        self.bootstrap = bootstrap
        self.map = ShardMap(bootstrap.http)
        self._lock = threading.Lock()
        self._clients: dict[tuple[int, str], StoreClient] = {}

    @property
    def clustered(self) -> bool:
        return self.map.clustered

    def ids(self) -> list[int]:
        return self.map.ids()

    def of(self, shard: int) -> StoreClient:
        """Shard ``shard``'s client; ClepsydraError for a shard the cluster does not have."""
        if not self.map.clustered and shard == 0:
            return self.bootstrap
        member = self.map.member(shard)
        if member is None:
            raise NotFound(f"no store shard {shard} in the cluster (shards "
                           f"{', '.join(map(str, self.map.ids()))})")
        key = (shard, member.url)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = self.bootstrap.sibling(member.url, shard)
            return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        self.map.close()

