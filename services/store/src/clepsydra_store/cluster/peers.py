"""A store shard's calls to its peers (DEC-store-shards): one HTTP client per peer (the one
client of ``clepsydra_core.runtime.http``), every call marked ``X-Clepsydra-Scope: local`` so
the peer answers from its own data and never asks the others in turn, several peers asked at once.

A call forwards the caller's ``Authorization`` when there is one (the peer checks the same
token: every shard reads the same tokens); the shard's own calls (a new shard reading the topics
it lacks) carry the store's peer token. Timeouts are short (a peer that does not answer within
``timeout_s`` is marked unreachable, never waited for long): a request that fans out costs at
most about one peer timeout, not their sum.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from clepsydra_core.errors import ClepsydraError, Unavailable
from clepsydra_core.runtime.http import HttpClient, Json
from clepsydra_core.shards import ClusterShape
from clepsydra_core.wire.cluster import LOCAL, SCOPE_HEADER

logger = logging.getLogger(__name__)

T = TypeVar("T")
PEER_TIMEOUT_S = 5.0
PEER_CONNECT_TIMEOUT_S = 1.0
MAX_PARALLEL = 16
"""Peers asked at once; a bigger cluster is asked in waves of this many."""
RETRY_DELAYS_S = (0.2, 0.6)
"""A change every shard must take is tried again after these pauses when a peer did not
answer or failed on its side (5xx): three tries in all (``everywhere``)."""


class Peers:
    def __init__(self, shape: ClusterShape, *, token: str | None = None,
                 timeout_s: float = PEER_TIMEOUT_S,
                 connect_timeout_s: float = PEER_CONNECT_TIMEOUT_S) -> None:
        self.shape = shape
        self._clients = {i: HttpClient(shape.url_of(i), timeout_s=timeout_s,
                                       connect_timeout_s=connect_timeout_s,
                                       service=f"store shard {i}", env_proxies=False,
                                       token=token, spin_us=0)
                         for i in shape.others()}
        self._pool = (ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(self._clients)),
                                         thread_name_prefix="cluster-peer")
                      if self._clients else None)

    @property
    def ids(self) -> list[int]:
        return sorted(self._clients)

    def call(self, shard: int, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             json: Any = None, authorization: str | None = None,
             extra_headers: Mapping[str, str] | None = None) -> tuple[int, Json]:
        """(status, JSON) of one call to ``shard`` in the local scope; the error tree
        (``clepsydra_core.errors``) otherwise, Unavailable when it did not answer."""
        headers = {SCOPE_HEADER: LOCAL, **(extra_headers or {})}
        if authorization:
            headers["Authorization"] = authorization
        return self._clients[shard].request_status(
            method, path, params=dict(params) if params is not None else None, json=json,
            headers=headers)

    def each(self, fn: Callable[[int], T], shards: list[int] | None = None
             ) -> dict[int, T | ClepsydraError]:
        """``fn(shard)`` for every peer (or ``shards``) at once: its value, or the
        ClepsydraError it raised."""
        targets = self.ids if shards is None else shards
        if not targets:
            return {}

        def one(shard: int) -> T | ClepsydraError:
            try:
                return fn(shard)
            except ClepsydraError as exc:
                return exc

        if len(targets) == 1 or self._pool is None:
            return {s: one(s) for s in targets}
        # each call in a copy of the caller's context: its span is the calls' parent (O1)
        futures = {s: self._pool.submit(contextvars.copy_context().run, one, s)
                   for s in targets}
        return {s: f.result() for s, f in futures.items()}

    def retried(self, fn: Callable[[int], T]) -> Callable[[int], T]:
        """``fn`` tried again after :data:`RETRY_DELAYS_S` while the peer does not answer or
        fails on its side (5xx); a 4xx is its answer."""
        def attempt(shard: int) -> T:
            for delay_s in (*RETRY_DELAYS_S, None):
                try:
                    return fn(shard)
                except ClepsydraError as exc:
                    failed_there = isinstance(exc, Unavailable) or exc.http_status >= 500
                    if delay_s is None or not failed_there:
                        raise
                    logger.info("shard %d did not take a change (%s); trying again in %.1fs",
                                shard, exc, delay_s)
                    time.sleep(delay_s)
            raise AssertionError("unreachable")
        return attempt

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
