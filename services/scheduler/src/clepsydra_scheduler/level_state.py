"""A level's lease, progress offset and statistics: in Redis (:class:`RedisLevelState`) and
in memory for unit tests (:class:`MemoryLevelState`), same semantics.

- Lease (``naming.delay_lease_key``): a random token set with ``SET NX PX``; renewed and
  released only by the token that holds it (Lua compare-and-act), so one run per level
  delivers (SPEC D1) and a run that lost its lease cannot extend someone else's.
- Progress (``naming.delay_offset_key``): the next schedule-queue offset to deliver, missing =
  0 (SPEC D2); written only while the writer's token holds the lease (fencing), in the same
  Lua call that checks the token.
- Statistics (``naming.delay_stats_key``, see ``stats.py``): recorded in that same call.

The timers' lease (issue 15, ``naming.TIMER_LEASE_KEY``) is the same lease on its own key
(:class:`RedisTimerLease`); timers have no progress offset (the store's timer index has it).

In a Redis Cluster the three keys of a level would need one hash slot; the local stack and the
manifests use a single Redis.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from clepsydra_core.naming import (
    TIMER_LEASE_KEY,
    delay_lease_key,
    delay_offset_key,
    delay_stats_key,
)
from clepsydra_scheduler import stats
from clepsydra_scheduler.ports import LevelSample, LevelStateUnavailable

logger = logging.getLogger(__name__)

_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

_SAVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease, offset, stats. ARGV: token, offset, max lateness (-1: none), n counters,
# n (field, increment) pairs, then (field, value) gauge pairs.
_COMMIT = """
local saved = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  saved = 1
end
local i = 5
for _ = 1, tonumber(ARGV[4]) do
  redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local m = tonumber(ARGV[3])
if m >= 0 and m > tonumber(redis.call('HGET', KEYS[3], 'lateness_max_ms') or '-1') then
  redis.call('HSET', KEYS[3], 'lateness_max_ms', m)
end
if i <= #ARGV then
  redis.call('HSET', KEYS[3], unpack(ARGV, i, #ARGV))
end
return saved
"""


def _commit_args(token: str, queue_offset: int, sample: LevelSample | None) -> list[Any]:
    args: list[Any] = [token, queue_offset]
    if sample is None:
        return [*args, -1, 0]
    counters = stats.increments(sample)
    args += [stats.max_lateness(sample), len(counters)]
    for name, value in counters.items():
        args += [name, value]
    for name, value in stats.gauges(sample).items():
        args += [name, value]
    return args


class RedisLevelState:
    """The production LevelState. Every Redis failure surfaces as LevelStateUnavailable."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._save = client.register_script(_SAVE)
        self._commit = client.register_script(_COMMIT)

    @classmethod
    def from_url(cls, url: str) -> RedisLevelState:
        return cls(redis.Redis.from_url(url, decode_responses=True, socket_timeout=5.0,
                                        socket_connect_timeout=2.0, health_check_interval=30))

    @property
    def client(self) -> redis.Redis:
        return self._redis

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except redis.RedisError as exc:
            raise LevelStateUnavailable(f"redis {what} failed: {exc}") from exc

    def acquire(self, level: int, token: str, ttl_ms: int) -> bool:
        return bool(self._call("acquire", lambda: self._acquire(
            keys=[delay_lease_key(level)], args=[token, ttl_ms])))

    def renew(self, level: int, token: str, ttl_ms: int) -> bool:
        return bool(self._call("renew", lambda: self._renew(
            keys=[delay_lease_key(level)], args=[token, ttl_ms])))

    def release(self, level: int, token: str) -> bool:
        return bool(self._call("release", lambda: self._release(
            keys=[delay_lease_key(level)], args=[token])))

    def holder(self, level: int) -> str | None:
        value = self._call("get", lambda: self._redis.get(delay_lease_key(level)))
        return None if value is None else str(value)

    def lease_ttl_ms(self, level: int) -> int | None:
        """Milliseconds left on the level's lease; None when no run holds it."""
        ttl = int(self._call("pttl", lambda: self._redis.pttl(delay_lease_key(level))))
        return ttl if ttl >= 0 else None

    def ping(self) -> None:
        """LevelStateUnavailable unless Redis answers PING."""
        self._call("ping", self._redis.ping)

    def load(self, level: int) -> int:
        raw = self._call("load", lambda: self._redis.get(delay_offset_key(level)))
        if raw is None:
            return 0
        try:
            return int(raw)
        except ValueError:
            logger.warning("progress is not a number level=%d value=%r: starting at 0 "
                           "(the store skips what was already handed over)", level, raw)
            return 0

    def save(self, level: int, token: str, queue_offset: int) -> bool:
        return bool(self._call("save", lambda: self._save(
            keys=[delay_lease_key(level), delay_offset_key(level)], args=[token, queue_offset])))

    def commit(self, level: int, token: str, queue_offset: int, sample: LevelSample) -> bool:
        keys = [delay_lease_key(level), delay_offset_key(level), delay_stats_key(level)]
        args = _commit_args(token, queue_offset, sample)
        return bool(self._call("commit", lambda: self._commit(keys=keys, args=args)))

    def record(self, level: int, sample: LevelSample) -> None:
        values: dict[Any, Any] = dict(stats.gauges(sample))
        self._call("record", lambda: self._redis.hset(delay_stats_key(level), mapping=values))

    def read_stats(self, level: int) -> stats.LevelStats:
        raw = self._call("read", lambda: self._redis.hgetall(delay_stats_key(level)))
        return stats.LevelStats.from_hash(level, {str(k): str(v) for k, v in raw.items()})


class RedisTimerLease:
    """The timers' lease, with the levels' scripts (SET NX PX, compare-and-act)."""

    def __init__(self, state: RedisLevelState) -> None:
        self._state = state
        client = state.client
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, token: str, ttl_ms: int) -> bool:
        return bool(self._state._call("acquire", lambda: self._acquire(
            keys=[TIMER_LEASE_KEY], args=[token, ttl_ms])))

    def renew(self, token: str, ttl_ms: int) -> bool:
        return bool(self._state._call("renew", lambda: self._renew(
            keys=[TIMER_LEASE_KEY], args=[token, ttl_ms])))

    def release(self, token: str) -> bool:
        return bool(self._state._call("release", lambda: self._release(
            keys=[TIMER_LEASE_KEY], args=[token])))


class MemoryLevelState:
    """In-memory twin of RedisLevelState for unit tests; the lease expires by ``now_ms``."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self.leases: dict[int, tuple[str, int]] = {}
        """level -> (token, expiry ms)."""
        self.offsets: dict[int, int] = {}
        self.stats: dict[int, dict[str, int]] = {}
        self.down = False
        """Set True to make every call fail as if Redis were unreachable."""

    def _check(self) -> None:
        if self.down:
            raise LevelStateUnavailable("memory offset store is down")

    def _holder(self, level: int) -> str | None:
        lease = self.leases.get(level)
        if lease is None or lease[1] <= self._now_ms():
            self.leases.pop(level, None)
            return None
        return lease[0]

    def acquire(self, level: int, token: str, ttl_ms: int) -> bool:
        with self._lock:
            self._check()
            holder = self._holder(level)
            if holder not in (None, token):
                return False
            self.leases[level] = (token, self._now_ms() + ttl_ms)
            return True

    def renew(self, level: int, token: str, ttl_ms: int) -> bool:
        with self._lock:
            self._check()
            if self._holder(level) != token:
                return False
            self.leases[level] = (token, self._now_ms() + ttl_ms)
            return True

    def release(self, level: int, token: str) -> bool:
        with self._lock:
            self._check()
            if self._holder(level) != token:
                return False
            del self.leases[level]
            return True

    def holder(self, level: int) -> str | None:
        with self._lock:
            return self._holder(level)

    def lease_ttl_ms(self, level: int) -> int | None:
        with self._lock:
            self._check()
            if self._holder(level) is None:
                return None
            return self.leases[level][1] - self._now_ms()

    def ping(self) -> None:
        with self._lock:
            self._check()

    def load(self, level: int) -> int:
        with self._lock:
            self._check()
            return self.offsets.get(level, 0)

    def save(self, level: int, token: str, queue_offset: int) -> bool:
        with self._lock:
            self._check()
            if self._holder(level) != token:
                return False
            self.offsets[level] = queue_offset
            return True

    def commit(self, level: int, token: str, queue_offset: int, sample: LevelSample) -> bool:
        with self._lock:
            self._check()
            saved = self._holder(level) == token
            if saved:
                self.offsets[level] = queue_offset
            self._record(level, sample, counters=True)
            return saved

    def record(self, level: int, sample: LevelSample) -> None:
        with self._lock:
            self._check()
            self._record(level, sample, counters=False)

    def _record(self, level: int, sample: LevelSample, *, counters: bool) -> None:
        fields = self.stats.setdefault(level, {})
        if counters:
            for name, value in stats.increments(sample).items():
                fields[name] = fields.get(name, 0) + value
            top = stats.max_lateness(sample)
            if top > fields.get("lateness_max_ms", -1):
                fields["lateness_max_ms"] = top
        fields.update(stats.gauges(sample))

    def read_stats(self, level: int) -> stats.LevelStats:
        with self._lock:
            raw = {k: str(v) for k, v in self.stats.get(level, {}).items()}
        return stats.LevelStats.from_hash(level, raw)
