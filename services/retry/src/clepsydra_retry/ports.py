"""What send-back and the DLQ toolkit need from the store, as protocols (no HTTP here).

The store side is the store's public and internal routes (docs/contracts.md) whose values are
``clepsydra_core.wire``'s: the message reads (``GET /v1/commitlog/{offset}``,
``GET /v1/messages/{msgId}``, a pull), a topic's bounds, ``/healthz``'s ``writable`` (R2), the
retry/DLQ topic created on first use (R3, R6) and the two copy routes (R3-R8, R16).
``sendback.py``, ``headers.py`` and ``dlq.py`` code against these protocols;
``store_client.py`` implements them over HTTP (``StoreClient`` one shard, ``StoreShards`` the
shard set, DEC-store-shards), the app factory wires those, and unit tests use an in-memory
store (``tests/fixtures/retry.py``). Every method raises the store's errors as the
``ClepsydraError`` tree (``MessageNotFound``, ``NoPermission``, ``Unavailable``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from clepsydra_core.wire.copy import CopyItem, RangeCopy, RangeCopyAnswer
from clepsydra_core.wire.messages import PullAnswer, StoredMessage
from clepsydra_core.wire.produce import ProduceAnswer
from clepsydra_core.wire.topics import TopicAnswer


class MessageReader(Protocol):
    """Reading stored messages (headers; bodies only for the DLQ's listings)."""

    def headers(self, commitlog_offset: int) -> StoredMessage:
        """The message at a CommitLog offset without its body; MessageNotFound if none."""
        ...

    def copies(self, msg_id: str) -> list[StoredMessage]:
        """Every stored copy of the message whose msgId (or one of whose offsetMsgIds) this
        is, oldest first; [] when there is none."""
        ...

    def pull(self, topic: str, queue_id: int, queue_offset: int, max_count: int, *,
             with_body: bool = True) -> PullAnswer:
        """Up to ``max_count`` messages of a queue from ``queue_offset``; TopicNotFound if no
        such topic."""
        ...


class ShardStore(MessageReader, Protocol):
    """One store shard: its reads, its topics and its copy routes."""

    def is_writable(self) -> bool:
        """R2: whether the store accepts writes now."""
        ...

    def topic(self, name: str) -> TopicAnswer | None:
        """The topic and its queues' bounds; None when there is no such topic."""
        ...

    def ensure_topic(self, name: str, queues: int) -> int:
        """R3/R6: create a ``%RETRY%``/``%DLQ%`` topic on first use; the number of queues it
        really has (an existing topic keeps its count)."""
        ...

    def copy(self, items: Sequence[CopyItem]) -> list[ProduceAnswer]:
        """Copy stored messages (every item checked before any is written); where each copy
        was stored, in order."""
        ...

    def copy_range(self, request: RangeCopy) -> RangeCopyAnswer:
        """Copy a range of a queue to a topic (or each message to its origin) in one write."""
        ...


class Stores(Protocol):
    """The store shards (DEC-store-shards): a send-back is read and written on the shard that
    holds its message, a group's dead letters are on every shard. With one store,
    ``clustered`` is False and shard 0 is ``bootstrap``."""

    @property
    def clustered(self) -> bool: ...

    @property
    def bootstrap(self) -> ShardStore:
        """The store this service was given; its look-up by msgId spans every shard."""
        ...

    def ids(self) -> list[int]: ...

    def of(self, shard: int) -> ShardStore:
        """Shard ``shard``'s store; ClepsydraError for a shard the cluster does not have."""
        ...
