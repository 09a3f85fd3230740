"""The store's consumer-group routes (SPEC R2, R3, R5, C1, C5) and the retry service's group
settings route:

- ``PUT /v1/groups/{group}/settings`` (store), ``PUT /v1/groups/{group}`` (retry)
  :class:`GroupSettingsPatch` -> :class:`GroupSettingsAnswer` (201 created, 200 changed)
- ``GET /v1/groups`` (store) -> :class:`GroupSettingsList`; (retry) -> :class:`GroupNames`
- ``PUT /v1/groups/{group}/offsets`` :class:`OffsetCommit` -> :class:`OffsetCommitted`
- ``GET /v1/groups/{group}/offsets?topic=`` -> :class:`GroupOffsets`
- ``POST /v1/groups/{group}/heartbeat`` :class:`Heartbeat` -> :class:`HeartbeatAnswer`
- ``GET /v1/groups/{group}/consumers`` -> :class:`Consumers`
- ``DELETE /v1/groups/{group}/consumers/{clientId}`` -> :class:`ConsumerRemoved`
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clepsydra_core.errors import ValidationError
from clepsydra_core.groups import MAX_RETRY_QUEUE_NUMS
from clepsydra_core.retry_rules import ORDERLY_MAX_RECONSUME_TIMES
from clepsydra_core.wire.cluster import ShardsApplied
from clepsydra_core.wire.codec import INT32_MAX, INT64_MAX, INT64_MIN, WireValue, wire_meta
from clepsydra_core.wire.topics import TOPIC_SCHEMA, topic_meta

EXAMPLE_GROUP = "billing"
"""The group name the documents' examples use."""
MAX_CLIENT_ID = 255
ANY_TEXT = r"^[\s\S]+$"
"""Any non-empty text (the same in ECMA-262 and Python: ``.`` is not)."""
CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
MESSAGE_MODELS = (CLUSTERING, BROADCASTING)
QUEUE_ID_KEY = "^[0-9]{1,10}$"
"""A queue id as a JSON object key (GroupOffsets)."""
_QUEUE_ID = re.compile("[0-9]{1,10}")


@dataclass(frozen=True, slots=True)
class GroupSettingsPatch(WireValue):
    """Fields not given keep their current value (or the default)."""

    retry_queue_nums: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=MAX_RETRY_QUEUE_NUMS, code="INVALID_GROUP_SETTINGS",
        type_code="INVALID_GROUP_SETTINGS", rule="R3",
        doc="queues of the group's %RETRY% topic (R3); 0 drops retries (R2)"))
    retry_max_times: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=ORDERLY_MAX_RECONSUME_TIMES, code="INVALID_GROUP_SETTINGS",
        type_code="INVALID_GROUP_SETTINGS", rule="R5",
        doc="retries before the DLQ when a send-back does not say (R5)"))


@dataclass(frozen=True, slots=True)
class GroupSettingsAnswer(WireValue):
    group: str
    retry_queue_nums: int
    retry_max_times: int
    shards: ShardsApplied | None = field(default=None, metadata=wire_meta(
        doc="with more than one store shard (the store's route): the shards that applied it"))


@dataclass(frozen=True, slots=True)
class GroupSettingsList(WireValue):
    groups: list[GroupSettingsAnswer]


@dataclass(frozen=True, slots=True)
class OffsetCommit(WireValue):
    """The group's progress in one queue: the next offset to consume (at most the queue's
    maxOffset; a queue or offset the topic does not have is 404 OFFSET_OUT_OF_RANGE)."""

    topic: str = field(metadata=topic_meta())
    queue_id: int = field(metadata=wire_meta(minimum=0, maximum=INT32_MAX))
    offset: int = field(metadata=wire_meta(minimum=0))


@dataclass(frozen=True, slots=True)
class OffsetCommitted(WireValue):
    group: str
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class Heartbeat(WireValue):
    """A consumer registers or refreshes itself (C1, C5)."""

    client_id: str = field(metadata=wire_meta(pattern=ANY_TEXT, max_length=MAX_CLIENT_ID))
    subscriptions: dict[str, str] | None = field(default=None, metadata=wire_meta(
        doc="topic -> tag expression", schema={"propertyNames": TOPIC_SCHEMA}))
    message_model: str | None = field(default=None, metadata=wire_meta(
        pattern=f"^(?:{'|'.join(MESSAGE_MODELS)})$", doc="default CLUSTERING"))


@dataclass(frozen=True, slots=True)
class GroupNames(WireValue):
    """The groups the retry service has settings for."""

    groups: list[str]


@dataclass(frozen=True, slots=True)
class ConsumerInfo(WireValue):
    """A live consumer of a group: what it subscribes to and when it last beat."""

    client_id: str
    subscriptions: dict[str, str] = field(metadata=wire_meta(doc="topic -> tag expression"))
    message_model: str = field(metadata=wire_meta(schema={"enum": list(MESSAGE_MODELS)}))
    last_heartbeat_ms: int


@dataclass(frozen=True, slots=True)
class Subscription(WireValue):
    """What the group's other consumers subscribe to (C5)."""

    subscriptions: dict[str, str]
    message_model: str = field(metadata=wire_meta(schema={"enum": list(MESSAGE_MODELS)}))


@dataclass(frozen=True, slots=True)
class Mismatch(WireValue):
    """A consumer that subscribes differently from the group's majority (ties: the
    longest-registered consumer's) (SPEC C5)."""

    client_id: str
    subscriptions: dict[str, str]
    message_model: str = field(metadata=wire_meta(schema={"enum": list(MESSAGE_MODELS)}))
    expected: Subscription
    message: str


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer(WireValue):
    """The group's live consumers (client ids, sorted) after the heartbeat (C1, C5)."""

    consumers: list[str]
    consistent: bool
    mismatches: list[Mismatch]


@dataclass(frozen=True, slots=True)
class Consumers(WireValue):
    """A group's live consumers, sorted by client id, and whether they subscribe alike."""

    group: str
    consumers: list[ConsumerInfo]
    consistent: bool
    mismatches: list[Mismatch]


@dataclass(frozen=True, slots=True)
class GroupOffsets(WireValue):
    """A group's committed offsets: topic -> queue id (as a JSON object key) -> offset."""

    group: str
    offsets: dict[str, dict[str, int]] = field(metadata=wire_meta(
        doc="{topic: {queueId: offset}}", schema={"additionalProperties": {
            "type": "object", "propertyNames": {"pattern": QUEUE_ID_KEY},
            "additionalProperties": {"type": "integer", "minimum": INT64_MIN,
                                     "maximum": INT64_MAX}}}))
    shards: dict[str, dict[str, dict[str, int]]] | None = field(default=None, metadata=wire_meta(
        doc="a broadcasting consumer's own file only: the offsets of store shards other than "
            "0, {shard: {topic: {queueId: offset}}} (DEC-store-shards); the store answers its "
            "own shard's in offsets"))

    def wire_check(self, name: str) -> None:
        for shard in self.shards or {}:
            if not _QUEUE_ID.fullmatch(shard):
                raise ValidationError(f"{name}.shards: {shard!r} is not a shard id",
                                      code="INVALID_REQUEST")
        for topic, queues in self.offsets.items():
            for key in queues:
                if not _QUEUE_ID.fullmatch(key):
                    raise ValidationError(f"{name}.offsets[{topic!r}]: {key!r} is not a queue "
                                          "id", code="INVALID_REQUEST")


@dataclass(frozen=True, slots=True)
class ConsumerRemoved(WireValue):
    """Whether the consumer was registered (false: it was not)."""

    removed: bool
