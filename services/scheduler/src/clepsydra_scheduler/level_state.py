"""A level's lease, progress offset and statistics: in Redis (:class:`RedisLevelState`) and
in memory for unit tests (:class:`MemoryLevelState`), same semantics.

- Lease (``naming.delay_lease_key``): a :class:`~clepsydra_scheduler.ports.LeaseToken` naming
  its holder (worker name, incarnation), its fencing token and its run, set with a time to live;
  renewed and released only by the token that holds it (Lua compare-and-act), so one run per
  level delivers (SPEC D1) and a run that lost its lease cannot extend someone else's. It is
  taken when free, when its holder hands it on (a chained run), or at once from an older
  incarnation of the same worker name -- a restarted process does not wait for the expiry of
  its own leases (DEC-scheduler-lease). Each take gets the next fencing token of the level
  (``naming.delay_fence_key``), which the store checks on every hand-over.
- Progress (``naming.delay_offset_key``): the next schedule-queue offset to deliver, missing =
  0 (SPEC D2); written only while the writer's token holds the lease (fencing), in the same
  Lua call that checks the token.
- Statistics (``naming.delay_stats_key``, see ``stats.py``): recorded in that same call.

The timers' lease (``naming.timer_lease_key``, ``timer_fence_key``) is the same lease on its
own keys (:class:`RedisTimerLease`, :class:`MemoryTimerLease`); timers have no progress offset
(the store's timer index has it).

With store shards each shard's levels and timers have keys of their own (``shard`` here,
DEC-shard-keys; shard 0's are those of a one-store stack): one lease, fence, progress and
statistics per (shard, level), the shard's store checking its own fences. The worker's
incarnation is one for every shard.

In a Redis Cluster the keys of a level would need one hash slot; the local stack and the
manifests use a single Redis.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from clepsydra_core.naming import (
    WORKER_INCARNATION_KEY,
    delay_fence_key,
    delay_lease_key,
    delay_offset_key,
    delay_stats_key,
    timer_fence_key,
    timer_lease_key,
)
from clepsydra_scheduler import stats
from clepsydra_scheduler.ports import (
    LeaseToken,
    LevelSample,
    LevelStateUnavailable,
    WorkerIdentity,
)

logger = logging.getLogger(__name__)

# The lease scripts write ports.LeaseToken's layout: "2 <incarnation> <fence> <run> <name>".
# KEYS: lease, fence counter. ARGV: name, incarnation, run, ttl ms, previous token ("": none).
# Returns {new token, the holder it replaced ("": none)}, or nil when another holds the lease.
# A holder with this very name, incarnation and run is this take's own first try, whose answer
# was lost with Redis: its token comes back as it is.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[5] then
  local incarnation, run, name = string.match(holder, '^2 (%d+) %d+ (%S+) (.+)$')
  if name == ARGV[1] and incarnation == ARGV[2] and run == ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return {holder, ''}
  end
  if name ~= ARGV[1] or tonumber(incarnation) >= tonumber(ARGV[2]) then
    return false
  end
end
local fence = redis.call('INCR', KEYS[2])
local token = '2 ' .. ARGV[2] .. ' ' .. string.format('%d', fence) .. ' ' .. ARGV[3] .. ' '
  .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', ARGV[4])
return {token, holder or ''}
"""

# KEYS: the incarnation counter. The next number, and never below Redis's clock in
# microseconds: a counter lost with Redis's data (restarted empty) must not give a restarted
# process a number its dead predecessor (who took its own before the loss) already had.
_INCARNATION = """
local now = redis.call('TIME')
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
local n = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
if n < clock then n = clock end
redis.call('SET', KEYS[1], string.format('%d', n))
return string.format('%d', n)
"""

# KEYS: lease, fence counter. ARGV: token, floor, ttl ms.
_REFENCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local incarnation, run, name = string.match(ARGV[1], '^2 (%d+) %d+ (%S+) (.+)$')
if not name then return false end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
local fence = redis.call('INCR', KEYS[2])
local token = '2 ' .. incarnation .. ' ' .. string.format('%d', fence) .. ' ' .. run .. ' '
  .. name
redis.call('SET', KEYS[1], token, 'PX', ARGV[3])
return token
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
    """The production LevelState of one store shard's levels (``shard``: its keys,
    DEC-shard-keys; shard 0's are a one-store stack's). Every Redis failure surfaces as
    LevelStateUnavailable."""

    def __init__(self, client: redis.Redis, shard: int = 0) -> None:
        self._redis = client
        self.shard = shard
        self._acquire = client.register_script(_ACQUIRE)
        self._refence = client.register_script(_REFENCE)
        self._incarnation = client.register_script(_INCARNATION)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._save = client.register_script(_SAVE)
        self._commit = client.register_script(_COMMIT)

    @classmethod
    def from_url(cls, url: str) -> RedisLevelState:
        return cls(redis.Redis.from_url(url, decode_responses=True, socket_timeout=5.0,
                                        socket_connect_timeout=2.0, health_check_interval=30))

    def of_shard(self, shard: int) -> RedisLevelState:
        """The same Redis, another store shard's keys."""
        return self if shard == self.shard else RedisLevelState(self._redis, shard)

    def _lease(self, level: int) -> str:
        return delay_lease_key(level, self.shard)

    def _offset(self, level: int) -> str:
        return delay_offset_key(level, self.shard)

    def _stats(self, level: int) -> str:
        return delay_stats_key(level, self.shard)

    @property
    def client(self) -> redis.Redis:
        return self._redis

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except redis.RedisError as exc:
            raise LevelStateUnavailable(f"redis {what} failed: {exc}") from exc

    def incarnation(self) -> int:
        return int(self._call("incarnation", lambda: self._incarnation(
            keys=[WORKER_INCARNATION_KEY])))

    def take(self, lease_key: str, fence_key: str, worker: WorkerIdentity, ttl_ms: int,
             previous: str | None, run: str | None = None) -> str | None:
        """``acquire`` on any lease's keys (a level's, the timers')."""
        args: list[str | int] = [worker.name, worker.incarnation, run or LeaseToken.new_run(),
                                 ttl_ms, previous or ""]
        taken = self._call("acquire", lambda: self._acquire(keys=[lease_key, fence_key],
                                                             args=args))
        if taken is None:
            return None
        token, replaced = str(taken[0]), str(taken[1])
        _log_take_over(lease_key, replaced, previous, token)
        return token

    def refence_key(self, lease_key: str, fence_key: str, token: str, floor: int,
                    ttl_ms: int) -> str | None:
        token = self._call("refence", lambda: self._refence(keys=[lease_key, fence_key],
                                                            args=[token, floor, ttl_ms]))
        return None if token is None else str(token)

    def renew_key(self, lease_key: str, token: str, ttl_ms: int) -> bool:
        return bool(self._call("renew", lambda: self._renew(keys=[lease_key],
                                                            args=[token, ttl_ms])))

    def release_key(self, lease_key: str, token: str) -> bool:
        return bool(self._call("release", lambda: self._release(keys=[lease_key],
                                                                args=[token])))

    def acquire(self, level: int, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None:
        return self.take(self._lease(level), delay_fence_key(level, self.shard), worker, ttl_ms,
                         previous, run)

    def refence(self, level: int, token: str, floor: int, ttl_ms: int) -> str | None:
        return self.refence_key(self._lease(level), delay_fence_key(level, self.shard), token,
                                floor, ttl_ms)

    def renew(self, level: int, token: str, ttl_ms: int) -> bool:
        return self.renew_key(self._lease(level), token, ttl_ms)

    def release(self, level: int, token: str) -> bool:
        return self.release_key(self._lease(level), token)

    def holder(self, level: int) -> str | None:
        value = self._call("get", lambda: self._redis.get(self._lease(level)))
        return None if value is None else str(value)

    def lease_ttl_ms(self, level: int) -> int | None:
        """Milliseconds left on the level's lease; None when no run holds it."""
        ttl = int(self._call("pttl", lambda: self._redis.pttl(self._lease(level))))
        return ttl if ttl >= 0 else None

    def ping(self) -> None:
        """LevelStateUnavailable unless Redis answers PING."""
        self._call("ping", self._redis.ping)

    def load(self, level: int) -> int:
        raw = self._call("load", lambda: self._redis.get(self._offset(level)))
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
            keys=[self._lease(level), self._offset(level)], args=[token, queue_offset])))

    def commit(self, level: int, token: str, queue_offset: int, sample: LevelSample) -> bool:
        keys = [self._lease(level), self._offset(level), self._stats(level)]
        args = _commit_args(token, queue_offset, sample)
        return bool(self._call("commit", lambda: self._commit(keys=keys, args=args)))

    def record(self, level: int, sample: LevelSample) -> None:
        values: dict[Any, Any] = dict(stats.gauges(sample))
        self._call("record", lambda: self._redis.hset(self._stats(level), mapping=values))

    def read_stats(self, level: int) -> stats.LevelStats:
        raw = self._call("read", lambda: self._redis.hgetall(self._stats(level)))
        return stats.LevelStats.from_hash(level, {str(k): str(v) for k, v in raw.items()})


class RedisTimerLease:
    """The timers' lease of one store shard (the state's), with the levels' scripts on the
    timers' keys."""

    def __init__(self, state: RedisLevelState) -> None:
        self._state = state
        self._key = timer_lease_key(state.shard)
        self._fence = timer_fence_key(state.shard)

    def acquire(self, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None:
        return self._state.take(self._key, self._fence, worker, ttl_ms, previous, run)

    def refence(self, token: str, floor: int, ttl_ms: int) -> str | None:
        return self._state.refence_key(self._key, self._fence, token, floor, ttl_ms)

    def renew(self, token: str, ttl_ms: int) -> bool:
        return self._state.renew_key(self._key, token, ttl_ms)

    def release(self, token: str) -> bool:
        return self._state.release_key(self._key, token)

    def holder(self) -> str | None:
        value = self._state._call("get", lambda: self._state.client.get(self._key))
        return None if value is None else str(value)


TIMERS = "timers"
"""The timers' lease among a MemoryLevelState's leases (levels are ints)."""


class MemoryLevelState:
    """In-memory twin of RedisLevelState for unit tests; the lease expires by ``now_ms``.
    Several workers (their own :class:`WorkerIdentity` each) may share one, as they share a
    Redis."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self.leases: dict[int | str, tuple[str, int]] = {}
        """level (or TIMERS) -> (token, expiry ms)."""
        self.fences: dict[int | str, int] = {}
        """level (or TIMERS) -> the last fencing token given."""
        self.incarnations = 0
        self.offsets: dict[int, int] = {}
        self.stats: dict[int, dict[str, int]] = {}
        self.down = False
        """Set True to make every call fail as if Redis were unreachable."""
        self.answers_lost = 0
        """Set to n: the next n leases taken are taken, and the call fails as if Redis went
        away before it answered."""

    def _check(self) -> None:
        if self.down:
            raise LevelStateUnavailable("memory offset store is down")

    def _holder(self, key: int | str) -> str | None:
        lease = self.leases.get(key)
        if lease is None or lease[1] <= self._now_ms():
            self.leases.pop(key, None)
            return None
        return lease[0]

    def incarnation(self) -> int:
        with self._lock:
            self._check()
            self.incarnations += 1
            return self.incarnations

    def _grant(self, key: int | str, token: LeaseToken, ttl_ms: int) -> str:
        self.fences[key] = token.fence
        raw = token.encode()
        self.leases[key] = (raw, self._now_ms() + ttl_ms)
        return raw

    def take(self, key: int | str, worker: WorkerIdentity, ttl_ms: int,
             previous: str | None, run: str | None = None) -> str | None:
        with self._lock:
            self._check()
            holder = self._holder(key)
            if holder is not None and holder != previous:
                held = LeaseToken.decode(holder)
                if held is not None and held.holder == worker and held.run == run:
                    self.leases[key] = (holder, self._now_ms() + ttl_ms)  # its own first try
                    return holder
                if held is None or held.name != worker.name or \
                        held.incarnation >= worker.incarnation:
                    return None
            token = self._grant(key, LeaseToken(worker.incarnation,
                                                self.fences.get(key, 0) + 1,
                                                run or LeaseToken.new_run(), worker.name), ttl_ms)
            if self.answers_lost:  # made, but Redis went away before it answered
                self.answers_lost -= 1
                raise LevelStateUnavailable("memory offset store went away before answering")
        _log_take_over(str(key), holder or "", previous, token)
        return token

    def refence_key(self, key: int | str, token: str, floor: int, ttl_ms: int) -> str | None:
        with self._lock:
            self._check()
            held = LeaseToken.decode(token)
            if self._holder(key) != token or held is None:
                return None
            fence = max(self.fences.get(key, 0), floor) + 1
            return self._grant(key, LeaseToken(held.incarnation, fence, held.run, held.name),
                               ttl_ms)

    def renew_key(self, key: int | str, token: str, ttl_ms: int) -> bool:
        with self._lock:
            self._check()
            if self._holder(key) != token:
                return False
            self.leases[key] = (token, self._now_ms() + ttl_ms)
            return True

    def release_key(self, key: int | str, token: str) -> bool:
        with self._lock:
            self._check()
            if self._holder(key) != token:
                return False
            del self.leases[key]
            return True

    def acquire(self, level: int, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None:
        return self.take(level, worker, ttl_ms, previous, run)

    def refence(self, level: int, token: str, floor: int, ttl_ms: int) -> str | None:
        return self.refence_key(level, token, floor, ttl_ms)

    def renew(self, level: int, token: str, ttl_ms: int) -> bool:
        return self.renew_key(level, token, ttl_ms)

    def release(self, level: int, token: str) -> bool:
        return self.release_key(level, token)

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


class MemoryTimerLease:
    """The timers' lease in a MemoryLevelState (the twin of RedisTimerLease)."""

    def __init__(self, state: MemoryLevelState) -> None:
        self._state = state

    def acquire(self, worker: WorkerIdentity, ttl_ms: int,
                previous: str | None = None, run: str | None = None) -> str | None:
        return self._state.take(TIMERS, worker, ttl_ms, previous, run)

    def refence(self, token: str, floor: int, ttl_ms: int) -> str | None:
        return self._state.refence_key(TIMERS, token, floor, ttl_ms)

    def renew(self, token: str, ttl_ms: int) -> bool:
        return self._state.renew_key(TIMERS, token, ttl_ms)

    def release(self, token: str) -> bool:
        return self._state.release_key(TIMERS, token)

    def holder(self) -> str | None:
        with self._state._lock:
            return self._state._holder(TIMERS)


def _log_take_over(lease: str, replaced: str, previous: str | None, token: str) -> None:
    """One INFO line when a lease was taken from an earlier process of this worker (not free,
    not handed on): the restart's take-over (DEC-scheduler-lease)."""
    if not replaced or replaced == previous:
        return
    before, after = LeaseToken.decode(replaced), LeaseToken.decode(token)
    if before is not None and after is not None:
        logger.info("lease taken over from an earlier process of this worker lease=%s "
                    "name=%s incarnation=%d->%d fence=%d", lease, after.name,
                    before.incarnation, after.incarnation, after.fence)
