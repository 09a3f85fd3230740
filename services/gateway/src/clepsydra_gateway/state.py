"""The gateway's own state, in Redis only (DEC-gateway-pop-over-pull): for each consumer group
and queue it hands messages out of (a queue of one store shard: shard 0's keys are those of a
one-store stack, the others' carry the shard, DEC-shard-keys),

- ``<queue key>:cursor``: the next queue offset not yet handed out;
- ``<queue key>:inflight``: hash queue offset -> the delivery under way (:class:`Delivery`);
- ``<queue key>:committed``: the offset last committed to the store for the group;

and one sorted set of every delivery under way scored by when its invisible time ends
(``naming.GATEWAY_DEADLINES_KEY``), which every gateway process's sweeper reads.

Each change is one Lua script, so two gateway processes (or threads) never hand out the same
offset or settle one delivery twice, and a gateway killed at any point leaves the state
whole: a delivery it handed out stays in the sorted set and comes back when its time ends.
The offset a group may commit (SPEC C4) is the smallest offset still under way, else the
cursor; every settling script returns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson
import redis

from clepsydra_core import naming
from clepsydra_gateway.mapping import delivery_member

IN_FLIGHT = "i"
"""Handed out, invisible until its deadline."""
VISIBLE = "v"
"""A FIFO group's delivery whose time ran out: handed out again, in place, at the next
receive (DEC-gateway-fifo)."""
SETTLING = "x"
"""Its time ran out and a gateway is sending it back (or dead-lettering it); the deadline is
when another gateway may try again, should this one die first."""

_COMMIT = """
local function commit_of(cursor_key, inflight_key)
  local least = nil
  for _, off in ipairs(redis.call('HKEYS', inflight_key)) do
    local n = tonumber(off)
    if least == nil or n < least then least = n end
  end
  if least == nil then
    local c = redis.call('GET', cursor_key)
    if c then least = tonumber(c) else least = -1 end
  end
  return least
end
"""

_ADVANCE = """
local cur = redis.call('GET', KEYS[1])
local floor = tonumber(ARGV[1])
if not cur then redis.call('SET', KEYS[1], floor) return floor end
if redis.call('HLEN', KEYS[2]) == 0 and tonumber(cur) < floor then
  redis.call('SET', KEYS[1], floor) return floor
end
return tonumber(cur)
"""

_HAND_OUT = _COMMIT + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if ARGV[3] == '1' and redis.call('HLEN', KEYS[2]) > 0 then return -2 end
redis.call('SET', KEYS[1], ARGV[2])
for i = 4, #ARGV, 4 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[3], ARGV[i + 2], ARGV[i + 3])
end
return commit_of(KEYS[1], KEYS[2])
"""

_REDELIVER = """
for i = 1, #ARGV, 5 do
  local e = redis.call('HGET', KEYS[1], ARGV[i])
  if not e or cjson.decode(e).n ~= ARGV[i + 1] then return 0 end
end
for i = 1, #ARGV, 5 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
  redis.call('ZADD', KEYS[2], ARGV[i + 3], ARGV[i + 4])
end
return 1
"""

_SETTLE = _COMMIT + """
local e = redis.call('HGET', KEYS[2], ARGV[1])
if not e then return {0, 0, ''} end
local d = cjson.decode(e)
if d.n ~= ARGV[2] then return {-1, 0, ''} end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[3])
return {1, commit_of(KEYS[1], KEYS[2]), d.m}
"""

_COMMIT_POINT = _COMMIT + """
return commit_of(KEYS[1], KEYS[2])
"""

_REPLACE = """
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then
  if ARGV[6] == '1' then redis.call('ZREM', KEYS[2], ARGV[5]) end
  return 0
end
local d = cjson.decode(e)
if d.n ~= ARGV[2] then return -1 end
if ARGV[6] == '1' and tonumber(d.d) > tonumber(ARGV[7]) then
  if d.s ~= 'v' then redis.call('ZADD', KEYS[2], d.d, ARGV[5]) end
  return -2
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[4] == '' then redis.call('ZREM', KEYS[2], ARGV[5])
else redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5]) end
return 1
"""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed out to a group: its msgId, the nonce of its current receipt handle,
    when its invisible time ends, its attempt (1-based), its state, whether it is renewed
    while its client lives (a PushConsumer's ``auto_renew``), that client, when it was first
    handed out, and its FIFO message group."""

    n: str
    d: int
    a: int
    m: str
    s: str = IN_FLIGHT
    r: int = 0
    c: str = ""
    t: int = 0
    g: str = ""

    def encode(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def decode(cls, raw: str | bytes) -> Delivery:
        doc = orjson.loads(raw)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})

    def but(self, **changes: Any) -> Delivery:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class QueueView:
    cursor: int | None
    inflight: dict[int, Delivery]


class GatewayState:
    """The scripts above over one Redis client (thread-safe)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._advance = client.register_script(_ADVANCE)
        self._hand_out = client.register_script(_HAND_OUT)
        self._redeliver = client.register_script(_REDELIVER)
        self._settle = client.register_script(_SETTLE)
        self._replace = client.register_script(_REPLACE)
        self._commit_point = client.register_script(_COMMIT_POINT)

    @staticmethod
    def keys(group: str, topic: str, queue_id: int, *, shard: int) -> tuple[str, str, str]:
        base = naming.gateway_queue_key(group, topic, queue_id, shard)
        return f"{base}:cursor", f"{base}:inflight", f"{base}:committed"

    def advance(self, group: str, topic: str, queue_id: int, floor: int, *,
                shard: int) -> int:
        """The cursor, first set to ``floor`` (where the group's progress is), and moved up to
        it when nothing is under way (another consumer of the group committed past it)."""
        cursor, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        return int(self._advance(keys=[cursor, inflight], args=[floor]))

    def view(self, group: str, topic: str, queue_id: int, *, shard: int) -> QueueView:
        cursor, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(cursor)
        pipe.hgetall(inflight)
        raw_cursor, raw_inflight = pipe.execute()
        return QueueView(None if raw_cursor is None else int(raw_cursor),
                         {int(k): Delivery.decode(v) for k, v in raw_inflight.items()})

    def hand_out(self, group: str, topic: str, queue_id: int, expected_cursor: int,
                 new_cursor: int, deliveries: Sequence[tuple[int, Delivery]], *,
                 fifo: bool, shard: int) -> int | None:
        """Hand ``deliveries`` out and move the cursor, if nobody moved it since it was read
        (and, ``fifo``, nothing of the queue is under way): the offset the group may commit,
        else None (the caller reads again)."""
        cursor, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        args: list[Any] = [expected_cursor, new_cursor, "1" if fifo else "0"]
        for offset, delivery in deliveries:
            args += [offset, delivery.encode(), delivery.d,
                     delivery_member(group, topic, queue_id, offset, shard)]
        result = int(self._hand_out(keys=[cursor, inflight, naming.GATEWAY_DEADLINES_KEY],
                                    args=args))
        return None if result < 0 else result

    def redeliver(self, group: str, topic: str, queue_id: int,
                  items: Sequence[tuple[int, str, Delivery]], *, shard: int) -> bool:
        """Hand out again FIFO deliveries made visible (offset, their nonce, the new one)."""
        _, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        args: list[Any] = []
        for offset, nonce, delivery in items:
            args += [offset, nonce, delivery.encode(), delivery.d,
                     delivery_member(group, topic, queue_id, offset, shard)]
        return bool(self._redeliver(keys=[inflight, naming.GATEWAY_DEADLINES_KEY], args=args))

    def get(self, group: str, topic: str, queue_id: int, offset: int, *,
            shard: int) -> Delivery | None:
        _, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        raw = self.redis.hget(inflight, str(offset))
        return None if raw is None else Delivery.decode(raw)

    def settle(self, group: str, topic: str, queue_id: int, offset: int,
               nonce: str, *, shard: int) -> tuple[int, int, str]:
        """End a delivery (acked, sent back, dead-lettered): (1, the offset the group may
        commit, its msgId), or (0, 0, "") when it is not under way, (-1, 0, "") when ``nonce``
        is not its current handle's."""
        cursor, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        done, commit, msg_id = self._settle(
            keys=[cursor, inflight, naming.GATEWAY_DEADLINES_KEY],
            args=[offset, nonce, delivery_member(group, topic, queue_id, offset, shard)])
        return int(done), int(commit), str(msg_id)

    def replace(self, group: str, topic: str, queue_id: int, offset: int, nonce: str,
                new: Delivery, *, shard: int, only_if_due_at: int | None = None) -> int:
        """Swap a delivery for ``new`` if its handle's nonce is still ``nonce`` (and, with
        ``only_if_due_at``, its time has run out by then): 1 done, 0 not under way, -1 another
        handle, -2 not due (a change of invisible time moved it). ``new`` in state VISIBLE
        leaves the deadlines set."""
        _, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        deadline = "" if new.s == VISIBLE else new.d
        return int(self._replace(
            keys=[inflight, naming.GATEWAY_DEADLINES_KEY],
            args=[offset, nonce, new.encode(), deadline,
                  delivery_member(group, topic, queue_id, offset, shard),
                  "1" if only_if_due_at is not None else "0", only_if_due_at or 0]))

    def due(self, now_ms: int, limit: int = 200) -> list[str]:
        """Deliveries whose time has run out (members of the deadlines set)."""
        found: list[Any] = self.redis.zrangebyscore(naming.GATEWAY_DEADLINES_KEY, 0, now_ms,
                                                     start=0, num=limit)
        return [m.decode() if isinstance(m, bytes) else str(m) for m in found]

    def pending(self) -> int:
        return int(self.redis.zcard(naming.GATEWAY_DEADLINES_KEY))

    def commit_point(self, group: str, topic: str, queue_id: int, *, shard: int) -> int:
        """The offset the group may commit on the queue now, whichever gateway process
        handed out and settled its messages (-1: nothing handed out yet)."""
        cursor, inflight, _ = self.keys(group, topic, queue_id, shard=shard)
        return int(self._commit_point(keys=[cursor, inflight]))

    def committed(self, group: str, topic: str, queue_id: int, *, shard: int) -> int | None:
        raw = self.redis.get(self.keys(group, topic, queue_id, shard=shard)[2])
        return None if raw is None else int(raw)

    def set_committed(self, group: str, topic: str, queue_id: int, offset: int, *,
                      shard: int) -> None:
        self.redis.set(self.keys(group, topic, queue_id, shard=shard)[2], offset)

    # ---- clients -----------------------------------------------------------------------

    def client_seen(self, client_id: str, ttl_s: int) -> None:
        self.redis.set(naming.gateway_client_key(client_id), 1, ex=ttl_s)

    def client_alive(self, client_id: str) -> bool:
        return bool(client_id) and bool(self.redis.exists(naming.gateway_client_key(client_id)))

    def client_gone(self, client_id: str) -> None:
        self.redis.delete(naming.gateway_client_key(client_id))
