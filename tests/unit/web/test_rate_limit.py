"""Requests a second per token: the token bucket of clepsydra_web."""

from __future__ import annotations

import pytest

from clepsydra_core.auth import Principal, Role
from clepsydra_core.auth_tokens import parse_entry, parse_rate
from clepsydra_core.errors import RateLimited, ValidationError
from clepsydra_web.rate_limit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_token_gets_its_rate_and_then_429_with_retry_after() -> None:
    clock = Clock()
    limiter = RateLimiter(0.0, clock)
    slow = Principal("slow", Role.PRODUCER, ("*",), rate_per_s=2)
    limiter.take(slow)
    limiter.take(slow)  # a second's worth at once
    with pytest.raises(RateLimited) as refused:
        limiter.take(slow)
    assert refused.value.http_status == 429 and refused.value.retry_after_s == 1
    assert "2 requests a second" in str(refused.value)
    clock.now += 0.5  # half a second: one more
    limiter.take(slow)
    with pytest.raises(RateLimited):
        limiter.take(slow)


def test_the_default_applies_to_tokens_without_their_own_and_never_to_services() -> None:
    clock = Clock()
    limiter = RateLimiter(1.0, clock)
    client = Principal("c", Role.CONSUMER, ("*",), ("g",))
    limiter.take(client)
    with pytest.raises(RateLimited):
        limiter.take(client)
    other = Principal("d", Role.ADMIN)  # buckets are per token
    limiter.take(other)
    scheduler = Principal("s", Role.SCHEDULER)
    for _ in range(100):
        limiter.take(scheduler)  # the service roles move what clients sent: no limit
    unlimited = RateLimiter(0.0, clock)
    for _ in range(100):
        unlimited.take(client)


def test_the_tokens_file_carries_a_rate() -> None:
    entry = parse_entry({"name": "n", "role": "producer", "sha256": "a" * 64,
                         "topics": ["*"], "ratePerS": 50})
    assert entry.principal().rate_per_s == 50 and entry.describe()["ratePerS"] == 50
    assert "ratePerS" not in parse_entry({"name": "n", "role": "admin",
                                          "sha256": "a" * 64}).describe()
    for bad in (-1, "5", True):
        with pytest.raises(ValidationError, match="ratePerS"):
            parse_rate(bad)
