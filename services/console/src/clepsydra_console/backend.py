"""What the pages read and do, over the services' v1 HTTP APIs like any client (the SDK's
:class:`~clepsydra_client.admin.AdminClient`), with the signed-in person's token so each service
checks their role too (DEC-console-viewer-role).

Every read is a :class:`Lookup`: a value, "nothing found" (the service answered 404) or "the
look-up failed" (any other error, with its message), so a page never shows a failure as an
empty list (DEC-console-honest-lists).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from clepsydra_client.admin import AdminClient
from clepsydra_client.consumer.offsets import queue_offsets
from clepsydra_client.consumer.rebalance import AverageStrategy, allocate_all
from clepsydra_client.message import MessageQueue
from clepsydra_console.shards import LagRow, ShardRead
from clepsydra_core import naming
from clepsydra_core.auth import token_digest
from clepsydra_core.errors import ClepsydraError, NotFound
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.groups import GroupOffsets

T = TypeVar("T")
_CLIENTS_MAX = 32
"""Clients kept (one per signed-in token, each with its keep-alive connections)."""


@dataclass(frozen=True, slots=True)
class Lookup(Generic[T]):
    """A read's outcome: ``value``; or ``missing`` (nothing found); or ``error`` (the look-up
    failed, saying why)."""

    value: T | None = None
    missing: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


def look(read: Callable[[], T]) -> Lookup[T]:
    """``read()`` as a :class:`Lookup`: a 404 is "nothing found", any other error a failure."""
    try:
        return Lookup(read())
    except NotFound:
        return Lookup(missing=True)
    except ClepsydraError as exc:
        return Lookup(error=_why(exc))


def _why(exc: ClepsydraError) -> str:
    return f"{exc.message} [{exc.code}]" if exc.code else exc.message


def each_shard(admin: AdminClient,
               read: Callable[[int, HttpClient], T]) -> list[ShardRead[T]]:
    """``read(shard, its client)`` for every store shard, each shard's outcome on its own: a
    shard that does not answer is a :class:`ShardRead` with its error, never a failure of the
    whole page (DEC-console-shards). With one store: that store, as shard 0."""
    out: list[ShardRead[T]] = []
    for shard, http in admin.shard_stores():
        try:
            out.append(ShardRead(shard, read(shard, http)))
        except ClepsydraError as exc:
            out.append(ShardRead(shard, error=_why(exc)))
    return out


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A group's queues as (shard, queueId) rows; the shards that did not answer (their
    queues listed without lag); the topics whose queues could not be listed, with why."""

    rows: list[LagRow]
    unreachable: list[int]
    errors: list[str]


def group_lag(admin: AdminClient, group: str) -> GroupLag:
    """A group's queues on every shard as (shard, queueId) rows, with lag read from each
    queue's shard (:class:`GroupLag`). The topics are those of :meth:`AdminClient.progress`:
    the live members' subscriptions, those with committed offsets, the group's retry topic;
    owners as the consumers compute them (SPEC C1, the average strategy)."""
    members = admin.consumers(group)
    committed: dict[MessageQueue, int] = {}
    failed: set[int] = set()
    for read in each_shard(admin, lambda _shard, http: read_answer(GroupOffsets, http.get(
            http.path("/v1/groups/{}/offsets", group)), "offsets")):
        if read.value is None:
            failed.add(read.shard)
        else:
            committed.update(queue_offsets(read.value, read.shard))
    names = set(members.topics) | {q.topic for q in committed}
    names.add(naming.retry_topic(group))
    broadcasting = any(c.message_model == "BROADCASTING" for c in members.consumers)
    rows: list[LagRow] = []
    errors: list[str] = []
    for name in sorted(names):
        try:
            route = admin.route(name)
        except NotFound:
            continue
        except ClepsydraError as exc:  # no shard that answered has it, some did not answer
            errors.append(f"topic {name}: {_why(exc)}")
            continue
        failed.update(route.unreachable)
        mqs = [MessageQueue(name, q.queue_id, q.shard) for q in route.queues]
        owners = {} if broadcasting else allocate_all(AverageStrategy(), mqs, members.ids)
        for q, mq in zip(route.queues, mqs, strict=True):
            ok = q.reachable and q.shard not in failed
            owner = "(every consumer)" if broadcasting and members.ids else owners.get(mq)
            rows.append(LagRow(name, q.shard, q.queue_id, q.max_offset if ok else None,
                               committed.get(mq), owner, ok))
    return GroupLag(rows, sorted(failed), errors)


class Clients:
    """One :class:`AdminClient` (store + retry) and one analytics client per token, the newest
    ``_CLIENTS_MAX`` kept; None: the console's own (auth off)."""

    def __init__(self, store_url: str, retry_url: str, analytics_url: str,
                 timeout_s: float) -> None:
        self.urls = (store_url, retry_url, analytics_url)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._admins: OrderedDict[str, tuple[AdminClient, HttpClient]] = OrderedDict()
        self.metrics_store = HttpClient(store_url, timeout_s=timeout_s, service="store",
                                        env_proxies=False)
        self.metrics_retry = HttpClient(retry_url, timeout_s=timeout_s,
                                        service="retry service", env_proxies=False)

    def _pair(self, token: str | None) -> tuple[AdminClient, HttpClient]:
        key = token_digest(token) if token else ""
        with self._lock:
            found = self._admins.get(key)
            if found is not None:
                self._admins.move_to_end(key)
                return found
            store, retry, analytics = self.urls
            pair = (AdminClient(store, retry, timeout_s=self.timeout_s, token=token),
                    HttpClient(analytics, timeout_s=self.timeout_s, service="analytics API",
                               env_proxies=False, token=token))
            self._admins[key] = pair
            while len(self._admins) > _CLIENTS_MAX:
                _, (old, old_analytics) = self._admins.popitem(last=False)
                old.close()
                old_analytics.close()
            return pair

    def admin(self, token: str | None) -> AdminClient:
        return self._pair(token)[0]

    def analytics(self, token: str | None) -> HttpClient:
        return self._pair(token)[1]

    def forget(self, token: str | None) -> None:
        """Close a signed-out token's client."""
        if not token:
            return
        with self._lock:
            pair = self._admins.pop(token_digest(token), None)
        if pair is not None:
            pair[0].close()
            pair[1].close()

    def close(self) -> None:
        with self._lock:
            pairs = list(self._admins.values())
            self._admins.clear()
        for admin, analytics in pairs:
            admin.close()
            analytics.close()
        self.metrics_store.close()
        self.metrics_retry.close()
