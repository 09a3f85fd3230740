"""The gateway's calls to the store and the retry service, over their v1 HTTP APIs with the
project's one HTTP client (clepsydra_core.http), as every other part makes them.

A call made for a client carries that client's token (``Authorization: Bearer``), so the store
and the retry service check its role as they check the SDK's; the gateway's own calls (the
sweeper's send-backs and commits) carry the gateway's token (``CLEPSYDRA_TOKEN``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from clepsydra_core.errors import GroupNotFound, NotFound, TopicNotFound, Unavailable
from clepsydra_core.groups import GroupSettings
from clepsydra_core.http import HttpClient, Json

TOPIC_TTL_S = 2.0
"""How long a topic's queue count is trusted (queues are added rarely; a group's retry topic
appears with its first send-back)."""
GROUP_TTL_S = 5.0
REFUSED_PAUSE_S = 0.1
MIN_CALL_S = 0.2
"""The least time a store call is given."""


class _Cache:
    """Answers kept for a while (thread-safe)."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[bool, Any]:
        with self._lock:
            hit = self._items.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return True, hit[1]
        return False, None

    def put(self, key: str, value: Any, ttl_s: float) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + ttl_s, value)


def _auth(token: str | None) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {token}"} if token else None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    queues: int
    min_offsets: dict[int, int]


class Backend:
    """The store and the retry service (thread-safe)."""

    def __init__(self, store_url: str, retry_url: str, *, timeout_s: float,
                 refused_retry_s: float, pool_size: int = 16) -> None:
        self.store = HttpClient(store_url, timeout_s=timeout_s, service="store",
                                env_proxies=False, pool_size=pool_size)
        self.retry = HttpClient(retry_url, timeout_s=timeout_s, service="retry service",
                                env_proxies=False, pool_size=pool_size)
        self.refused_retry_s = refused_retry_s
        self._topics = _Cache()
        self._groups = _Cache()

    # ---- the store ---------------------------------------------------------------------

    def topic(self, topic: str, token: str | None) -> TopicInfo | None:
        """The topic's queues (None: the store has no such topic), cached briefly."""
        known, cached = self._topics.get(topic)
        if known:
            info: TopicInfo | None = cached
            return info
        try:
            doc = self.store.get(self.store.path("/v1/topics/{}", topic), headers=_auth(token))
        except TopicNotFound:
            info = None
        except NotFound:
            info = None
        else:
            queues = doc.get("queues") or []
            info = TopicInfo(topic, len(queues) if isinstance(queues, list) else int(queues),
                             {int(q.get("queueId", i)): int(q.get("minOffset", 0))
                              for i, q in enumerate(queues)} if isinstance(queues, list)
                             else {})
        self._topics.put(topic, info, TOPIC_TTL_S if info else TOPIC_TTL_S / 2)
        return info

    def max_offsets(self, topic: str, token: str | None) -> dict[int, int]:
        """Each queue's end (one past its last entry), read now: a receive pulls only the
        queues that hold something past its cursor."""
        doc = self.store.get(self.store.path("/v1/topics/{}", topic), headers=_auth(token))
        return {int(q["queueId"]): int(q["maxOffset"]) for q in doc.get("queues") or []}

    def produce(self, topic: str, message: Json, token: str | None,
                within_s: float | None = None) -> Json:
        """One message; a store that refuses connections (restarting) is tried again for up to
        ``refused_retry_s``: nothing reached it, so nothing can be stored twice. ``within_s``:
        the caller's time left (the client's deadline), which no wait here outlasts."""
        return self._refused_retry(lambda timeout_s: self.store.post(
            self.store.path("/v1/topics/{}/messages", topic), message, headers=_auth(token),
            timeout_s=timeout_s), within_s)

    def produce_batch(self, topic: str, messages: list[Json], token: str | None,
                      within_s: float | None = None) -> list[Json]:
        answer = self._refused_retry(lambda timeout_s: self.store.post(
            self.store.path("/v1/topics/{}/messages/batch", topic), {"messages": messages},
            headers=_auth(token), timeout_s=timeout_s), within_s)
        return list(answer.get("results", []))

    def _refused_retry(self, call: Any, within_s: float | None) -> Json:
        now = time.monotonic()
        deadline = now + (self.store.timeout_s if within_s is None
                          else max(min(within_s, self.store.timeout_s), MIN_CALL_S))
        give_up = min(now + self.refused_retry_s, deadline - MIN_CALL_S)
        while True:
            try:
                result: Json = call(max(deadline - time.monotonic(), MIN_CALL_S))
                return result
            except Unavailable as exc:
                if (not isinstance(exc.__cause__, ConnectionRefusedError)
                        or time.monotonic() >= give_up):
                    raise
                time.sleep(REFUSED_PAUSE_S)

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
             tags: str | None, token: str | None) -> Json:
        return self.store.get(
            self.store.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
            {"offset": queue_offset, "max": max_count, "tags": tags}, headers=_auth(token))

    def group_offsets(self, group: str, topic: str, token: str | None) -> dict[int, int]:
        doc = self.store.get(self.store.path("/v1/groups/{}/offsets", group), {"topic": topic},
                             headers=_auth(token))
        queues = (doc.get("offsets") or {}).get(topic) or {}
        return {int(k): int(v) for k, v in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int,
               token: str | None) -> None:
        self.store.put(self.store.path("/v1/groups/{}/offsets", group),
                       {"topic": topic, "queueId": queue_id, "offset": queue_offset},
                       headers=_auth(token))

    def cancel(self, msg_id: str, token: str | None) -> Json:
        return self.store.delete(self.store.path("/v1/messages/{}", msg_id),
                                 headers=_auth(token))

    def store_health(self) -> bool:
        try:
            self.store.get("/healthz", timeout_s=2.0)
        except Exception:  # any failure is "not healthy", said in /healthz
            return False
        return True

    # ---- the retry service -------------------------------------------------------------

    def send_back(self, group: str, msg_id: str, delay_level: int, *, topic: str,
                  queue_id: int, queue_offset: int, reason: str, consumer_id: str,
                  token: str | None) -> Json:
        """SPEC R1: a failed message back to its group (level 1: as soon as the table allows;
        below 0: the DLQ, R6)."""
        return self.retry.post(self.retry.path("/v1/groups/{}/send-back", group), {
            "msgId": msg_id, "delayLevel": delay_level, "topic": topic, "queueId": queue_id,
            "queueOffset": queue_offset, "reason": reason, "consumerId": consumer_id or None,
        }, headers=_auth(token))

    def group_settings(self, group: str, token: str | None) -> GroupSettings:
        """The group's retry settings (R3, R5), cached briefly; an unknown group has the
        defaults (it is created with them at its first send-back)."""
        known, cached = self._groups.get(group)
        if known:
            found: GroupSettings = cached
            return found
        try:
            doc = self.retry.get(self.retry.path("/v1/groups/{}", group), headers=_auth(token))
            settings = GroupSettings.from_json(doc)
        except (GroupNotFound, NotFound):
            settings = GroupSettings()
        self._groups.put(group, settings, GROUP_TTL_S)
        return settings

    def close(self) -> None:
        self.store.close()
        self.retry.close()
