"""The gateway's calls to the store and the retry service, over their v1 HTTP APIs with the
project's one HTTP client (clepsydra_core.runtime.http), as every other part makes them.

A call made for a client carries that client's token (``Authorization: Bearer``), so the store
and the retry service check its role as they check the SDK's; the gateway's own calls (the
sweeper's send-backs and commits) carry the gateway's token (``CLEPSYDRA_TOKEN``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clepsydra_core.errors import (
    ClepsydraError,
    GroupNotFound,
    NotFound,
    NotSent,
    TopicNotFound,
    Unavailable,
)
from clepsydra_core.groups import GroupSettings
from clepsydra_core.runtime.http import HttpClient, Json

if TYPE_CHECKING:
    from clepsydra_client.routing import Router

logger = logging.getLogger(__name__)

TOPIC_TTL_S = 2.0
"""How long a topic's queue count is trusted (queues are added rarely; a group's retry topic
appears with its first send-back)."""
GROUP_TTL_S = 5.0
REFUSED_PAUSE_S = 0.1
MIN_CALL_S = 0.2
"""The least time a store call is given."""
SHARD_REST_S = 1.0
"""How long a store shard whose read failed is left out of receives (then read again)."""


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


Place = tuple[int, int]
"""A queue of a topic: (the store shard it is on, its queue id there)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    places: tuple[Place, ...]
    """Every queue of the topic, shard by shard, then by queue id: the topic's global queue
    list (one store: shard 0's queues 0..n-1), which a FIFO message group hashes over."""
    min_offsets: dict[Place, int]

    @property
    def queues(self) -> int:
        return len(self.places)

    @property
    def shards(self) -> list[int]:
        return sorted({shard for shard, _ in self.places})


class Backend:
    """The store (one, or a cluster of store shards: DEC-store-shards) and the retry service
    (thread-safe).

    With one store every call goes to ``store_url`` exactly as before shards. Once an answer of
    that store says the cluster has more than one shard (``X-Clepsydra-Shards``), the SDK's
    routing (``clepsydra_client.routing.Router``: membership, routes, picking a shard, sending
    again elsewhere what could not have been stored, DEC-shard-send-retry) places every call on
    its queue's shard; it is imported only then."""

    def __init__(self, store_url: str, retry_url: str, *, timeout_s: float,
                 refused_retry_s: float, pool_size: int = 16) -> None:
        self.store = HttpClient(store_url, timeout_s=timeout_s, service="store",
                                env_proxies=False, pool_size=pool_size)
        self.retry = HttpClient(retry_url, timeout_s=timeout_s, service="retry service",
                                env_proxies=False, pool_size=pool_size)
        self.refused_retry_s = refused_retry_s
        self._topics = _Cache()
        self._groups = _Cache()
        self._router: Router | None = None
        self._router_lock = threading.Lock()
        self._resting: dict[int, float] = {}

    # ---- the store cluster -------------------------------------------------------------

    def router(self) -> Router | None:
        """The store cluster's routes, once the store said it has more than one shard; None
        with one store (called as before shards)."""
        router = self._router
        if router is None:
            if self.store.shards_hint <= 1:
                return None
            with self._router_lock:
                if self._router is None:
                    from clepsydra_client.routing import Router  # a cluster only

                    self._router = Router(self.store)
                router = self._router
        return router if router.clustered else None

    def client(self, shard: int) -> HttpClient:
        """The HTTP client of a store shard (shard 0 of one store: the store's)."""
        router = self.router()
        if router is None:
            if shard != 0:
                raise Unavailable(f"no store shard {shard}: the store at "
                                  f"{self.store.base_url} is a cluster of one")
            return self.store
        return router.client(shard)

    def usable(self, shard: int) -> bool:
        """False for ``SHARD_REST_S`` after a read of the shard failed: a receive goes on with
        the other shards meanwhile, without waiting on this one at every poll."""
        return self._resting.get(shard, 0.0) <= time.monotonic()

    def rest(self, shard: int, error: ClepsydraError) -> None:
        if self.usable(shard):
            logger.warning("store shard %d not answering, left out of receives for %.0f s: %s",
                           shard, SHARD_REST_S, error.message)
        self._resting[shard] = time.monotonic() + SHARD_REST_S

    # ---- the store ---------------------------------------------------------------------

    def topic(self, topic: str, token: str | None, *,
              unreadable_is_none: bool = False) -> TopicInfo | None:
        """The topic's queues on every shard (None: no shard has such a topic), cached
        briefly. ``unreadable_is_none``: with a cluster, a route no shard could answer (none
        that answered has the topic, one did not answer: a group's retry topic not made yet
        while a shard is down) is None for now, not the error."""
        known, cached = self._topics.get(topic)
        if known:
            info: TopicInfo | None = cached
            return info
        router = self.router()
        info = None
        if router is None:
            info = self._one_store_topic(topic, token)
            router = self.router()  # its answer may have said the store has peers
        if router is not None:
            try:
                route = router.route(topic)
            except Unavailable:
                if not unreadable_is_none:
                    raise
                route = None
            info = None if route is None else TopicInfo(
                topic, tuple((q.shard, q.queue_id) for q in route.info.queues),
                {(q.shard, q.queue_id): q.min_offset for q in route.info.queues})
        self._topics.put(topic, info, TOPIC_TTL_S if info else TOPIC_TTL_S / 2)
        return info

    def _one_store_topic(self, topic: str, token: str | None) -> TopicInfo | None:
        try:
            doc = self.store.get(self.store.path("/v1/topics/{}", topic), headers=_auth(token))
        except (TopicNotFound, NotFound):
            return None
        queues = doc.get("queues") or []
        if not isinstance(queues, list):
            return TopicInfo(topic, tuple((0, q) for q in range(int(queues))), {})
        ids = [int(q.get("queueId", i)) for i, q in enumerate(queues)]
        return TopicInfo(topic, tuple((0, q) for q in ids),
                         {(0, q): int(d.get("minOffset", 0)) for q, d in zip(ids, queues,
                                                                             strict=True)})

    def place(self, topic: str, index: int, token: str | None) -> Place:
        """The queue at ``index`` of the topic's global queue list (TopicInfo.places)."""
        router = self.router()
        if router is None:
            return 0, index
        queue = router.queue_of(topic, index)
        return queue.shard, queue.queue_id

    def max_offsets(self, topic: str, shard: int, token: str | None) -> dict[int, int]:
        """Each queue's end (one past its last entry) on one shard, read now: a receive pulls
        only the queues that hold something past its cursor."""
        http = self.client(shard)
        doc = http.get(http.path("/v1/topics/{}", topic), headers=_auth(token))
        return {int(q["queueId"]): int(q["maxOffset"]) for q in doc.get("queues") or []}

    def produce(self, topic: str, message: Json, token: str | None,
                within_s: float | None = None, shard: int | None = None) -> tuple[Json, int]:
        """One message: (the store's answer, the shard that stored it). ``shard``: that shard
        (the message names its queue there); None: a plain send, which a cluster places
        (routing.py). A store that refuses connections (restarting) is tried again for up to
        ``refused_retry_s`` - with a cluster, a plain send goes to another shard instead:
        nothing reached it, so nothing can be stored twice. ``within_s``: the caller's time
        left (the client's deadline), which no wait here outlasts."""
        return self._send(topic, "/v1/topics/{}/messages", message, token, within_s, shard)

    def produce_batch(self, topic: str, messages: list[Json], token: str | None,
                      within_s: float | None = None,
                      shard: int | None = None) -> tuple[list[Json], int]:
        """Several messages, all or none, on one shard (as ``produce``)."""
        answer, stored_on = self._send(topic, "/v1/topics/{}/messages/batch",
                                       {"messages": messages}, token, within_s, shard)
        return list(answer.get("results", [])), stored_on

    def _send(self, topic: str, template: str, body: Json, token: str | None,
              within_s: float | None, shard: int | None) -> tuple[Json, int]:
        router = self.router()
        deadline = self._deadline(within_s)
        if router is None or shard is not None:
            http = self.store if router is None else router.client(shard or 0)
            return self._refused_retry(lambda timeout_s: http.post(
                http.path(template, topic), body, headers=_auth(token), timeout_s=timeout_s),
                deadline), shard or 0
        # a plain send over the shards; one that could not have been stored goes to another
        # (DEC-shard-send-retry)
        return router.send(topic, lambda http: http.post(
            http.path(template, topic), body, headers=_auth(token),
            timeout_s=max(deadline - time.monotonic(), MIN_CALL_S)))

    def _deadline(self, within_s: float | None) -> float:
        return time.monotonic() + (self.store.timeout_s if within_s is None
                                   else max(min(within_s, self.store.timeout_s), MIN_CALL_S))

    def _refused_retry(self, call: Any, deadline: float) -> Json:
        give_up = min(time.monotonic() + self.refused_retry_s, deadline - MIN_CALL_S)
        while True:
            try:
                result: Json = call(max(deadline - time.monotonic(), MIN_CALL_S))
                return result
            except Unavailable as exc:
                if (not (isinstance(exc, NotSent)
                         or isinstance(exc.__cause__, ConnectionRefusedError))
                        or time.monotonic() >= give_up):
                    raise
                time.sleep(REFUSED_PAUSE_S)

    def pull(self, topic: str, shard: int, queue_id: int, queue_offset: int, max_count: int,
             tags: str | None, token: str | None) -> Json:
        http = self.client(shard)
        return http.get(http.path("/v1/topics/{}/queues/{}/messages", topic, queue_id),
                        {"offset": queue_offset, "max": max_count, "tags": tags},
                        headers=_auth(token))

    def group_offsets(self, group: str, topic: str, shard: int,
                      token: str | None) -> dict[int, int]:
        """The group's committed offsets on one shard's queues of the topic."""
        http = self.client(shard)
        doc = http.get(http.path("/v1/groups/{}/offsets", group), {"topic": topic},
                       headers=_auth(token))
        queues = (doc.get("offsets") or {}).get(topic) or {}
        return {int(k): int(v) for k, v in queues.items()}

    def commit(self, group: str, topic: str, shard: int, queue_id: int, queue_offset: int,
               token: str | None) -> None:
        """SPEC C4, on the queue's shard."""
        http = self.client(shard)
        http.put(http.path("/v1/groups/{}/offsets", group),
                 {"topic": topic, "queueId": queue_id, "offset": queue_offset},
                 headers=_auth(token))

    def cancel(self, msg_id: str, shard: int, token: str | None) -> Json:
        """The store's cancel, asked of the shard that holds the message (which answers for
        the others too, should it not hold it)."""
        http = self.client(shard)
        return http.delete(http.path("/v1/messages/{}", msg_id), headers=_auth(token))

    def store_health(self) -> bool:
        try:
            self.store.get("/healthz", timeout_s=2.0)
        except Exception:  # any failure is "not healthy", said in /healthz
            return False
        return True

    # ---- the retry service -------------------------------------------------------------

    def send_back(self, group: str, msg_id: str, delay_level: int, *, topic: str, shard: int,
                  queue_id: int, queue_offset: int, reason: str, consumer_id: str,
                  token: str | None) -> Json:
        """SPEC R1: a failed message back to its group (level 1: as soon as the table allows;
        below 0: the DLQ, R6), written on the shard that holds it: with a cluster the request
        names it (``shard``), as the SDK's send-back does."""
        body: Json = {"msgId": msg_id, "delayLevel": delay_level, "topic": topic,
                      "queueId": queue_id, "queueOffset": queue_offset, "reason": reason,
                      "consumerId": consumer_id or None}
        if shard or self.router() is not None:
            body["shard"] = shard
        return self.retry.post(self.retry.path("/v1/groups/{}/send-back", group), body,
                               headers=_auth(token))

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
        if self._router is not None:
            self._router.close()
        self.store.close()
        self.retry.close()
