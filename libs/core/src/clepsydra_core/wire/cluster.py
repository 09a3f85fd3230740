"""A store cluster's routes (DEC-store-shards; docs/contracts.md, "Store shards"):

- ``GET /v1/cluster`` (any shard) -> :class:`ClusterAnswer`: every shard's
  :class:`ShardStatus`, asked of each shard; one that does not answer is listed with state
  ``unreachable``, never left out
- ``GET /v1/cluster/self`` -> :class:`ShardStatus`: the answering shard's own
- ``GET /v1/routes/{topic}`` (any shard) -> :class:`RouteAnswer`: every (shard, queueId) of the
  topic with its shard's address
- ``POST /v1/cluster/shards/{shard}/drain`` and ``.../resume`` (any shard) -> the shard's
  :class:`ShardStatus` once it refuses (or accepts again) new messages
- a topic's create, update and delete, and a group's settings, are applied on every shard: their
  answers carry :class:`ShardsApplied` (``shards``) when there is more than one shard

A request a shard forwards to a peer carries :data:`SCOPE_HEADER` ``local``: the peer answers
from its own data, without asking the others again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import WireValue, wire_meta

SHARDS_HEADER = "X-Clepsydra-Shards"
"""On every answer of a store with more than one shard: how many shards the cluster has. A
client learns from it, with no call of its own, that it talks to a cluster (and reads the
membership then); a one-store store sends no such header, so its clients call it exactly as
before shards."""
SCOPE_HEADER = "X-Clepsydra-Scope"
"""``local`` on a request one shard forwards to another (answer from your own data only)."""
LOCAL = "local"
UP = "up"
UNREACHABLE = "unreachable"
STATES = (UP, UNREACHABLE)


@dataclass(frozen=True, slots=True)
class ShardStatus(WireValue):
    """One shard: where it answers, whether it takes new messages, and its share of the data.
    An unreachable shard has its id, URL, state and the error only."""

    id: int
    url: str
    state: str = field(metadata=wire_meta(schema={"enum": list(STATES)}))
    writable: bool | None = field(default=None, metadata=wire_meta(
        doc="accepts new messages (false while draining, or on a read-only store)"))
    draining: bool | None = field(default=None, metadata=wire_meta(
        doc="`clepsydra cluster drain`: refuses new messages while its consumers, levels and "
            "timers drain (RocketMQ's write permission off)"))
    store_host: str | None = field(default=None, metadata=wire_meta(
        doc="the host:port its offsetMsgIds carry"))
    topics: int | None = field(default=None, metadata=wire_meta(doc="user topics on it"))
    queues: int | None = field(default=None, metadata=wire_meta(
        doc="queues of user, %RETRY% and %DLQ% topics on it"))
    commitlog_bytes: int | None = field(default=None, metadata=wire_meta(
        json="commitLogBytes", doc="bytes of CommitLog it keeps"))
    pending_delayed: int | None = field(default=None, metadata=wire_meta(
        doc="delayed messages (levels and timers) not handed over yet"))
    unconsumed: int | None = field(default=None, metadata=wire_meta(
        doc="messages of its user and %RETRY% queues a group that committed on them has not "
            "consumed yet"))
    dead_letters: int | None = field(default=None, metadata=wire_meta(
        doc="entries of its %DLQ% queues (kept until retention)"))
    removable: bool | None = field(default=None, metadata=wire_meta(
        doc="draining, nothing pending, nothing unconsumed: it can be taken away (its dead "
            "letters and history go with it)"))
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterAnswer(WireValue):
    self_id: int = field(metadata=wire_meta(json="self", doc="the shard that answered"))
    shards: list[ShardStatus]


@dataclass(frozen=True, slots=True)
class RouteQueue(WireValue):
    """One queue of the topic: on which shard, at which address, and whether that shard takes
    new messages (``writable``) and answered (``reachable``)."""

    shard: int
    queue_id: int
    url: str
    writable: bool
    reachable: bool
    min_offset: int | None = None
    max_offset: int | None = field(default=None, metadata=wire_meta(
        doc="one past the last entry; both bounds left out for a shard that did not answer"))


@dataclass(frozen=True, slots=True)
class RouteAnswer(WireValue):
    """Every (shard, queueId) of a topic, sorted by shard then queue. A shard that did not
    answer is in ``unreachable`` and its queues are listed all the same (as many as the
    others have, ``reachable`` false); one that answered without the topic is in ``missing``
    (a create it missed: run the create again)."""

    topic: str
    queues: list[RouteQueue]
    unreachable: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShardFailure(WireValue):
    shard: int
    error: str
    message: str


@dataclass(frozen=True, slots=True)
class ShardsApplied(WireValue):
    """Which shards applied a change that every shard takes (a topic's, a group's settings),
    and which did not with why (after retries): run it again, it is idempotent."""

    applied: list[int]
    failed: list[ShardFailure] = field(default_factory=list)
