"""PullConsumer: the application pulls queues itself and manages offsets by hand.

    consumer = PullConsumer("audit", store_url)
    for queue in consumer.queues("orders"):
        offset = consumer.committed_offset(queue) or 0
        result = consumer.pull(queue, offset, max_count=100, expression="paid")
        for message in result.messages: ...
        consumer.commit(queue, result.next_offset)

No rebalance, no retry: what to pull, when, and what to commit is the caller's choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from clepsydra_client.consumer.offsets import RemoteOffsetStore
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.message import PAGE, Message, MessageQueue
from clepsydra_client.routing import Router
from clepsydra_client.settings import ensure_tracing
from clepsydra_client.topics import TopicInfo
from clepsydra_core.errors import ConfigError, TopicNotFound
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.validation import check_consumable, validate_group_name


class PullStatus(StrEnum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    """The queue has nothing at or after the offset."""
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    """Messages were there but none matched the tag expression (``next_offset`` moved on)."""


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    messages: list[Message]
    next_offset: int
    min_offset: int
    max_offset: int


class PullConsumer:
    def __init__(self, group: str | None, store_url: str, *, timeout_s: float = 10.0,
                 token: str | None = None) -> None:
        self.group = validate_group_name(group) if group else None
        ensure_tracing()
        self.http = HttpClient(store_url, timeout_s=timeout_s, service="store", token=token)
        self.router = Router(self.http)
        """Each queue's store shard (DEC-store-shards)."""
        self._offsets = (RemoteOffsetStore(self.http, self.group, self.router) if self.group
                         else None)

    def topic(self, topic: str) -> TopicInfo:
        """The topic's queues on every store shard (TopicNotFound when none has it)."""
        info = self.router.topic(topic, fresh=True)
        if info is None:
            raise TopicNotFound(f"topic {topic} does not exist")
        return info

    def queues(self, topic: str) -> list[MessageQueue]:
        """Every queue of a topic, sorted (shard by shard)."""
        return sorted(self.topic(topic).message_queues())

    def pull(self, queue: MessageQueue, offset: int, max_count: int = 32,
             expression: str | TagExpression = "*") -> PullResult:
        """Messages of ``queue`` from ``offset`` on, filtered by the store (tags hash) and
        re-checked here (tags string, C3)."""
        check_consumable(queue.topic)
        expr = expression if isinstance(expression, TagExpression) else \
            TagExpression.parse(expression)
        http = self.http if not self.router.clustered else self.router.client(queue.shard)
        raw = http.get(
            http.path("/v1/topics/{}/queues/{}/messages", queue.topic, queue.queue_id),
            {"offset": offset, "max": max_count, "tags": expr.query()})
        messages = [Message.from_json(m) for m in raw.get(PAGE["messages"]) or []]
        matched = [m for m in messages if expr.matches(m.tags)]
        next_offset = int(raw.get(PAGE["next_offset"], offset + len(messages)))
        if matched:
            status = PullStatus.FOUND
        elif next_offset > offset:
            status = PullStatus.NO_MATCHED_MSG
        else:
            status = PullStatus.NO_NEW_MSG
        return PullResult(status, matched, next_offset, int(raw.get(PAGE["min_offset"], 0)),
                          int(raw.get(PAGE["max_offset"], next_offset)))

    def _store(self) -> RemoteOffsetStore:
        if self._offsets is None:
            raise ConfigError("this PullConsumer has no group: give one to keep offsets")
        return self._offsets

    def committed_offset(self, queue: MessageQueue) -> int | None:
        """The group's committed offset of ``queue`` (None when it has none)."""
        return self._store().read(queue)

    def offsets(self, topic: str) -> dict[MessageQueue, int]:
        return self._store().fetch(topic)

    def commit(self, queue: MessageQueue, offset: int) -> None:
        """Set the group's committed offset: the next offset to consume."""
        self._store().commit(queue, offset)

    def close(self) -> None:
        self.router.close()
        self.http.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
