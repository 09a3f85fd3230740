"""Requests a second per token (docs/access-control.md): a token bucket per principal, holding at
most one second's worth, refilled continuously. Past it a request gets ``429 RATE_LIMITED``
with ``Retry-After`` and is not served; nothing else changes. A token's own ``ratePerS`` (tokens
file) wins over the service's ``CLEPSYDRA_AUTH_RATE_PER_S``; 0 means no limit; the service
roles (scheduler, retry, analytics) are never limited: they move what clients already sent.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from clepsydra_core.auth import SERVICE_ROLES, Principal
from clepsydra_core.errors import RateLimited
from clepsydra_core.settings import AUTH_RATE_VAR

_BUCKETS_MAX = 100_000


class RateLimiter:
    """Token buckets by principal name; thread-safe."""

    def __init__(self, default_rate_per_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default_rate_per_s = default_rate_per_s
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)
        self._lock = threading.Lock()

    def rate_of(self, principal: Principal) -> float:
        if principal.role in SERVICE_ROLES:
            return 0.0
        return principal.rate_per_s or self.default_rate_per_s

    def take(self, principal: Principal) -> None:
        """Count one request of ``principal``; RateLimited when it is over its rate."""
        rate = self.rate_of(principal)
        if rate <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(principal.name, (rate, now))
            tokens = min(rate, tokens + (now - at) * rate)
            if tokens < 1.0:
                self._buckets[principal.name] = (tokens, now)
                wait_s = max(1, math.ceil((1.0 - tokens) / rate))
                raise RateLimited(f"token {principal.name!r} is over its {rate:g} requests a "
                                  f"second (ratePerS, {AUTH_RATE_VAR})", retry_after_s=wait_s)
            if len(self._buckets) >= _BUCKETS_MAX:
                self._buckets.clear()
            self._buckets[principal.name] = (tokens - 1.0, now)
