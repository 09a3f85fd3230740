"""Consumer-group retry settings held in Redis (SPEC R2, R3, R5), and send-back counters.

A group exists once ``PUT /v1/groups/{group}`` has stored its settings (``{}`` -> defaults).
``RedisGroupStore`` is the backend; ``MemoryGroupStore`` its in-memory twin for unit tests.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

import redis

from clepsydra_core import naming
from clepsydra_core.errors import GroupNotFound, Unavailable, ValidationError
from clepsydra_retry.policy import (
    DEFAULT_RETRY_MAX_TIMES,
    DEFAULT_RETRY_QUEUE_NUMS,
    MAX_RECONSUME_TIMES_LIMIT,
    GroupSettings,
)

MAX_RETRY_QUEUE_NUMS = 64
"""More retry queues than this is refused as absurd (a group rarely has more consumers)."""

_FIELDS = {"retryQueueNums": "retry_queue_nums", "retryMaxTimes": "retry_max_times"}
_LIMITS = {"retryQueueNums": MAX_RETRY_QUEUE_NUMS, "retryMaxTimes": MAX_RECONSUME_TIMES_LIMIT}


def validate_settings(body: object, current: GroupSettings | None) -> GroupSettings:
    """The settings a ``PUT`` body asks for, merged over the current ones (or the defaults).
    Unknown fields, non-integers, negatives and absurd values are refused (400)."""
    if not isinstance(body, dict):
        raise ValidationError("group settings must be a JSON object", code="INVALID_REQUEST")
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        raise ValidationError(f"unknown group setting(s) {', '.join(unknown)}; "
                              f"known: {', '.join(_FIELDS)}", code="INVALID_REQUEST")
    values = (current or GroupSettings()).to_json()
    for name, value in body.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be a whole number, got {value!r}",
                                  code="INVALID_GROUP_SETTINGS")
        if value < 0:
            raise ValidationError(f"{name} must be >= 0, got {value}", rule="R2" if
                                  name == "retryQueueNums" else "R5",
                                  code="INVALID_GROUP_SETTINGS")
        if value > _LIMITS[name]:
            raise ValidationError(f"{name}={value} is absurd: at most {_LIMITS[name]}",
                                  code="INVALID_GROUP_SETTINGS")
        values[name] = value
    return GroupSettings(retry_queue_nums=values["retryQueueNums"],
                         retry_max_times=values["retryMaxTimes"])


def settings_from_hash(raw: Mapping[str, str]) -> GroupSettings:
    return GroupSettings(
        retry_queue_nums=int(raw.get("retryQueueNums", DEFAULT_RETRY_QUEUE_NUMS)),
        retry_max_times=int(raw.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)),
    )


class GroupStore(Protocol):
    def get(self, group: str) -> GroupSettings: ...
    def put(self, group: str, settings: GroupSettings) -> bool: ...
    def find(self, group: str) -> GroupSettings | None: ...
    def names(self) -> list[str]: ...
    def count_send_back(self, group: str, outcome: str, n: int = 1) -> None: ...
    def send_back_counts(self, group: str) -> dict[str, int]: ...


class RedisGroupStore:
    """Group settings as the Redis hash ``group_settings_key(group)``, names in
    ``GROUPS_SET_KEY``, send-back counts by outcome in ``sendback_stats_key(group)``."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def find(self, group: str) -> GroupSettings | None:
        try:
            raw = {str(k): str(v) for k, v in
                   self._redis.hgetall(naming.group_settings_key(group)).items()}
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return settings_from_hash(raw) if raw else None

    def get(self, group: str) -> GroupSettings:
        """GroupNotFound (SUBSCRIPTION_GROUP_NOT_EXIST, R2) when the group has no settings."""
        found = self.find(group)
        if found is None:
            raise GroupNotFound(f"consumer group {group!r} does not exist "
                                "(create it with PUT /v1/groups/{group})", rule="R2")
        return found

    def put(self, group: str, settings: GroupSettings) -> bool:
        """Store the settings; True when the group is new."""
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(naming.group_settings_key(group),
                      mapping={k: str(v) for k, v in settings.to_json().items()})
            pipe.sadd(naming.GROUPS_SET_KEY, group)
            results: list[Any] = pipe.execute()
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return bool(results[1])

    def names(self) -> list[str]:
        try:
            return sorted(str(m) for m in self._redis.smembers(naming.GROUPS_SET_KEY))
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def count_send_back(self, group: str, outcome: str, n: int = 1) -> None:
        try:
            self._redis.hincrby(naming.sendback_stats_key(group), outcome, n)
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def send_back_counts(self, group: str) -> dict[str, int]:
        try:
            raw = self._redis.hgetall(naming.sendback_stats_key(group))
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return {str(k): int(v) for k, v in raw.items()}


class MemoryGroupStore:
    """In-memory twin of :class:`RedisGroupStore`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, GroupSettings] = {}
        self._counts: dict[str, dict[str, int]] = {}

    def find(self, group: str) -> GroupSettings | None:
        return self._groups.get(group)

    def get(self, group: str) -> GroupSettings:
        found = self.find(group)
        if found is None:
            raise GroupNotFound(f"consumer group {group!r} does not exist", rule="R2")
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
