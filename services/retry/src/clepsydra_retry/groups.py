"""Consumer-group settings as this service reads them (SPEC R2, R3, R5), and send-back counters.

The store owns group settings and keeps them on its disk (``PUT /v1/groups/{group}/settings``,
beside the topics), so a Redis restarted empty loses none. Every send-back reads its group's
settings, so they are cached in Redis: read-through (a miss asks the store and fills the cache),
write-through (a change goes to the store first, then to the cache), each entry kept for
``CACHE_TTL_S`` so a cache that missed a change (Redis down while it was made) heals by itself.
Send-back counts are statistics and live in Redis only.

``StoreGroupStore`` is the backend; ``MemoryGroupStore`` its in-memory twin for unit tests.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import redis

from clepsydra_core import naming
from clepsydra_core.errors import GroupNotFound, Unavailable
from clepsydra_core.groups import GroupSettings
from clepsydra_retry.store_client import StoreClient

logger = logging.getLogger(__name__)

CACHE_TTL_S = 30
"""How long a cached group's settings are trusted before the store is asked again."""


class GroupStore(Protocol):
    def get(self, group: str) -> GroupSettings: ...
    def put(self, group: str, settings: GroupSettings) -> bool: ...
    def find(self, group: str) -> GroupSettings | None: ...
    def names(self) -> list[str]: ...
    def count_send_back(self, group: str, outcome: str, n: int = 1) -> None: ...
    def send_back_counts(self, group: str) -> dict[str, int]: ...


def _not_found(group: str) -> GroupNotFound:
    return GroupNotFound(f"consumer group {group!r} does not exist "
                         "(create it with PUT /v1/groups/{group})", rule="R2")


class StoreGroupStore:
    """Settings durable in the store, cached in the Redis hash ``group_settings_key(group)``;
    send-back counts by outcome in ``sendback_stats_key(group)``."""

    def __init__(self, store: StoreClient, client: redis.Redis) -> None:
        self._store = store
        self._redis = client

    def find(self, group: str) -> GroupSettings | None:
        """The group's settings (cache, else the store), None when it has none. Works without
        Redis (the store answers); Unavailable only when the store does not answer a miss."""
        try:
            raw = self._redis.hgetall(naming.group_settings_key(group))
            if raw:
                return GroupSettings.from_json(raw)  # type: ignore[arg-type]
        except (redis.RedisError, ValueError) as exc:
            logger.warning("group settings cache unreadable group=%s: %s", group, exc)
        settings = self._store.group_settings(group)
        if settings is not None:
            self._cache(group, settings)
        return settings

    def get(self, group: str) -> GroupSettings:
        """GroupNotFound (SUBSCRIPTION_GROUP_NOT_EXIST, R2) when the group has no settings."""
        found = self.find(group)
        if found is None:
            raise _not_found(group)
        return found

    def put(self, group: str, settings: GroupSettings) -> bool:
        """Store the settings (durably, in the store), then refresh the cache; True when the
        group is new."""
        created = self._store.put_group_settings(group, settings)
        self._cache(group, settings)
        return created

    def names(self) -> list[str]:
        return sorted(self._store.all_group_settings())

    def _cache(self, group: str, settings: GroupSettings) -> None:
        key = naming.group_settings_key(group)
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.delete(key)
            pipe.hset(key, mapping={k: str(v) for k, v in settings.to_json().items()})
            pipe.expire(key, CACHE_TTL_S)
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("group settings not cached group=%s: %s", group, exc)

    def adopt_redis_groups(self) -> int:
        """Groups whose settings an earlier version kept in Redis only (the hashes named in
        ``GROUPS_SET_KEY``) are written to the store, once; returns how many were new there.
        Best effort at start-up: a store or Redis that does not answer is logged, not fatal."""
        try:
            names = sorted(str(m) for m in self._redis.smembers(naming.GROUPS_SET_KEY))
            adopted = 0
            for group in names:
                raw: Any = self._redis.hgetall(naming.group_settings_key(group))
                if raw and self._store.group_settings(group) is None:
                    self._store.put_group_settings(group, GroupSettings.from_json(raw))
                    adopted += 1
            self._redis.delete(naming.GROUPS_SET_KEY)
        except (redis.RedisError, Unavailable, ValueError) as exc:
            logger.warning("groups kept in Redis by an earlier version not adopted yet: %s",
                           exc)
            return 0
        if adopted:
            logger.info("group settings moved from Redis to the store groups=%d", adopted)
        return adopted

    def count_send_back(self, group: str, outcome: str, n: int = 1) -> None:
        """Statistics, counted after the copy is done: a Redis that does not answer loses the
        count (logged), never fails a send-back that already happened."""
        try:
            self._redis.hincrby(naming.sendback_stats_key(group), outcome, n)
        except redis.RedisError as exc:
            logger.warning("send-back not counted group=%s outcome=%s n=%d: %s", group, outcome,
                           n, exc)

    def send_back_counts(self, group: str) -> dict[str, int]:
        try:
            raw = self._redis.hgetall(naming.sendback_stats_key(group))
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return {str(k): int(v) for k, v in raw.items()}


class MemoryGroupStore:
    """In-memory twin of :class:`StoreGroupStore`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, GroupSettings] = {}
        self._counts: dict[str, dict[str, int]] = {}

    def find(self, group: str) -> GroupSettings | None:
        return self._groups.get(group)

    def get(self, group: str) -> GroupSettings:
        found = self.find(group)
        if found is None:
            raise _not_found(group)
        return found

    def put(self, group: str, settings: GroupSettings) -> bool:
        with self._lock:
            new = group not in self._groups
            self._groups[group] = settings
            return new

    def names(self) -> list[str]:
        return sorted(self._groups)

    def count_send_back(self, group: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            counts = self._counts.setdefault(group, {})
            counts[outcome] = counts.get(outcome, 0) + n

    def send_back_counts(self, group: str) -> dict[str, int]:
        return dict(self._counts.get(group, {}))
