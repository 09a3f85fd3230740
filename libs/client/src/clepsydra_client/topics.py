"""Topic and queue descriptions as the store reports them (``GET /v1/topics[/{topic}]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clepsydra_client.message import MessageQueue
from clepsydra_core import naming
from clepsydra_core.errors import TopicNotFound
from clepsydra_core.http import HttpClient


@dataclass(frozen=True, slots=True)
class QueueInfo:
    queue_id: int
    min_offset: int
    max_offset: int
    """One past the last entry."""

    @property
    def count(self) -> int:
        return max(self.max_offset - self.min_offset, 0)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    queues: tuple[QueueInfo, ...]
    system: bool = False

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TopicInfo:
        name = str(raw.get("name", raw.get("topic", "")))
        queues_raw = raw.get("queues", [])
        if isinstance(queues_raw, int):
            queues = tuple(QueueInfo(i, 0, 0) for i in range(queues_raw))
        else:
            queues = tuple(sorted(
                (QueueInfo(int(q.get("queueId", i)), int(q.get("minOffset", 0)),
                           int(q.get("maxOffset", 0)))
                 for i, q in enumerate(queues_raw) if isinstance(q, dict)),
                key=lambda q: q.queue_id))
        system = bool(raw.get("system", naming.is_system_topic(name)))
        return cls(name, queues, system)

    def message_queues(self) -> list[MessageQueue]:
        return [MessageQueue(self.name, q.queue_id) for q in self.queues]

    def queue(self, queue_id: int) -> QueueInfo | None:
        return next((q for q in self.queues if q.queue_id == queue_id), None)

    @property
    def message_count(self) -> int:
        return sum(q.count for q in self.queues)


def fetch_topic(http: HttpClient, topic: str) -> TopicInfo:
    """TopicNotFound when the store does not have it."""
    raw = http.get(http.path("/v1/topics/{}", topic))
    info = TopicInfo.from_json(raw.get("topic", raw) if isinstance(raw.get("topic"), dict)
                               else raw)
    return info if info.name else TopicInfo(topic, info.queues, info.system)


def fetch_topic_or_none(http: HttpClient, topic: str) -> TopicInfo | None:
    try:
        return fetch_topic(http, topic)
    except TopicNotFound:
        return None


def list_topics(http: HttpClient) -> list[TopicInfo]:
    raw = http.get("/v1/topics")
    items = raw.get("topics", [])
    return [TopicInfo.from_json(t) if isinstance(t, dict) else TopicInfo(str(t), ())
            for t in items]
