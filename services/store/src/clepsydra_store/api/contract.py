"""The store's route table: one :class:`~clepsydra_store.api.envelope.StoreRoute` per
operation, the one place a route is declared. Each holds its OpenAPI operation
(:class:`~clepsydra_web.openapi.Route`, its values the wire types of :mod:`clepsydra_core.wire`;
:data:`SCHEMAS` holds the one answer that is two of them at once, FLUSH_TIMEOUT's), its Flask
endpoint, its framework-free handler, the action it needs, how it is traced and counted, and
the ways in that answer it. From it are built: ``openapi.json`` (``make openapi``; a unit test
holds the checked-in file equal to it), Flask's views (``app.py``), the access rules
(:data:`STORE_ACCESS`), the lean WSGI path's matcher (``fastpath.py``) and the poller's
request-line pattern (``inline.py``).

Adding a route: its handler in the module of its resource, its ``_route(...)`` in
:data:`ROUTES` (a path parameter of a new name to :data:`PATH_PARAMS`), ``make openapi``,
commit both.
"""

from __future__ import annotations

from typing import Any

from clepsydra_core.auth import Action
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import ID_PATTERN, MAX_SHARD
from clepsydra_core.validation import GROUP_MAX_LEN, GROUP_PATTERN
from clepsydra_core.wire.auth import TokenCreate, TokenCreated, TokenList, TokenRevoked
from clepsydra_core.wire.cluster import ClusterAnswer, RouteAnswer, ShardStatus
from clepsydra_core.wire.codec import INT32_MAX, INT64_MAX
from clepsydra_core.wire.copy import CopyBatch, RangeCopy, RangeCopyAnswer
from clepsydra_core.wire.groups import (
    EXAMPLE_GROUP,
    ConsumerRemoved,
    Consumers,
    GroupOffsets,
    GroupSettingsAnswer,
    GroupSettingsList,
    GroupSettingsPatch,
    Heartbeat,
    HeartbeatAnswer,
    OffsetCommit,
    OffsetCommitted,
)
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.history import MessageHistory
from clepsydra_core.wire.locks import LockAnswer, LockList, LockRequest, UnlockAnswer
from clepsydra_core.wire.messages import (
    DEFAULT_PULL,
    MAX_PULL,
    MAX_PULL_WAIT_MS,
    MessageList,
    PullAnswer,
    StoredMessage,
)
from clepsydra_core.wire.produce import MAX_BATCH, ProduceBatch, ProduceMessage, ProduceResults
from clepsydra_core.wire.produce import ProduceAnswer as Stored
from clepsydra_core.wire.schedule import (
    DEFAULT_ENTRIES,
    MAX_ENTRIES,
    HandoverAnswer,
    HandoverRequest,
    LevelTable,
    ScheduleEntries,
)
from clepsydra_core.wire.timers import (
    KeyCancelled,
    KeyRescheduled,
    MessageCancelled,
    MessageRescheduled,
    RescheduleRequest,
    TimerBacklog,
    TimerHandoverAnswer,
    TimerHandoverRequest,
)
from clepsydra_core.wire.topics import (
    EXAMPLE_TOPIC,
    TOPIC_SCHEMA,
    TopicAnswer,
    TopicCreate,
    TopicDeleted,
    TopicList,
    TopicUpdate,
)
from clepsydra_store.api import (
    cluster,
    groups,
    handover,
    history,
    internal,
    locks,
    messages,
    produce,
    queues,
    timers,
    tokens,
    topics,
)
from clepsydra_store.api.envelope import (
    Group,
    Handler,
    Holds,
    Lane,
    Parent,
    StoreRoute,
    Trace,
)
from clepsydra_web.auth import Need, PermissionTable
from clepsydra_web.openapi import ERROR, Answer, Api, Param, Route, ops_routes

AUTH_ERRORS = {409: "TOKENS_FILE_READ_ONLY: the tokens file is a read-only mount (a Kubernetes "
                    "Secret): change the Secret instead",
               404: "AUTH_OFF: access control is off (CLEPSYDRA_AUTH=off), there are no "
                    "tokens; or no token of that name"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "FlushTimeout": {"description": "FLUSH_TIMEOUT: appended, but the fsync did not complete "
                     "in time; not acknowledged, the producer may resend (P2)",
                     "allOf": [{"$ref": f"#/components/schemas/{ERROR}"},
                               {"$ref": "#/components/schemas/ProduceResults"}]},
}

FLUSH_TIMEOUT = Answer(503, "FLUSH_TIMEOUT: appended, fsync not done in time; not "
                            "acknowledged (P2)", "FlushTimeout")
DISK_FULL = {507: "DISK_FULL: the store's disk is used past CLEPSYDRA_STORE_DISK_MAX_RATIO "
                  "(default 0.90; the message names the ratio); nothing of the request was "
                  "stored. Writes are accepted again once retention frees space (P4)"}
FENCED_TEXT = ("FENCED: the request's fencing token is older than one a hand-over already "
               "carried: a newer holder of the scheduler's lease took over; nothing handed over")
MAX_LEVEL = DelayLevels.default().max_level

PATH_PARAMS = {
    "topic": Param("topic", TOPIC_SCHEMA, "topic name (P1), percent-encoded (`%RETRY%G` "
                   "travels as `%25RETRY%25G`)", example=EXAMPLE_TOPIC),
    "queueId": Param("queueId", {"type": "integer", "minimum": 0, "maximum": INT32_MAX}),
    "msgId": Param("msgId", {"type": "string", "pattern": ID_PATTERN},
                   "the message's msgId (its unique id: 32 hex digits when Clepsydra made it, "
                   "or the UNIQ_KEY its producer gave; printable ASCII, no spaces, at most 255 "
                   "characters), or the offsetMsgId of one of its copies"),
    "offset": Param("offset", {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
                    "CommitLog offset of the record's first byte"),
    "group": Param("group", {"type": "string", "pattern": GROUP_PATTERN,
                             "maxLength": GROUP_MAX_LEN}, "consumer group name",
                   example=EXAMPLE_GROUP),
    "clientId": Param("clientId", {"type": "string", "minLength": 1}),
    "name": Param("name", {"type": "string", "minLength": 1}, "a token's name"),
    "shard": Param("shard", {"type": "integer", "minimum": 0, "maximum": MAX_SHARD},
                   "a store shard's id (DEC-store-shards)"),
    "level": Param("level", {"type": "integer", "minimum": 1, "maximum": MAX_LEVEL},
                   f"delay level, 1..the table's highest ({MAX_LEVEL} with the default table; "
                   "L1, L3)"),
}
_BODY_FLAG = Param("body", {"type": "boolean", "default": True},
                   "false: headers only (the body left out; `bodySize` still given)")
_SHARES = Param("shares", {"type": "boolean", "default": True},
                "false: each shard's id, address and write permission only, without the pass "
                "over its data (a client's membership)")
_TRACEPARENT = "`traceparent` (W3C trace context) header: the span continues it (O1)."


def _max(default: int, most: int) -> Param:
    return Param("max", {"type": "integer", "minimum": 1, "maximum": most, "default": default})


def _offset(doc: str) -> Param:
    return Param("offset", {"type": "integer", "minimum": 0, "maximum": INT64_MAX,
                            "default": 0}, doc)


def _route(endpoint: str, handler: Handler, need: Need, doc: Route, *,
           operation: str | None = None, trace: Trace = Trace.SPAN, lane: Lane = Lane.FLASK,
           parent: Parent | None = None, holds: Holds | None = None,
           group: Group | None = None) -> StoreRoute:
    """A route of the table; its operation (span and metrics) is its endpoint's view name
    unless named."""
    return StoreRoute(doc, endpoint, handler, need, operation or endpoint.rpartition(".")[2],
                      trace, lane, parent, holds, group)


ROUTES: tuple[StoreRoute, ...] = (
    _route("topics.create_topic", topics.create_topic, Need(Action.TOPIC_ADMIN),
        Route("POST", "/v1/topics", "create_topic",
              "Create a topic (201; 200 when it exists with the same queue count).",
              [Answer(201, "Created", TopicAnswer),
               Answer(200, "Already exists with the same queues", TopicAnswer)],
              request=TopicCreate, errors=(403, 409),
              error_text={403: "FORBIDDEN: a system topic (S3), or NO_PERMISSION (R2)",
                          409: "TOPIC_CONFLICT: it exists with another queue count"})),
    _route("topics.list_topics", topics.list_topics, Need(Action.TOPIC_READ),
        Route("GET", "/v1/topics", "list_topics", "Every topic, system topics included.",
              [Answer(200, "Topics", TopicList)]), trace=Trace.IN_TRACE_ONLY),
    _route("topics.get_topic", topics.get_topic, Need(Action.TOPIC_READ),
        Route("GET", "/v1/topics/{topic}", "get_topic",
              "A topic with its queues' min/max offsets.", [Answer(200, "Topic", TopicAnswer)]),
        trace=Trace.IN_TRACE_ONLY),
    _route("topics.update_topic", topics.update_topic, Need(Action.TOPIC_ADMIN, "topic"),
        Route("PUT", "/v1/topics/{topic}", "update_topic",
              "Change a topic's queue count, or create it (201) when it does not exist, as "
              "RocketMQ's updateTopic (A1).",
              [Answer(200, "The topic as it now is", TopicAnswer),
               Answer(201, "Created", TopicAnswer)],
              request=TopicUpdate, errors=(403, 409),
              error_text={403: "FORBIDDEN: a system topic (S3), or NO_PERMISSION (R2)",
                          409: "TOPIC_NOT_DRAINED: a queue the shrink would hide holds "
                               "unconsumed messages (A1)"},
              description="Growing adds empty queues; shrinking hides the last queues from "
                          "producers and consumers and is refused while one of them holds a "
                          "message that a group with progress on the topic (or, with none, any "
                          "group) has not consumed. Their files stay: growing again shows them "
                          "with their offsets. Consumers rebalance at their next heartbeat.")),
    _route("topics.delete_topic", topics.delete_topic, Need(Action.TOPIC_ADMIN, "topic"),
        Route("DELETE", "/v1/topics/{topic}", "delete_topic",
              "Delete a topic: its queues and every group's progress on it at once; its "
              "messages stay until retention (A2).",
              [Answer(200, "Deleted", TopicDeleted)], errors=(403,),
              error_text={403: "FORBIDDEN: a system topic (S3), or NO_PERMISSION (R2)"})),
    _route("messages.produce_message", produce.produce_message, Need(Action.SEND, "topic"),
        Route("POST", "/v1/topics/{topic}/messages", "produce",
              "Produce one message (P1, L2, S1, S3, R10, P2).",
              [Answer(201, "Stored", Stored), FLUSH_TIMEOUT], request=ProduceMessage,
              errors=(403, 507), error_text=DISK_FULL,
              description="Acknowledged (201) only after the append; with sync flush only after "
                          "fsync. `traceparent` is injected when the message carries none (O1). "
                          "The reported placement is where it was stored: `SCHEDULE_TOPIC_XXXX` "
                          "for a delayed message, `%DLQ%<g>` for an R10 reroute. " + _TRACEPARENT),
        operation="produce", trace=Trace.FROM_MESSAGE, lane=Lane.POLLER,
        parent=produce.message_parent,
        group=Group(produce.one_request, produce.group_append, produce.one_answer)),
    _route("messages.produce_batch", produce.produce_messages, Need(Action.SEND, "topic"),
        Route("POST", "/v1/topics/{topic}/messages/batch", "produce_batch",
              f"Produce up to {MAX_BATCH} messages in one append; one bad message refuses the "
              "whole batch.",
              [Answer(201, "Stored, one result per message in order", ProduceResults),
               FLUSH_TIMEOUT], request=ProduceBatch, errors=(403, 507), error_text=DISK_FULL,
              description=_TRACEPARENT),
        operation="produce_batch", trace=Trace.FROM_MESSAGE, lane=Lane.POLLER,
        parent=produce.batch_parent),
    _route("queues.pull", queues.pull, Need(Action.PULL, "topic"),
        Route("GET", "/v1/topics/{topic}/queues/{queueId}/messages", "pull",
              "Pull from a queue, optionally filtered by tags (C3). The schedule topic is never "
              "pulled (S3).", [Answer(200, "Messages", PullAnswer)],
              query=(_offset("queue offset to read from (below the minimum reads from the "
                             "minimum; past maxOffset, or a queue the topic does not have: 404 "
                             "OFFSET_OUT_OF_RANGE)"),
                     _max(DEFAULT_PULL, MAX_PULL),
                     Param("tags", {"type": "string"}, "`*` or `a||b`"), _BODY_FLAG,
                     Param("waitMs", {"type": "integer", "minimum": 0,
                                      "maximum": MAX_PULL_WAIT_MS, "default": 0},
                           "hold the pull while nothing at the offset matches: it answers when a "
                           "message is appended to the queue or after this many ms; "
                           "0: at once. A store holding CLEPSYDRA_STORE_PULL_HOLD_MAX pulls "
                           "already, or stopping, answers at once")),
              errors=(403,)), lane=Lane.POLLER, holds=queues.may_hold),
    _route("messages.get_message", messages.get_message, Need(Action.MESSAGE_READ),
        Route("GET", "/v1/messages/{msgId}", "get_message",
              "Every stored copy of a message, by its msgId or one copy's offsetMsgId.",
              [Answer(200, "Every stored copy of the message, oldest first", MessageList)],
              description="Answers `{messages: [...]}` in the same shape as the look-up by key "
                          "(`GET /v1/messages?topic=&key=`): every stored copy of the message, "
                          "oldest first (at most 1000) - the parked copy in SCHEDULE_TOPIC_XXXX, "
                          "the delivered one, its %RETRY% copies, its dead letter, its resends - "
                          "found by the msgId they all keep (UNIQ_KEY). Given an offsetMsgId, the "
                          "copy stored there and every copy of its message "
                          "(DEC-message-history).")),
    _route("history.get_history", history.get_history, Need(Action.MESSAGE_READ),
        Route("GET", "/v1/messages/{msgId}/history", "message_history",
              "A message's lifecycle timeline: every copy read as a hop, in order, with each "
              "group's state (DEC-message-history).",
              [Answer(200, "The hops, oldest first, and each group's state", MessageHistory)],
              description="The copies of `GET /v1/messages/{msgId}` (at most 1000; `complete` "
                          "is false when there are more) read as produced, parked (level or "
                          "deliverAt, and whether it is pending, delivered, cancelled or "
                          "rescheduled), handed over (lateness), stored, sent back (reason, "
                          "attempt, next time), retry, dead letter, resent (when, by whom, to "
                          "where), rescheduled and cancelled; each with its time and its "
                          "copy's topic/queue/offset. A copy a group reads says whether the "
                          "group consumed it (its committed offset is past the copy's queue "
                          "offset); `groups` gives each group's state now: consumed, not_yet, "
                          "retrying or dead.")),
    _route("messages.find_messages", messages.find_messages, Need(Action.MESSAGE_READ),
        Route("GET", "/v1/messages", "find_messages",
              "Messages of a topic whose KEYS contain the key or whose UNIQ_KEY is the key.",
              [Answer(200, "Messages", MessageList)], errors=(404,),
              query=(Param("topic", TOPIC_SCHEMA, required=True),
                     Param("key", {"type": "string", "minLength": 1}, required=True),
                     _max(DEFAULT_PULL, MAX_PULL)))),
    _route("timers.cancel_message", timers.cancel_message, Need(Action.SEND),
        Route("DELETE", "/v1/messages/{msgId}", "cancel_message",
              "Cancel a pending delayed message (level or timer): it will never be delivered.",
              [Answer(200, "Cancelled", MessageCancelled)], errors=(403, 409),
              error_text={409: "ALREADY_DELIVERED: the message was handed over to its topic "
                               "already (or was never delayed)"},
              description="Needs the producer's right on the message's topic. Durable like a "
                          "produce (a tombstone record); a cancel racing the hand-over: exactly "
                          "one of them happens and the answer says which (SPEC T2, D9). A message "
                          "cancelled before answers 200 again.")),
    _route("timers.reschedule_message", timers.reschedule_message, Need(Action.SEND),
        Route("PATCH", "/v1/messages/{msgId}", "reschedule_message",
              "Give a pending delayed message a new delivery time (it becomes a timer message; "
              "its msgId stays).",
              [Answer(200, "Rescheduled", MessageRescheduled)], request=RescheduleRequest,
              errors=(403, 409),
              error_text={409: "ALREADY_DELIVERED: the message was handed over to its topic "
                               "already (or was never delayed)",
                          400: "INVALID_REQUEST: not exactly one of deliverAt and delayMs, or a "
                               "time past CLEPSYDRA_TIMER_MAX_DELAY (T1)"})),
    _route("timers.cancel_by_key", timers.cancel_by_key, Need(Action.SEND),
        Route("DELETE", "/v1/messages", "cancel_by_key",
              "Cancel every pending delayed message of a topic with a key.",
              [Answer(200, "Cancelled", KeyCancelled)], errors=(403, 404, 409),
              query=(Param("topic", TOPIC_SCHEMA, required=True),
                     Param("key", {"type": "string", "minLength": 1}, required=True)),
              error_text={409: "ALREADY_DELIVERED: every such message was handed over already",
                          404: "MESSAGE_NOT_FOUND: no message of the topic has the key; "
                               "TOPIC_NOT_EXIST"})),
    _route("timers.reschedule_by_key", timers.reschedule_by_key, Need(Action.SEND),
        Route("PATCH", "/v1/messages", "reschedule_by_key",
              "Give every pending delayed message of a topic with a key one new delivery time.",
              [Answer(200, "Rescheduled", KeyRescheduled)], request=RescheduleRequest,
              errors=(403, 404, 409),
              query=(Param("topic", TOPIC_SCHEMA, required=True),
                     Param("key", {"type": "string", "minLength": 1}, required=True)),
              error_text={409: "ALREADY_DELIVERED: every such message was handed over already",
                          404: "MESSAGE_NOT_FOUND: no pending message of the topic has the key; "
                               "TOPIC_NOT_EXIST"})),
    _route("messages.get_commitlog", messages.get_commitlog, Need(Action.MESSAGE_READ),
        Route("GET", "/v1/commitlog/{offset}", "get_commitlog",
              "The message whose record starts at a CommitLog offset.",
              [Answer(200, "The message", StoredMessage)], query=(_BODY_FLAG,))),
    _route("groups.list_groups", groups.list_groups, Need(Action.GROUP_READ),
        Route("GET", "/v1/groups", "list_groups",
              "Every consumer group that has settings, with them.",
              [Answer(200, "Groups", GroupSettingsList)]), trace=Trace.IN_TRACE_ONLY),
    _route("groups.put_group_settings", groups.put_group_settings,
           Need(Action.GROUP_ADMIN, "group"),
        Route("PUT", "/v1/groups/{group}/settings", "put_group_settings",
              "Create (201) or change (200) a group's retry settings, written to disk before the "
              "answer; fields not given keep their value (or the default: 1 retry queue, 16 "
              "retries).",
              [Answer(200, "Changed", GroupSettingsAnswer),
               Answer(201, "Created", GroupSettingsAnswer)],
              request=GroupSettingsPatch, request_required=False)),
    _route("groups.get_group_settings", groups.get_group_settings, Need(Action.GROUP_READ, "group"),
        Route("GET", "/v1/groups/{group}/settings", "get_group_settings",
              "A group's retry settings; 404 SUBSCRIPTION_GROUP_NOT_EXIST when it has none (R2).",
              [Answer(200, "Settings", GroupSettingsAnswer)]), trace=Trace.IN_TRACE_ONLY),
    _route("groups.commit_offset", groups.commit_offset, Need(Action.GROUP_CONSUME, "group"),
        Route("PUT", "/v1/groups/{group}/offsets", "commit_offset",
              "Commit a group's progress on one queue.",
              [Answer(200, "Committed", OffsetCommitted)],
              request=OffsetCommit, errors=(403,)),
        trace=Trace.IN_TRACE_ONLY, lane=Lane.LEAN),
    _route("groups.get_offsets", groups.get_offsets, Need(Action.GROUP_READ, "group"),
        Route("GET", "/v1/groups/{group}/offsets", "get_offsets",
              "A group's committed offsets (empty when it committed none).",
              [Answer(200, "Offsets", GroupOffsets)], query=(Param("topic", TOPIC_SCHEMA),)),
        trace=Trace.IN_TRACE_ONLY),
    _route("groups.heartbeat", groups.heartbeat, Need(Action.GROUP_CONSUME, "group"),
        Route("POST", "/v1/groups/{group}/heartbeat", "heartbeat",
              "Register or refresh a consumer (C1); reports subscription mismatches (C5).",
              [Answer(200, "The group's live consumers", HeartbeatAnswer)], request=Heartbeat,
              errors=(403,)), trace=Trace.IN_TRACE_ONLY, lane=Lane.LEAN),
    _route("locks.lock_queues", locks.lock_queues, Need(Action.GROUP_CONSUME, "group"),
        Route("POST", "/v1/groups/{group}/locks", "lock_queues",
              "Lock or renew a batch of queues for an orderly consumer (RocketMQ lockBatchMQ): an "
              "orderly consumer in clustering mode consumes a queue only while it holds its lock.",
              [Answer(200, "The queues the client now holds", LockAnswer)], request=LockRequest,
              errors=(403,),
              description="A queue held by another client whose lock has not expired "
                          "(CLEPSYDRA_STORE_LOCK_EXPIRY_S, default 60 s since its last lock) is "
                          "left out of the answer. Locks live in memory: after a store restart "
                          "every queue is free."), trace=Trace.IN_TRACE_ONLY),
    _route("locks.unlock_queues", locks.unlock_queues, Need(Action.GROUP_CONSUME, "group"),
        Route("POST", "/v1/groups/{group}/locks/unlock", "unlock_queues",
              "Release queues the client holds (RocketMQ unlockBatchMQ); queues held by another "
              "client are left alone.",
              [Answer(200, "The queues released", UnlockAnswer)], request=LockRequest,
              errors=(403,)), trace=Trace.IN_TRACE_ONLY),
    _route("locks.list_locks", locks.list_locks, Need(Action.GROUP_READ, "group"),
        Route("GET", "/v1/groups/{group}/locks", "list_locks",
              "The group's orderly queue locks that have not expired.",
              [Answer(200, "Locks held", LockList)]), trace=Trace.IN_TRACE_ONLY),
    _route("groups.list_consumers", groups.list_consumers, Need(Action.GROUP_READ, "group"),
        Route("GET", "/v1/groups/{group}/consumers", "list_consumers",
              "Live consumers of a group (expired after CLEPSYDRA_STORE_CONSUMER_EXPIRY_MS).",
              [Answer(200, "Consumers", Consumers)]), trace=Trace.IN_TRACE_ONLY),
    _route("groups.unregister_consumer", groups.unregister_consumer,
           Need(Action.GROUP_CONSUME, "group"),
        Route("DELETE", "/v1/groups/{group}/consumers/{clientId}", "unregister_consumer",
              "Unregister a consumer at its shutdown.",
              [Answer(200, "Removed or not registered", ConsumerRemoved)]),
        trace=Trace.IN_TRACE_ONLY),
    _route("schedule.levels", handover.levels, Need(Action.SCHEDULE_READ),
        Route("GET", "/v1/schedule/levels", "schedule_levels",
              "The delay-level table with each schedule queue's bounds and handed-over mark.",
              [Answer(200, "Levels", LevelTable)]), trace=Trace.UNTRACED),
    _route("schedule.entries", handover.entries, Need(Action.SCHEDULE_READ),
        Route("GET", "/v1/schedule/levels/{level}/entries", "schedule_entries",
              "Deliver timestamps of a level's schedule entries from an offset (D3).",
              [Answer(200, "Entries", ScheduleEntries)],
              query=(_offset("schedule queue offset to read from"),
                     _max(DEFAULT_ENTRIES, MAX_ENTRIES))),
        trace=Trace.IN_TRACE_ONLY, lane=Lane.LEAN),
    _route("schedule.handover", handover.handover, Need(Action.SCHEDULE_HANDOVER),
        Route("POST", "/v1/schedule/levels/{level}/handover", "handover",
              "Hand due entries over to their real topics (D4-D9): never early, never twice.",
              [Answer(200, "Outcome", HandoverAnswer)], request=HandoverRequest,
              errors=(403, 409), error_text={409: FENCED_TEXT},
              description="Continues at handedOver + 1 (the entry after the level's durable mark) "
                          "whatever fromOffset names: a fromOffset at or below the mark writes "
                          "nothing twice (D9, counted in skipped), one ahead of the mark starts at "
                          "handedOver + 1 all the same (no entry is ever skipped); the answer's "
                          "fromOffset is where it really started. At most max entries from there, "
                          "while due (D3, D5).")),
    _route("timers.timer_backlog", timers.timer_backlog, Need(Action.SCHEDULE_READ),
        Route("GET", "/v1/schedule/timers", "timer_backlog",
              "The timer backlog: pending timers by hour ahead, handed over, the next due time, "
              "lateness (SPEC D10).",
              [Answer(200, "Backlog", TimerBacklog)])),
    _route("timers.timer_handover", timers.timer_handover, Need(Action.SCHEDULE_HANDOVER),
        Route("POST", "/v1/schedule/timers/handover", "timer_handover",
              "Hand the due timer messages over to their real topics (the scheduler's): never "
              "early, never twice (T1, T2, D9).",
              [Answer(200, "Outcome", TimerHandoverAnswer)], request=TimerHandoverRequest,
              errors=(403, 409), error_text={409: FENCED_TEXT},
              description="Earliest first, at most max. When none is due, the call waits up to "
                          "waitMs for the next one (or for a timer parked due earlier), so a "
                          "scheduler needs no polling to be on time."), lane=Lane.LEAN),
    _route("internal.create_system_topic", internal.create_system_topic, Need(Action.INTERNAL_COPY),
        Route("POST", "/v1/internal/topics", "create_system_topic",
              "Create a %RETRY% or %DLQ% topic (retry service only).",
              [Answer(201, "Created", TopicAnswer), Answer(200, "Already exists", TopicAnswer)],
              request=TopicCreate, errors=(403, 409),
              error_text={403: "FORBIDDEN: not a %RETRY% or %DLQ% topic (S3), or NO_PERMISSION",
                          409: "TOPIC_CONFLICT: it exists with another queue count"})),
    _route("internal.copy", internal.copy, Need(Action.INTERNAL_COPY),
        Route("POST", "/v1/internal/copy", "copy",
              "Copy stored messages into other topics (send-back, DLQ, resend); bodies never "
              "cross the wire.", [Answer(201, "Copied", ProduceResults), FLUSH_TIMEOUT],
              request=CopyBatch, errors=(403, 404, 507), error_text=DISK_FULL),
        trace=Trace.UNTRACED),
    _route("internal.copy_range", internal.copy_range, Need(Action.INTERNAL_COPY),
        Route("POST", "/v1/internal/copy-range", "copyRange",
              "Copy queue offsets [fromOffset, fromOffset+max) of one queue to a topic, or each "
              "message to its original topic (RETRY_TOPIC): the DLQ 'resend all' (R16) in one "
              "write, no message crossing the wire.",
              [Answer(201, "Copied", RangeCopyAnswer), FLUSH_TIMEOUT], request=RangeCopy,
              errors=(403, 404, 507), error_text=DISK_FULL)),
    _route("auth.list_tokens", tokens.list_tokens, Need(Action.AUTH_ADMIN),
        Route("GET", "/v1/auth/tokens", "list_tokens",
              "Token names, roles and patterns (admin; never a token nor its hash).",
              [Answer(200, "The tokens", TokenList)], errors=(404,), error_text=AUTH_ERRORS)),
    _route("auth.create", tokens.create, Need(Action.AUTH_ADMIN),
        Route("POST", "/v1/auth/tokens", "create_token",
              "Create a token (admin): the answer is the only place it is ever shown.",
              [Answer(201, "Created", TokenCreated)], request=TokenCreate,
              errors=(404, 409), error_text=AUTH_ERRORS,
              description="Written to the store's CLEPSYDRA_AUTH_TOKENS_FILE atomically; every "
                          "service reading that file accepts the token within a second.")),
    _route("auth.revoke", tokens.revoke, Need(Action.AUTH_ADMIN),
        Route("DELETE", "/v1/auth/tokens/{name}", "revoke_token", "Revoke a token (admin).",
              [Answer(200, "Revoked", TokenRevoked)],
              errors=(404, 409), error_text=AUTH_ERRORS)),
    _route("cluster.members", cluster.members, Need(Action.TOPIC_READ),
        Route("GET", "/v1/cluster", "cluster",
              "Every store shard with its health and share of the data, asked of each; a shard "
              "that does not answer is listed `unreachable`, never left out (DEC-store-shards).",
              [Answer(200, "The shards", ClusterAnswer)], query=(_SHARES,)),
        trace=Trace.IN_TRACE_ONLY),
    _route("cluster.self_status", cluster.self_status, Need(Action.TOPIC_READ),
        Route("GET", "/v1/cluster/self", "cluster_self",
              "The answering shard's status and share of the data.",
              [Answer(200, "This shard", ShardStatus)], query=(_SHARES,)),
        trace=Trace.IN_TRACE_ONLY),
    _route("cluster.route", cluster.route, Need(Action.TOPIC_READ),
        Route("GET", "/v1/routes/{topic}", "route",
              "Every (shard, queueId) of a topic with its shard's address: what clients route "
              "sends, pulls, offsets and locks with.",
              [Answer(200, "The topic's queues on every shard", RouteAnswer)], errors=(404,),
              error_text={404: "TOPIC_NOT_EXIST: no shard that answered has it",
                          503: "SERVICE_UNAVAILABLE: no shard that answered has it and some did "
                               "not answer"},
              description="A shard that does not answer is in `unreachable` with its queues "
                          "listed all the same (`reachable` false, as many as the others have); "
                          "one that answered without the topic is in `missing`."),
        trace=Trace.IN_TRACE_ONLY),
    _route("cluster.drain", cluster.drain, Need(Action.CLUSTER_ADMIN),
        Route("POST", "/v1/cluster/shards/{shard}/drain", "drain_shard",
              "Make a shard refuse new messages (RocketMQ's write permission off) while its "
              "consumers, levels and timers drain; durable across its restarts "
              "(DEC-shard-drain).",
              [Answer(200, "The shard, draining", ShardStatus)], errors=(403, 404),
              error_text={403: "FORBIDDEN (not an admin), or NO_PERMISSION: a read-only store",
                          404: "NOT_FOUND: no such shard in this cluster"},
              description="Produce, send-back copies and DLQ resends on it answer 403 "
                          "NO_PERMISSION (the SDK sends elsewhere); `GET /v1/cluster` says when "
                          "it is `removable`.")),
    _route("cluster.resume", cluster.resume, Need(Action.CLUSTER_ADMIN),
        Route("POST", "/v1/cluster/shards/{shard}/resume", "resume_shard",
              "Make a drained shard take new messages again.",
              [Answer(200, "The shard, taking messages", ShardStatus)], errors=(403, 404))),
)
"""Every route of the store's v1 API, in the order of the OpenAPI document."""
OPS_ROUTES = ops_routes(Route(
    "GET", "/healthz", "healthz", "Liveness and whether the store accepts writes.",
    [Answer(200, "Up", StoreHealth)]))
"""The shared ops routes (``clepsydra_web.ops``): open, untraced, answered by Flask."""
STORE_ACCESS: PermissionTable = {route.endpoint: route.need for route in ROUTES}
"""Which action each route needs (access control); the ops routes are open."""

API = Api(
    title="Clepsydra store", version="1.0.0",
    description="The store service: CommitLog and ConsumeQueue owner (README.md, "
                "docs/contracts.md, docs/semantics.md). Errors are {error, message}; every "
                "route answers JSON except /metrics. A method a path does not list is 405 "
                "METHOD_NOT_ALLOWED with an Allow header. Generated from "
                "clepsydra_store.api.contract (make openapi).",
    routes=[*(route.doc for route in ROUTES), *OPS_ROUTES], path_params=PATH_PARAMS,
    schemas=SCHEMAS,
    servers=("http://127.0.0.1:8081",))
