"""The store cluster as its clients see it (DEC-store-shards): every shard's id, address and
write permission, read from one shard's ``GET /v1/cluster?shares=false`` - the bootstrap
address first (``CLEPSYDRA_STORE_URL``: all any part needs), then the other shards it learnt
of - and an HTTP client per shard. Read once, then again every ``refresh_s`` (30 s, as
RocketMQ's clients poll their name server) and whenever a caller says a shard failed.

The membership is read only once an answer of the bootstrap store said the cluster has more
than one shard (``X-Clepsydra-Shards``, which a one-store store never sends): with one shard
the bootstrap client is shard 0's, the address the caller gave, and a one-store stack is
called exactly as before shards, not one call more. A store that does not know
``/v1/cluster`` (a store from before shards) is one shard too.

Used by the SDK (routes, producers, consumers), the scheduler (one run per level per shard),
the retry service (a message's shard) and the analytics exporter (every shard's queues).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from clepsydra_core.errors import ClepsydraError, NotFound
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.cluster import UP, ClusterAnswer
from clepsydra_core.wire.codec import read_answer

logger = logging.getLogger(__name__)

REFRESH_S = 30.0
"""How old the membership may get before it is read again (RocketMQ's route poll)."""
RETRY_S = 1.0
"""After a failed read, how long before the next one (the old membership is kept meanwhile)."""


@dataclass(frozen=True, slots=True)
class Member:
    id: int
    url: str
    writable: bool = True
    """Takes new messages (false while it is drained, or on a read-only store)."""
    reachable: bool = True
    """Answered the shard that answered the membership read."""


class ShardMap:
    def __init__(self, bootstrap: HttpClient, *, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic, ask: bool = False) -> None:
        """``ask``: read the membership at first use whatever the answers said (a service
        that must serve every shard from its start: the scheduler), not only once an answer
        named a cluster."""
        self.bootstrap = bootstrap
        self.refresh_s = refresh_s
        self.ask = ask
        self._clock = clock
        self._lock = threading.Lock()
        self._members: list[Member] | None = None
        self._read_at = float("-inf")
        self._failed_at = float("-inf")
        self._clients: dict[int, HttpClient] = {}
        self._alone = [Member(0, bootstrap.base_url)]
        """The membership before it is read: the bootstrap store alone, made once (its URL
        does not change), not a new ``Member`` a call (DEC-sdk-send-path)."""

    # ---- membership ------------------------------------------------------------------------

    def members(self) -> list[Member]:
        """Every shard, by id. Read only once an answer of the bootstrap store said it has
        peers (``SHARDS_HEADER``): until then the bootstrap store is the one shard, called as
        before shards, with no call of its own. Then read again once ``refresh_s`` passed or
        when an answer names another size. A read that fails keeps the membership known."""
        members = self._members
        hint: int = getattr(self.bootstrap, "shards_hint", 0)  # a stand-in client: one shard
        if members is None and hint <= 1 and not self.ask:
            return self._alone
        now = self._clock()
        if (members is None or now - self._read_at >= self.refresh_s
                or (hint > 1 and hint != len(members))) and now - self._failed_at >= RETRY_S:
            self.refresh()
            members = self._members
        return members or self._alone

    def ids(self) -> list[int]:
        return [m.id for m in self.members()]

    def member(self, shard: int) -> Member | None:
        return next((m for m in self.members() if m.id == shard), None)

    @property
    def clustered(self) -> bool:
        """More than one shard. Before the membership is read (no answer named a cluster)
        the answer is False without a call of ``members`` (every send asks: DEC-sdk-send-path);
        the bootstrap client's last answer is looked at each time, so the first answer that
        names a cluster makes the next call read the membership."""
        if (self._members is None and not self.ask
                and getattr(self.bootstrap, "shards_hint", 0) <= 1):
            return False
        return len(self.members()) > 1

    def refresh(self) -> bool:
        """Read the membership now: from the bootstrap address, else from each shard known;
        True when one answered."""
        with self._lock:
            sources = [self.bootstrap] + [self._client_locked(m.id) for m in self._members or []
                                          if m.id != 0 or len(self._members or []) > 1]
            error: ClepsydraError | None = None
            for source in sources:
                try:
                    answer = read_answer(ClusterAnswer, source.get(
                        "/v1/cluster", {"shares": "false"}), "cluster")
                except NotFound:  # a store from before shards: one shard
                    self._set([Member(0, self.bootstrap.base_url)])
                    return True
                except ClepsydraError as exc:
                    error = exc
                    continue
                self._set([Member(s.id, s.url, bool(s.writable) if s.writable is not None
                                  else s.state == UP, s.state == UP)
                           for s in sorted(answer.shards, key=lambda s: s.id)])
                return True
            self._failed_at = self._clock()
            if self._members is None:
                self._members = [Member(0, self.bootstrap.base_url)]
            logger.warning("store cluster membership not readable (keeping the last known, %d "
                           "shard(s)): %s", len(self._members), error)
            return False

    def _set(self, members: list[Member]) -> None:
        old = {m.id: m.url for m in self._members or []}
        self._members = members
        self._read_at = self._clock()
        for m in members:
            if m.id in self._clients and old.get(m.id) != m.url and m.id != 0:
                self._clients.pop(m.id).close()
        if len(members) > 1 and [m.id for m in members] != sorted(old):
            logger.info("store cluster: %d shards %s", len(members),
                        ", ".join(f"{m.id}={m.url}" for m in members))

    # ---- clients ---------------------------------------------------------------------------

    def client(self, shard: int) -> HttpClient:
        """The HTTP client of a shard (with one shard, the bootstrap client)."""
        with self._lock:
            return self._client_locked(shard)

    def _client_locked(self, shard: int) -> HttpClient:
        members = self._members or []
        if len(members) <= 1 and shard == 0:
            return self.bootstrap
        client = self._clients.get(shard)
        if client is None:
            url = next((m.url for m in members if m.id == shard), None)
            if url is None:
                raise ClepsydraError(f"no store shard {shard} in the cluster "
                                     f"({len(members)} shard(s))")
            client = self._clients[shard] = self.bootstrap.sibling(url, f"store shard {shard}")
        return client

    def close(self) -> None:
        """Close the shards' clients (not the bootstrap client: its owner closes it)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
