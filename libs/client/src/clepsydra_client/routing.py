"""Where a topic's queues are and which store shard a send goes to (DEC-store-shards): the
SDK's side of a cluster of stores, over one bootstrap address.

- :class:`Router` keeps the cluster's membership (``clepsydra_core.runtime.shard_map``) and each
  topic's route (``GET /v1/routes/{topic}``: every (shard, queueId) with its shard's address),
  read again every ``refresh_s`` (``CLEPSYDRA_CLIENT_ROUTE_REFRESH_S``, 30 s), at once after a
  failure, and as soon as any shard's answer names more shards than the membership has (a
  shard added to the cluster: its peers restarted with a larger ``CLEPSYDRA_STORE_SHARDS``):
  a running producer sends to it and a running consumer takes its queues without a restart
  (DEC-route-refresh).
- A plain send goes to the shards in turn (each shard's store then spreads it over its own
  queues), skipping shards that are drained or unreachable, and for ``AVOID_S`` one that just
  refused or failed a send (RocketMQ's producer avoids a broker that failed it).
- A send the store did not take and could not have stored (the connection was refused or broke
  before the request was written, 403 NO_PERMISSION of a drained shard, 507 DISK_FULL) is sent
  again to another shard, up to ``SEND_RETRIES`` times: a dead shard costs a producer one
  retry, not an error. A send whose answer was lost (the connection broke after the request was
  written, a timeout, a 5xx) is not: the store may have stored it, and resending would store it
  twice (DEC-shard-send-retry).
- A send with a queue (``queue_id``: an index into the topic's global queue list, shard by
  shard) or a hash key (``hash_key``: that list hashed) goes to that one queue, never elsewhere:
  ordering per queue is the point.

With one shard none of this is used: every call goes to the bootstrap address as before.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from clepsydra_client.message import MessageQueue
from clepsydra_client.settings import route_refresh_s
from clepsydra_client.topics import QueueInfo, TopicInfo, fetch_topic_or_none
from clepsydra_core.errors import (
    ClepsydraError,
    DiskFull,
    NoPermission,
    NotFound,
    NotSent,
    Unavailable,
    ValidationError,
)
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.runtime.shard_map import RETRY_S, Member, ShardMap
from clepsydra_core.wire.cluster import RouteAnswer
from clepsydra_core.wire.codec import read_answer

logger = logging.getLogger(__name__)

T = TypeVar("T")
AVOID_S = 5.0
"""How long a shard that refused or failed a send is left out of plain sends."""
INCOMPLETE_REFRESH_S = 2.0
"""A route without queues on every shard (a retry topic a heartbeat is making on the others, a
shard that did not answer) is read again after this long, not after ``refresh_s``."""
SEND_RETRIES = 2
"""Other shards a plain send is tried on after the first (RocketMQ's
retryTimesWhenSendFailed)."""


def sent_elsewhere(exc: ClepsydraError) -> bool:
    """A send failed in a way that proves nothing was stored: it may go to another shard."""
    return isinstance(exc, NotSent | NoPermission | DiskFull)


@dataclass(frozen=True, slots=True)
class Route:
    """A topic's queues on every shard, and which shards take messages and answer."""

    info: TopicInfo
    writable: frozenset[int]
    unreachable: frozenset[int]
    read_at: float

    def queues(self) -> list[MessageQueue]:
        return sorted(self.info.message_queues())


def hash_index(key: str, size: int) -> int:
    """The queue a hash key picks among ``size`` (CRC-32: the same in every process)."""
    return zlib.crc32(key.encode()) % size


class Router:
    """Routes of one client over one bootstrap store address. Thread-safe."""

    def __init__(self, store: HttpClient, *, refresh_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``refresh_s``: None reads ``CLEPSYDRA_CLIENT_ROUTE_REFRESH_S`` (default 30 s)."""
        self.store = store
        if refresh_s is None:
            refresh_s = route_refresh_s()
        self.refresh_s = refresh_s
        self.shards = ShardMap(store, refresh_s=refresh_s, clock=clock)
        self._clock = clock
        self._lock = threading.Lock()
        self._routes: dict[str, Route] = {}
        self._avoid: dict[int, float] = {}
        self._turn = itertools.count()
        self._grown_at = float("-inf")
        self._watched_members: list[Member] | None = None
        self._watched: list[HttpClient] = []
        """Every shard's client, whose answers say how many shards there are."""

    # ---- membership --------------------------------------------------------------------

    @property
    def clustered(self) -> bool:
        return self.shards.clustered

    def members(self) -> list[Member]:
        return self.shards.members()

    def _notice_growth(self, named: int = 0) -> None:
        """Read the membership now when a shard's last answer named more shards than it has
        (``X-Clepsydra-Shards``: a shard was added, DEC-route-refresh), or a route read just
        now has queues on ``named`` shards, more than it has; at most once per ``RETRY_S``
        (while a rolling restart is under way the shards disagree). The ShardMap itself looks
        only at the bootstrap client's answers, and with more than one shard a client's calls
        go through each shard's own client."""
        members = self.shards.members()
        if len(members) <= 1:
            return  # one store: the ShardMap watches the bootstrap client's answers
        if members is not self._watched_members:  # read again: the clients to watch
            self._watched_members = members
            self._watched = [self.shards.client(m.id) for m in members]
        seen = named
        for client in self._watched:
            hint = client.shards_hint
            if hint > seen:
                seen = hint
        if seen <= len(members):
            return
        now = self._clock()
        if now - self._grown_at >= RETRY_S:
            self._grown_at = now
            logger.info("a store shard's answer names %d shards, %d known: reading the "
                        "membership again", seen, len(members))
            if self.shards.refresh() and len(self.shards.members()) > len(members):
                with self._lock:  # every route lacks the new shards' queues
                    self._routes.clear()

    def client(self, shard: int) -> HttpClient:
        return self.shards.client(shard)

    # ---- routes ------------------------------------------------------------------------

    def topic(self, topic: str, *, fresh: bool = False) -> TopicInfo | None:
        """Every queue of ``topic`` on every shard (None: no shard has it). With one shard
        the store's own topic answer, read each time (as before shards)."""
        if not self.clustered:
            info = fetch_topic_or_none(self.store, topic)
            if not self.clustered:  # its answer may have said the store has peers
                return info
        route = self.route(topic, fresh=fresh)
        return route.info if route is not None else None

    def route(self, topic: str, *, fresh: bool = False) -> Route | None:
        """The topic's route (None: no shard that answered has it)."""
        self._notice_growth()
        now = self._clock()
        with self._lock:
            known = self._routes.get(topic)
        if known is not None and not fresh:
            age = now - known.read_at
            if age < INCOMPLETE_REFRESH_S or (age < self.refresh_s and self._whole(known)):
                return known
        try:
            route = self._read_route(topic)
        except NotFound:
            with self._lock:
                self._routes.pop(topic, None)
            return None
        except ClepsydraError as exc:
            if known is None:
                raise
            logger.warning("route of topic %s not readable (keeping the last one): %s", topic,
                           exc)
            return known
        with self._lock:
            self._routes[topic] = route
        self._notice_growth(max(route.info.shard_ids, default=-1) + 1)
        return route

    def _read_route(self, topic: str) -> Route:
        if not self.clustered:
            info = fetch_topic_or_none(self.store, topic)
            if info is None:
                raise NotFound(f"topic {topic} does not exist")
            return Route(info, frozenset({0}), frozenset(), self._clock())
        error: ClepsydraError | None = None
        for member in self._sources():
            try:
                answer = read_answer(RouteAnswer, self.client(member).get(
                    self.store.path("/v1/routes/{}", topic)), "route")
            except NotFound:
                raise
            except ClepsydraError as exc:
                error = exc
                self.shards.refresh()
                continue
            return self._route_of(answer)
        assert error is not None
        raise error

    def _sources(self) -> list[int]:
        """Shards to read a route from: the first one answering, the others in turn."""
        ids = self.shards.ids()
        start = next(self._turn) % len(ids)
        return ids[start:] + ids[:start]

    def _route_of(self, answer: RouteAnswer) -> Route:
        queues = tuple(QueueInfo(q.queue_id, q.min_offset or 0, q.max_offset or 0, q.shard)
                       for q in answer.queues)
        writable = frozenset(q.shard for q in answer.queues if q.writable and q.reachable)
        info = TopicInfo(answer.topic, queues)
        return Route(info, writable, frozenset(answer.unreachable), self._clock())

    def _whole(self, route: Route) -> bool:
        """The route has queues on every shard and every shard answered: else it is read
        again at each use (a retry topic a heartbeat is making on the other shards, a shard
        coming back), not only after ``refresh_s``."""
        return not route.unreachable and len(route.info.shard_ids) >= len(self.shards.ids())

    def forget(self, topic: str) -> None:
        """Read the topic's route again at its next use (a send failed)."""
        with self._lock:
            self._routes.pop(topic, None)

    # ---- sends -------------------------------------------------------------------------

    def avoid(self, shard: int) -> None:
        with self._lock:
            self._avoid[shard] = self._clock() + AVOID_S

    def pick(self, topic: str, tried: set[int]) -> int:
        """The shard a plain send of ``topic`` goes to: the writable shards in turn, those
        avoided last, those already tried not at all (NotSent when none is left)."""
        route = self.route(topic)
        if route is None:
            raise NotFound(f"topic {topic} does not exist")
        now = self._clock()
        known = set(self.shards.ids())  # a route read from a shard that knows more shards
        # than the membership does (a rolling restart that adds shards, shard 0 not yet
        # restarted): those have no address yet (DEC-route-refresh)
        candidates = sorted(s for s in route.info.shard_ids if s not in tried and s in known)
        with self._lock:
            avoided = {s for s, until in self._avoid.items() if until > now}
        preferred = [s for s in candidates if s in route.writable and s not in avoided]
        fallback = [s for s in candidates if s in route.writable] or candidates
        choice = preferred or fallback
        if not choice:
            raise NotSent(f"no store shard left to send topic {topic} to (tried "
                          f"{', '.join(map(str, sorted(tried)))})")
        return choice[next(self._turn) % len(choice)]

    def queue_of(self, topic: str, index: int) -> MessageQueue:
        """The queue at ``index`` of the topic's global queue list (sorted by shard, then
        queue id): what a send with ``queue_id`` names with more than one shard."""
        route = self.route(topic)
        if route is None:
            raise NotFound(f"topic {topic} does not exist")
        queues = route.queues()
        if not 0 <= index < len(queues):
            raise ValidationError(f"topic {topic} has queues 0..{len(queues) - 1} over "
                                  f"{len(route.info.shard_ids)} store shards, not queue_id "
                                  f"{index}", code="OFFSET_OUT_OF_RANGE")
        return queues[index]

    def hashed(self, topic: str, key: str) -> int:
        """The global queue index a hash key picks (``queue_id`` of the send)."""
        route = self.route(topic)
        if route is None:
            raise NotFound(f"topic {topic} does not exist")
        return hash_index(key, len(route.info.queues))

    def send(self, topic: str, call: Callable[[HttpClient], T]) -> tuple[T, int]:
        """``call`` on a shard's client for a plain send of ``topic`` (module docstring):
        (its answer, the shard). One shard: on the bootstrap client, as before shards."""
        if not self.clustered:
            return call(self.store), 0
        tried: set[int] = set()
        while True:
            shard = self.pick(topic, tried)
            try:
                return call(self.client(shard)), shard
            except ClepsydraError as exc:
                tried.add(shard)
                if not sent_elsewhere(exc):
                    if isinstance(exc, Unavailable):
                        self.avoid(shard)
                        self.forget(topic)
                    raise
                self.avoid(shard)
                self.forget(topic)
                route = self.route(topic)
                left = [] if route is None else [s for s in route.info.shard_ids
                                                 if s not in tried]
                if len(tried) > SEND_RETRIES or not left:
                    raise
                logger.info("send to store shard %d of topic %s failed (%s); sending to "
                            "another shard", shard, topic, exc.code)

    def close(self) -> None:
        self.shards.close()
