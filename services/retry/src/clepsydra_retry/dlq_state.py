"""What the DLQ toolkit remembers in Redis (SPEC R16): the msgIds already resent or purged
(hidden from listings), a purge floor (queue offset below which everything is hidden), and the
audit list of every resend and purge. ``RedisDlqState`` and its twin ``MemoryDlqState``.

The store keeps DLQ records until retention deletes them (the CommitLog is append-only), so
"removed" is a view kept here, not a deletion in the store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from clepsydra_core import naming
from clepsydra_core.errors import Unavailable, ValidationError
from clepsydra_core.msgid import decode_msg_id


@dataclass(frozen=True, slots=True)
class Floor:
    """Everything of the DLQ queue below ``queue_offset`` is hidden; every such message has a
    CommitLog offset below ``commitlog_offset`` (queues are dispatched in CommitLog order)."""

    queue_offset: int = 0
    commitlog_offset: int = 0


class DlqState(Protocol):
    """The floor is per store shard (each shard has its own ``%DLQ%<group>`` queue,
    DEC-store-shards); the hidden offsetMsgIds name their shard themselves."""

    def floor(self, group: str, shard: int = 0) -> Floor: ...
    def removed_flags(self, group: str, msg_ids: Sequence[str]) -> list[bool]: ...
    def remove(self, group: str, msg_ids: Sequence[str]) -> None: ...
    def removed_count(self, group: str) -> int: ...
    def raise_floor(self, group: str, floor: Floor, *, compact: bool,
                    shard: int = 0) -> None: ...
    def append_audit(self, group: str, record: dict[str, Any], keep: int) -> None: ...
    def audit(self, group: str, max_count: int) -> list[dict[str, Any]]: ...


def _below(msg_id: str, commitlog_offset: int, shard: int = 0) -> bool:
    """An offsetMsgId of ``shard`` below a CommitLog offset of that shard."""
    try:
        located = decode_msg_id(msg_id)
    except ValidationError:
        return False
    return located.shard == shard and located.commitlog_offset < commitlog_offset


_RAISE_FLOOR = """
local current = tonumber(redis.call('HGET', KEYS[1], 'floorQueueOffset') or '0')
if tonumber(ARGV[1]) > current then
  redis.call('HSET', KEYS[1], 'floorQueueOffset', ARGV[1], 'floorCommitLogOffset', ARGV[2])
  return 1
end
return 0
"""
"""Floors only move up, atomically (two purges racing cannot lower it)."""


class RedisDlqState:
    """Keys: ``dlq_removed_key`` (set of msgIds), ``dlq_state_key`` (hash: floor),
    ``dlq_audit_key`` (list of JSON records, oldest first)."""

    _CHUNK = 5000

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def floor(self, group: str, shard: int = 0) -> Floor:
        try:
            raw = {str(k): str(v) for k, v in
                   self._redis.hgetall(naming.dlq_state_key(group, shard)).items()}
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return Floor(int(raw.get("floorQueueOffset", 0)), int(raw.get("floorCommitLogOffset", 0)))

    def removed_flags(self, group: str, msg_ids: Sequence[str]) -> list[bool]:
        if not msg_ids:
            return []
        try:
            flags = self._redis.smismember(naming.dlq_removed_key(group), list(msg_ids))
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return [bool(f) for f in flags]

    def remove(self, group: str, msg_ids: Sequence[str]) -> None:
        key = naming.dlq_removed_key(group)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for start in range(0, len(msg_ids), self._CHUNK):
                pipe.sadd(key, *msg_ids[start:start + self._CHUNK])
            pipe.execute()
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def removed_count(self, group: str) -> int:
        try:
            return int(self._redis.scard(naming.dlq_removed_key(group)))
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def raise_floor(self, group: str, floor: Floor, *, compact: bool,
                    shard: int = 0) -> None:
        """Move the floor up (never down); with ``compact``, forget removed msgIds below it."""
        key = naming.dlq_removed_key(group)
        try:
            self._redis.eval(_RAISE_FLOOR, 1, naming.dlq_state_key(group, shard),
                             floor.queue_offset, floor.commitlog_offset)
            if not compact:
                return
            boundary = self.floor(group, shard).commitlog_offset
            stale = [str(m) for m in self._redis.sscan_iter(key, count=self._CHUNK)
                     if _below(str(m), boundary, shard)]
            pipe = self._redis.pipeline(transaction=False)
            for start in range(0, len(stale), self._CHUNK):
                pipe.srem(key, *stale[start:start + self._CHUNK])
            pipe.execute()
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def append_audit(self, group: str, record: dict[str, Any], keep: int) -> None:
        key = naming.dlq_audit_key(group)
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.rpush(key, json.dumps(record, ensure_ascii=False))
            pipe.ltrim(key, -keep, -1)
            pipe.execute()
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc

    def audit(self, group: str, max_count: int) -> list[dict[str, Any]]:
        try:
            raw = self._redis.lrange(naming.dlq_audit_key(group), -max_count, -1)
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from exc
        return [json.loads(r) for r in raw]  # type: ignore[union-attr]


class MemoryDlqState:
    """In-memory twin of :class:`RedisDlqState`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floors: dict[tuple[str, int], Floor] = {}
        self._removed: dict[str, set[str]] = {}
        self._audit: dict[str, list[dict[str, Any]]] = {}

    def floor(self, group: str, shard: int = 0) -> Floor:
        return self._floors.get((group, shard), Floor())

    def removed_flags(self, group: str, msg_ids: Sequence[str]) -> list[bool]:
        removed = self._removed.get(group, set())
        return [m in removed for m in msg_ids]

    def remove(self, group: str, msg_ids: Sequence[str]) -> None:
        with self._lock:
            self._removed.setdefault(group, set()).update(msg_ids)

    def removed_count(self, group: str) -> int:
        return len(self._removed.get(group, set()))

    def raise_floor(self, group: str, floor: Floor, *, compact: bool,
                    shard: int = 0) -> None:
        with self._lock:
            current = self.floor(group, shard)
            if floor.queue_offset > current.queue_offset:
                self._floors[(group, shard)] = floor
            if compact:
                boundary = max(floor.commitlog_offset, current.commitlog_offset)
                removed = self._removed.get(group, set())
                self._removed[group] = {m for m in removed if not _below(m, boundary, shard)}

    def append_audit(self, group: str, record: dict[str, Any], keep: int) -> None:
        with self._lock:
            records = self._audit.setdefault(group, [])
            records.append(record)
            del records[:-keep]

    def audit(self, group: str, max_count: int) -> list[dict[str, Any]]:
        return list(self._audit.get(group, [])[-max_count:])
