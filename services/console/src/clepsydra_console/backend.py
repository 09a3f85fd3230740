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
from clepsydra_core.auth import token_digest
from clepsydra_core.errors import ClepsydraError, NotFound
from clepsydra_core.http import HttpClient

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
        return Lookup(error=f"{exc.message} [{exc.code}]" if exc.code else exc.message)


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
