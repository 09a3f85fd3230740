"""The store's topic routes (SPEC P1, S3):

- ``POST /v1/topics`` and ``POST /v1/internal/topics`` :class:`TopicCreate` -> 201 (created) or
  200 (exists alike) :class:`TopicAnswer`; 409 when it exists with another queue count
- ``GET /v1/topics`` -> :class:`TopicList`; ``GET /v1/topics/{topic}`` -> :class:`TopicAnswer`
- ``PUT /v1/topics/{topic}`` :class:`TopicUpdate` -> 200 (updated) or 201 (created)
  :class:`TopicAnswer`; 409 ``TOPIC_NOT_DRAINED`` when a shrink would hide unconsumed messages
- ``DELETE /v1/topics/{topic}`` -> :class:`TopicDeleted`; 404 when absent, 403 for a system topic
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.validation import TOPIC_MAX_LEN, TOPIC_PATTERN
from clepsydra_core.wire.cluster import ShardsApplied
from clepsydra_core.wire.codec import WireValue, wire_meta

MAX_QUEUES = 1024
"""Most queues a topic has."""
EXAMPLE_TOPIC = "orders"
"""The topic name the documents' examples use."""


TOPIC_SCHEMA = {"type": "string", "pattern": TOPIC_PATTERN, "maxLength": TOPIC_MAX_LEN}
"""A topic name (P1) as JSON Schema, for names that are not a field of their own (path
parameters, object keys)."""


def topic_meta(doc: str | None = None) -> dict[str, object]:
    """A field that holds a topic name (P1)."""
    return wire_meta(pattern=TOPIC_PATTERN, max_length=TOPIC_MAX_LEN, code="INVALID_TOPIC",
                     rule="P1", doc=doc)


@dataclass(frozen=True, slots=True)
class TopicCreate(WireValue):
    name: str = field(metadata=topic_meta())
    queues: int = field(metadata=wire_meta(minimum=1, maximum=MAX_QUEUES))


@dataclass(frozen=True, slots=True)
class TopicUpdate(WireValue):
    """A topic's new queue count (A1): more adds empty queues, fewer hides drained ones."""

    queues: int = field(metadata=wire_meta(minimum=1, maximum=MAX_QUEUES))


SHARDS_DOC = ("with more than one store shard: the shards that applied it, and those that did "
              "not (DEC-store-shards)")


@dataclass(frozen=True, slots=True)
class TopicDeleted(WireValue):
    name: str
    deleted: bool
    shards: ShardsApplied | None = field(default=None, metadata=wire_meta(doc=SHARDS_DOC))


@dataclass(frozen=True, slots=True)
class QueueBounds(WireValue):
    queue_id: int
    min_offset: int
    max_offset: int = field(metadata=wire_meta(doc="one past the last entry"))


@dataclass(frozen=True, slots=True)
class TopicAnswer(WireValue):
    name: str
    system: bool
    queues: list[QueueBounds]
    shards: ShardsApplied | None = field(default=None, metadata=wire_meta(doc=SHARDS_DOC))


@dataclass(frozen=True, slots=True)
class TopicList(WireValue):
    topics: list[TopicAnswer]
