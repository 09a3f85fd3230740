"""Topic and queue descriptions as the store reports them (``GET /v1/topics[/{topic}]``, read
with the wire types :class:`TopicAnswer` and :class:`TopicList`)."""

from __future__ import annotations

from dataclasses import dataclass

from clepsydra_client.message import MessageQueue
from clepsydra_core.errors import TopicNotFound
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.cluster import ShardsApplied
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.topics import TopicAnswer, TopicList


@dataclass(frozen=True, slots=True)
class QueueInfo:
    queue_id: int
    min_offset: int
    max_offset: int
    """One past the last entry."""
    shard: int = 0
    """The store shard it is on (DEC-store-shards)."""

    @property
    def count(self) -> int:
        return max(self.max_offset - self.min_offset, 0)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    queues: tuple[QueueInfo, ...]
    system: bool = False
    shards: ShardsApplied | None = None
    """A create's, update's or delete's answer with more than one store shard: which shards
    applied it (DEC-store-shards)."""

    @classmethod
    def of(cls, answer: TopicAnswer, shard: int = 0) -> TopicInfo:
        """One shard's topic answer, its queues in queue id order."""
        queues = tuple(sorted((QueueInfo(q.queue_id, q.min_offset, q.max_offset, shard)
                               for q in answer.queues), key=lambda q: q.queue_id))
        return cls(answer.name, queues, answer.system, answer.shards)

    @property
    def shard_ids(self) -> list[int]:
        return sorted({q.shard for q in self.queues})

    def message_queues(self) -> list[MessageQueue]:
        return [MessageQueue(self.name, q.queue_id, q.shard) for q in self.queues]

    def queue(self, queue_id: int, shard: int = 0) -> QueueInfo | None:
        return next((q for q in self.queues if q.queue_id == queue_id and q.shard == shard),
                    None)

    @property
    def message_count(self) -> int:
        return sum(q.count for q in self.queues)


def fetch_topic(http: HttpClient, topic: str) -> TopicInfo:
    """TopicNotFound when the store does not have it."""
    return TopicInfo.of(read_answer(TopicAnswer, http.get(http.path("/v1/topics/{}", topic)),
                                    "topic"))


def fetch_topic_or_none(http: HttpClient, topic: str) -> TopicInfo | None:
    try:
        return fetch_topic(http, topic)
    except TopicNotFound:
        return None


def list_topics(http: HttpClient) -> list[TopicInfo]:
    return [TopicInfo.of(t) for t in read_answer(TopicList, http.get("/v1/topics"),
                                                 "topics").topics]
