"""AdminClient: topics, groups (settings, consumers, queue ownership, progress, lag), messages,
dead letters, the delay levels and the timers, over the store's and the retry service's HTTP APIs.

    admin = AdminClient(store_url, retry_url)
    for row in admin.progress("order-service"):
        print(row.queue, row.committed, row.lag, row.owner)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from clepsydra_client.consumer.offsets import queue_offsets
from clepsydra_client.consumer.rebalance import AllocateStrategy, AverageStrategy, allocate_all
from clepsydra_client.message import Message, MessageQueue
from clepsydra_client.routing import Router
from clepsydra_client.topics import TopicInfo, list_topics
from clepsydra_core import naming
from clepsydra_core.errors import (
    ClepsydraError,
    ConfigError,
    MessageNotFound,
    NotFound,
    TopicNotFound,
    ValidationError,
)
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire import dlq as wire_dlq
from clepsydra_core.wire.cluster import ClusterAnswer, RouteAnswer, ShardStatus
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.dlq import (
    DlqAudit,
    DlqFilter,
    DlqPurge,
    DlqResend,
    PurgeResult,
    ResendResult,
)
from clepsydra_core.wire.groups import (
    ConsumerInfo,
    Consumers,
    GroupNames,
    GroupOffsets,
    GroupSettingsAnswer,
    GroupSettingsPatch,
    OffsetCommit,
)
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.history import MessageHistory
from clepsydra_core.wire.messages import MessageList, StoredMessage
from clepsydra_core.wire.retry import RetryHealth
from clepsydra_core.wire.schedule import LevelInfo, LevelTable, ScheduleEntries
from clepsydra_core.wire.timers import TimerBacklog
from clepsydra_core.wire.topics import TopicAnswer, TopicCreate, TopicDeleted, TopicUpdate


@dataclass(frozen=True, slots=True)
class GroupConsumers:
    """A group's live consumers (the store's :class:`Consumers` answer); ``mismatches`` as
    their JSON (SPEC C5)."""

    consumers: list[ConsumerInfo]
    consistent: bool
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return sorted(c.client_id for c in self.consumers)

    @property
    def topics(self) -> list[str]:
        return sorted({t for c in self.consumers for t in c.subscriptions})


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue of a group: the store's end, the committed offset, the lag, the owner."""

    queue: MessageQueue
    max_offset: int
    committed: int | None
    owner: str | None

    @property
    def lag(self) -> int:
        return self.max_offset - (self.committed if self.committed is not None else 0)


@dataclass(frozen=True, slots=True)
class LevelStatus:
    """One delay level as the store reports it (``info``, the wire value), with what waits
    in it: the backlog (entries not yet handed over), how late the oldest due entry is (0 when
    nothing is due) and its deliver time."""

    info: LevelInfo
    lag_ms: int
    next_deliver_ts: int | None

    @property
    def backlog(self) -> int:
        return self.info.backlog


@dataclass(frozen=True, slots=True)
class DlqPage:
    messages: list[Message]
    next_offset: int
    max_offset: int
    next_shard: int | None = None
    """More than one store shard: the shard the next page starts on (DEC-store-shards)."""
    unreachable: tuple[int, ...] = ()


class AdminClient:
    def __init__(self, store_url: str, retry_url: str | None = None, *,
                 timeout_s: float = 10.0, token: str | None = None) -> None:
        self.store = HttpClient(store_url, timeout_s=timeout_s, service="store", token=token)
        self.router = Router(self.store)
        """Each store shard's address (DEC-store-shards)."""
        self._heard = False
        self.retry_http = (HttpClient(retry_url, timeout_s=timeout_s, service="retry service",
                                      token=token)
                           if retry_url else None)

    @property
    def retry(self) -> HttpClient:
        if self.retry_http is None:
            raise ConfigError("no retry service URL: set CLEPSYDRA_RETRY_URL or --retry-url")
        return self.retry_http

    def close(self) -> None:
        self.router.close()
        self.store.close()
        if self.retry_http is not None:
            self.retry_http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- health --------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Each service's health answer (its JSON, read with its wire type)."""
        out: dict[str, Any] = {
            "store": read_answer(StoreHealth, self.store.get("/healthz"), "healthz").to_json()}
        if self.retry_http is not None:
            out["retry"] = read_answer(RetryHealth, self.retry_http.get("/healthz"),
                                       "healthz").to_json()
        return out

    # ---- the cluster of store shards (DEC-store-shards) ----------------------------------

    def cluster(self, *, shares: bool = True) -> ClusterAnswer:
        """Every store shard with its health and share of the data (``GET /v1/cluster``);
        ``shares=False``: who and where each is and whether it takes messages only."""
        return read_answer(ClusterAnswer, self.store.get(
            "/v1/cluster", None if shares else {"shares": "false"}), "cluster")

    def drain(self, shard: int) -> ShardStatus:
        """Make a shard refuse new messages while its consumers, levels and timers drain
        (DEC-shard-drain); ``cluster()`` says when it is removable."""
        return read_answer(ShardStatus, self.store.post(
            self.store.path("/v1/cluster/shards/{}/drain", shard)), "shard")

    def resume(self, shard: int) -> ShardStatus:
        """Make a drained shard take new messages again."""
        return read_answer(ShardStatus, self.store.post(
            self.store.path("/v1/cluster/shards/{}/resume", shard)), "shard")

    def route(self, topic: str) -> RouteAnswer:
        """Every (shard, queueId) of a topic with its shard's address."""
        return read_answer(RouteAnswer, self.store.get(self.store.path("/v1/routes/{}", topic)),
                           "route")

    @property
    def clustered(self) -> bool:
        """More than one store shard. An admin that has not heard from the store yet asks it
        once (``/healthz``: every answer of a cluster's store names its size)."""
        if not self._heard and self.store.shards_hint == 0:
            self._heard = True
            try:
                self.store.get("/healthz")
            except ClepsydraError:
                pass
        return self.router.clustered

    def shard_stores(self) -> list[tuple[int, HttpClient]]:
        """Every shard's client (the one store with one shard)."""
        if not self.clustered:
            return [(0, self.store)]
        return [(m.id, self.router.client(m.id)) for m in self.router.members()]

    # ---- topics --------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        """Every topic with its queues (on every shard, with more than one)."""
        listed = sorted(list_topics(self.store), key=lambda t: t.name)
        if not self.clustered:
            return listed
        return [self.router.topic(t.name, fresh=True) or t for t in listed]

    def topic(self, name: str) -> TopicInfo:
        """A topic with its queues' offsets (on every shard, with more than one)."""
        info = self.router.topic(name, fresh=True)
        if info is None:
            raise TopicNotFound(f"topic {name} does not exist")
        return info

    def create_topic(self, name: str, queues: int) -> TopicInfo:
        return TopicInfo.of(read_answer(TopicAnswer, self.store.post(
            "/v1/topics", TopicCreate(name, queues).to_json()), "topic"))

    def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Create a topic, or change its number of queues (RocketMQ's ``updateTopic``, rule
        A1 of docs/semantics.md): growing adds empty queues; shrinking hides the last ones and
        is refused (``TOPIC_NOT_DRAINED``) while one still holds messages not consumed.
        Consumers rebalance at their next heartbeat."""
        return TopicInfo.of(read_answer(TopicAnswer, self.store.put(
            self.store.path("/v1/topics/{}", name), TopicUpdate(queues).to_json()), "topic"))

    def delete_topic(self, name: str) -> TopicDeleted:
        """Delete a topic, its queues and every group's progress on it (RocketMQ's
        ``deleteTopic``, rule A2); system topics are refused (Forbidden, S3). With more than
        one store shard its ``shards`` say where it was deleted."""
        return read_answer(TopicDeleted, self.store.delete(
            self.store.path("/v1/topics/{}", name)), "topic deleted")

    # ---- messages ------------------------------------------------------------------------

    def message_copies(self, msg_id: str) -> list[Message]:
        """Every stored copy of a message, oldest first - parked, delivered, retried,
        dead-lettered, resent (DEC-message-history) - by its msgId or one copy's offsetMsgId;
        MessageNotFound when there is none."""
        found = read_answer(MessageList, self.store.get(
            self.store.path("/v1/messages/{}", msg_id)), "message look-up")
        copies = [Message.of(m) for m in found.messages]
        if not copies:
            raise MessageNotFound(f"no message with msgId {msg_id}")
        return copies

    def message(self, msg_id: str) -> Message:
        """A message by msgId: the copy whose offsetMsgId it is, else its newest copy."""
        copies = self.message_copies(msg_id)
        named = [m for m in copies if m.offset_msg_id.upper() == msg_id.upper()]
        return (named or copies)[-1]

    def message_history(self, msg_id: str) -> MessageHistory:
        """A message's lifecycle timeline (``GET /v1/messages/{msgId}/history``): its copies read
        as hops, oldest first, and each group's state; MessageNotFound when there is none."""
        return read_answer(MessageHistory, self.store.get(
            self.store.path("/v1/messages/{}/history", msg_id)), "message history")

    def messages_by_key(self, topic: str, key: str) -> list[Message]:
        found = read_answer(MessageList, self.store.get("/v1/messages",
                                                        {"topic": topic, "key": key}),
                            "message look-up")
        return [Message.of(m) for m in found.messages]

    def message_at(self, commitlog_offset: int) -> Message:
        return Message.of(read_answer(StoredMessage, self.store.get(
            self.store.path("/v1/commitlog/{}", commitlog_offset)), "message"))

    # ---- groups --------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """Groups the retry service has settings for."""
        return sorted(read_answer(GroupNames, self.retry.get("/v1/groups")).groups)

    def group_settings(self, group: str) -> dict[str, Any]:
        """The group's retry settings (the retry service's answer, its JSON)."""
        return read_answer(GroupSettingsAnswer, self.retry.get(
            self.retry.path("/v1/groups/{}", group)), "group settings").to_json()

    def set_group_settings(self, group: str, *, retry_queue_nums: int | None = None,
                           retry_max_times: int | None = None) -> dict[str, Any]:
        """Change the fields given (the others keep their value); the settings now."""
        patch = GroupSettingsPatch(retry_queue_nums, retry_max_times)
        return read_answer(GroupSettingsAnswer, self.retry.put(
            self.retry.path("/v1/groups/{}", group), patch.to_json()), "group settings").to_json()

    def consumers(self, group: str) -> GroupConsumers:
        answer = read_answer(Consumers,
                       self.store.get(self.store.path("/v1/groups/{}/consumers", group)))
        return GroupConsumers(answer.consumers, answer.consistent,
                              [m.to_json() for m in answer.mismatches])

    def offsets(self, group: str, topic: str | None = None) -> dict[MessageQueue, int]:
        """The group's committed offsets (on every shard, with more than one)."""
        out: dict[MessageQueue, int] = {}
        for shard, http in self.shard_stores():
            offsets = queue_offsets(read_answer(GroupOffsets, http.get(
                http.path("/v1/groups/{}/offsets", group), {"topic": topic})), shard)
            out.update((q, o) for q, o in offsets.items() if topic is None or q.topic == topic)
        return out

    def commit_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        http = self.store if not self.clustered else self.router.client(queue.shard)
        http.put(http.path("/v1/groups/{}/offsets", group),
                 OffsetCommit(queue.topic, queue.queue_id, offset).to_json())

    def progress(self, group: str, topics: list[str] | None = None,
                 strategy: AllocateStrategy | None = None) -> list[QueueProgress]:
        """Per queue of the group's topics (from its live consumers' subscriptions when not
        given, plus its retry topic): end offset, committed offset, lag and owner. Owners are
        computed as the consumers do (C1), with ``strategy`` (average by default)."""
        group_consumers = self.consumers(group)
        names = list(topics or set(group_consumers.topics)
                     | {q.topic for q in self.offsets(group)})
        retry = naming.retry_topic(group)
        if retry not in names:
            names.append(retry)
        if not names:
            return []
        broadcasting = any(c.message_model == "BROADCASTING" for c in group_consumers.consumers)
        rows: list[QueueProgress] = []
        for name in sorted(set(names)):
            info = self.router.topic(name, fresh=True)
            if info is None:
                continue
            committed = self.offsets(group, name)
            queues = info.message_queues()
            owners = ({} if broadcasting else
                      allocate_all(strategy or AverageStrategy(), queues, group_consumers.ids))
            for q in info.queues:
                mq = MessageQueue(name, q.queue_id, q.shard)
                owner = "(every consumer)" if broadcasting and group_consumers.ids \
                    else owners.get(mq)
                rows.append(QueueProgress(mq, q.max_offset, committed.get(mq), owner))
        return rows

    # ---- dead letters (R16) --------------------------------------------------------------

    def dlq_page(self, group: str, offset: int = 0, max_count: int = 100,
                 dlq_filter: DlqFilter | None = None, shard: int | None = None) -> DlqPage:
        params: dict[str, Any] = {"offset": offset, "max": max_count}
        if shard is not None:
            params["shard"] = shard
        params.update((dlq_filter or DlqFilter()).to_json())
        page = read_answer(wire_dlq.DlqPage,
                     self.retry.get(self.retry.path("/v1/groups/{}/dlq", group), params))
        messages = [Message.of(m) for m in page.messages]
        return DlqPage(messages, page.next_offset, page.max_offset or 0, page.next_shard,
                       tuple(page.unreachable or ()))

    def dlq_messages(self, group: str, dlq_filter: DlqFilter | None = None, *,
                     page_size: int = 100, limit: int | None = None,
                     on_page: Callable[[DlqPage], None] | None = None) -> Iterator[Message]:
        """Every visible dead letter (matching the filter), oldest first (shard by shard,
        with more than one store shard)."""
        offset, seen = 0, 0
        shard: int | None = None
        while True:
            page = self.dlq_page(group, offset, page_size, dlq_filter, shard)
            if on_page is not None:
                on_page(page)
            for m in page.messages:
                yield m
                seen += 1
                if limit is not None and seen >= limit:
                    return
            if page.next_shard is not None and (page.next_shard != shard
                                                or page.next_offset > offset):
                shard, offset = page.next_shard, page.next_offset
                continue
            if page.next_offset <= offset or page.next_offset >= page.max_offset:
                return
            offset = page.next_offset

    def dlq_show(self, group: str, msg_id: str) -> Message:
        """One dead letter of the group (with its body and attempt history)."""
        raw = self.retry.get(self.retry.path("/v1/groups/{}/dlq/{}", group, msg_id))
        return Message.of(read_answer(wire_dlq.DlqMessage, raw))

    def _selection(self, msg_ids: list[str] | None, all_messages: bool,
                   dlq_filter: DlqFilter | None) -> DlqPurge:
        if msg_ids:
            return DlqPurge(msg_ids=list(msg_ids))
        if dlq_filter is not None and not dlq_filter.is_empty():
            return DlqPurge(filter=dlq_filter)
        if all_messages:
            return DlqPurge(all=True)
        raise ValidationError("say which dead letters: msgIds, a filter, or all",
                              rule="R16", code="INVALID_REQUEST")

    def dlq_resend(self, group: str, msg_ids: list[str] | None = None, *,
                   all_messages: bool = False, dlq_filter: DlqFilter | None = None,
                   to_origin: bool = False, delay_level: int = 0,
                   max_per_second: float | None = None) -> ResendResult:
        """Resend into the group's retry topic at a level, so the group alone receives them
        again; ``to_origin``: back to their original topics, where every subscribed group
        does: one, a filter, or all (R16)."""
        chosen = self._selection(msg_ids, all_messages, dlq_filter)
        body = DlqResend(chosen.msg_ids, chosen.all, chosen.filter,
                         target="origin" if to_origin else None,
                         delay_level=None if to_origin else (delay_level or None),
                         max_per_second=max_per_second or None)
        raw = self.retry.post(self.retry.path("/v1/groups/{}/dlq/resend", group),
                              body.to_json(), timeout_s=max(self.retry.timeout_s, 600.0))
        return read_answer(ResendResult, raw)

    def dlq_purge(self, group: str, msg_ids: list[str] | None = None, *,
                  all_messages: bool = False, dlq_filter: DlqFilter | None = None) -> int:
        body = self._selection(msg_ids, all_messages, dlq_filter)
        raw = self.retry.post(self.retry.path("/v1/groups/{}/dlq/purge", group),
                              body.to_json(), timeout_s=max(self.retry.timeout_s, 600.0))
        return read_answer(PurgeResult, raw).purged

    def dlq_audit(self, group: str, max_count: int = 100) -> list[dict[str, Any]]:
        """Every resend and purge of the group (oldest first), each an ``AuditRecord``'s
        JSON."""
        raw = self.retry.get(self.retry.path("/v1/groups/{}/dlq/audit", group),
                             {"max": max_count})
        return [record.to_json() for record in read_answer(DlqAudit, raw).records]

    # ---- delay levels --------------------------------------------------------------------

    def levels(self, now_ms: int | None = None, *, shard: int = 0) -> list[LevelStatus]:
        """The delay table with backlog (entries not yet handed over) and lag per level,
        from the store alone (no Redis); of ``shard`` with more than one store shard."""
        store = self.store if not self.clustered else self.router.client(shard)
        table = LevelTable.from_json(store.get("/v1/schedule/levels"))
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        out = []
        for info in table.levels:
            next_ts = (self._deliver_ts(store, info.level, info.first_pending) if info.backlog
                       else None)
            lag = max(now_ms - next_ts, 0) if next_ts is not None else 0
            out.append(LevelStatus(info, lag, next_ts))
        return out

    def levels_by_shard(self, now_ms: int | None = None) -> dict[int, list[LevelStatus]]:
        """:meth:`levels` of every store shard."""
        return {shard: self.levels(now_ms, shard=shard) for shard, _ in self.shard_stores()}

    def _deliver_ts(self, store: HttpClient, level: int, offset: int) -> int | None:
        try:
            raw = store.get(store.path("/v1/schedule/levels/{}/entries", level),
                            {"offset": offset, "max": 1})
        except NotFound:
            return None
        ts = ScheduleEntries.from_json(raw).deliver_ts
        return int(ts[0]) if ts else None

    # ---- timers (SPEC T1) ----------------------------------------------------------------

    def timers(self, *, shard: int = 0) -> TimerBacklog:
        """The store's timer backlog: pending timers by hour ahead, handed over so far, the
        next due time and the lateness of recent hand-overs (``GET /v1/schedule/timers``);
        of ``shard`` with more than one store shard."""
        store = self.store if not self.clustered else self.router.client(shard)
        return TimerBacklog.from_json(store.get("/v1/schedule/timers"))

    def timers_by_shard(self) -> dict[int, TimerBacklog]:
        """:meth:`timers` of every store shard."""
        return {shard: self.timers(shard=shard) for shard, _ in self.shard_stores()}

