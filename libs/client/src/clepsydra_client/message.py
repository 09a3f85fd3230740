"""What the SDK hands to applications: a read-only Message built from the v1 JSON view
(``clepsydra_core.records.message_to_json``), a MessageQueue, and a SendResult."""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.msgid import shard_of_offset_msg_id
from clepsydra_core.wire import timers
from clepsydra_core.wire.messages import PullAnswer, StoredMessage
from clepsydra_core.wire.produce import ProduceAnswer


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of one topic on one store shard (RocketMQ's (topic, brokerName, queueId);
    DEC-store-shards); sorts by (topic, shard, queue_id) identically on every consumer (C1).
    Shard 0 is the only one of a one-store cluster: ``MessageQueue("orders", 3)``."""

    topic: str
    queue_id: int
    shard: int = 0

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return (self.topic, self.shard, self.queue_id) < (other.topic, other.shard,
                                                            other.queue_id)

    def __str__(self) -> str:
        if self.shard:
            return f"{self.topic}@{self.shard}#{self.queue_id}"
        return f"{self.topic}#{self.queue_id}"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed consumption, as carried in ``FAILURE_HISTORY``."""

    time_ms: int
    consumer: str
    reason: str
    reconsume_times: int | None = None
    """Which attempt failed (0 = the first delivery)."""

    @classmethod
    def from_json(cls, raw: Any) -> Attempt:
        if not isinstance(raw, dict):
            return cls(0, "", str(raw))
        if "unparsed" in raw:
            return cls(0, "", str(raw["unparsed"]))
        time_ms = raw.get("time", raw.get("timeMs", 0))
        times = raw.get("reconsumeTimes")
        return cls(int(time_ms) if isinstance(time_ms, int | float) else 0,
                   str(raw.get("consumer") or raw.get("consumerId") or ""),
                   str(raw.get("reason") or ""),
                   int(times) if isinstance(times, int) else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": self.time_ms, "consumer": self.consumer,
                               "reason": self.reason}
        if self.reconsume_times is not None:
            out["reconsumeTimes"] = self.reconsume_times
        return out


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. ``topic`` is the business topic: for a message pulled from the group's
    retry topic the push consumer resets it to the original (``RETRY_TOPIC``, SPEC R15), while
    ``store_topic`` keeps where it was pulled from. ``msg_id`` is the message's unique id, the
    same in every copy (the one its producer was given); ``offset_msg_id`` is where this copy
    is stored (DEC-message-history)."""

    msg_id: str
    topic: str
    body: bytes
    queue_id: int = 0
    queue_offset: int = 0
    commitlog_offset: int = 0
    tags: str | None = None
    keys: tuple[str, ...] = ()
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    store_timestamp: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_host: str = ""
    reconsume_times: int = 0
    sys_flag: int = 0
    store_topic: str = ""
    offset_msg_id: str = ""

    @classmethod
    def of(cls, stored: StoredMessage) -> Message:
        """The store's message view (a pull's, a look-up's, a dead letter's) as read with its
        wire type."""
        if stored.body_base64 is not None:
            body = base64.b64decode(stored.body_base64)
        else:
            body = (stored.body or "").encode()
        return cls(stored.msg_id, stored.topic, body, stored.queue_id, stored.queue_offset,
                   stored.commitlog_offset, stored.tags, tuple(stored.keys.split()),
                   stored.flag, stored.properties, stored.store_timestamp,
                   stored.born_timestamp, stored.born_host, stored.store_host,
                   stored.reconsume_times, stored.sys_flag, stored.topic,
                   stored.offset_msg_id or stored.msg_id)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Message:
        """From the store's message view (:class:`StoredMessage`, its JSON names taken from
        there; read field by field, half the cost of building the wire value first, on the
        path of every message consumed). The slots are filled directly, not through the frozen
        class's ``__init__`` (a third of the cost, as ``SendResult.from_json`` does:
        DEC-pull-json-view, DEC-sdk-send-path)."""
        get = raw.get
        props = get(_V_PROPERTIES) or {}
        keys = get(_V_KEYS) or props.get(P.KEYS, "")
        topic = str(get(_V_TOPIC, ""))
        encoded = get(_V_BODY_BASE64)
        msg_id = str(get(_V_MSG_ID, ""))
        m = _new_message(cls)
        _M_MSG_ID(m, msg_id)
        _M_TOPIC(m, topic)
        _M_BODY(m, base64.b64decode(encoded) if encoded is not None
                else str(get(_V_BODY) or "").encode())
        _M_QUEUE_ID(m, int(get(_V_QUEUE_ID, 0)))
        _M_QUEUE_OFFSET(m, int(get(_V_QUEUE_OFFSET, 0)))
        _M_COMMITLOG_OFFSET(m, int(get(_V_COMMITLOG_OFFSET, 0)))
        _M_TAGS(m, get(_V_TAGS, props.get(P.TAGS)))
        _M_KEYS(m, tuple(keys.split() if isinstance(keys, str) else keys))
        _M_FLAG(m, int(get(_V_FLAG, 0)))
        _M_PROPERTIES(m, dict(props))
        _M_STORE_TIMESTAMP(m, int(get(_V_STORE_TIMESTAMP, 0)))
        _M_BORN_TIMESTAMP(m, int(get(_V_BORN_TIMESTAMP, 0)))
        _M_BORN_HOST(m, str(get(_V_BORN_HOST, "")))
        _M_STORE_HOST(m, str(get(_V_STORE_HOST, "")))
        _M_RECONSUME_TIMES(m, int(get(_V_RECONSUME_TIMES, 0)))
        _M_SYS_FLAG(m, int(get(_V_SYS_FLAG, 0)))
        _M_STORE_TOPIC(m, topic)
        _M_OFFSET_MSG_ID(m, str(get(_V_OFFSET_MSG_ID) or msg_id))
        return m

    @property
    def text(self) -> str:
        """The body as UTF-8 text (undecodable bytes replaced)."""
        return self.body.decode(errors="replace")

    @property
    def shard(self) -> int:
        """The store shard that holds this copy: named by its offsetMsgId (DEC-shard-in-msgid;
        0 for an id without one)."""
        return shard_of_offset_msg_id(self.offset_msg_id) or 0

    @property
    def queue(self) -> MessageQueue:
        """The queue it was pulled from."""
        return MessageQueue(self.store_topic or self.topic, self.queue_id, self.shard)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(P.UNIQ_KEY)

    @property
    def origin_topic(self) -> str:
        """The topic it was first sent to (``RETRY_TOPIC`` once retried)."""
        return self.properties.get(P.RETRY_TOPIC) or self.topic

    @property
    def origin_message_id(self) -> str:
        """msgId of the first stored copy (``ORIGIN_MESSAGE_ID`` once retried)."""
        return self.properties.get(P.ORIGIN_MESSAGE_ID) or self.msg_id

    @property
    def max_reconsume_times(self) -> int | None:
        raw = self.properties.get(P.MAX_RECONSUME_TIMES)
        return int(raw) if raw and raw.lstrip("-").isdigit() else None

    @property
    def delay_level(self) -> int:
        raw = self.properties.get(P.DELAY, "0")
        return int(raw) if raw.isdigit() else 0

    @property
    def trace_id(self) -> str | None:
        return P.trace_id_of(self.properties)

    @property
    def failure_history(self) -> list[Attempt]:
        """Failed attempts carried across retries (``FAILURE_HISTORY``), oldest first."""
        return parse_failure_history(self.properties.get(P.FAILURE_HISTORY))

    @property
    def is_retry(self) -> bool:
        return naming.is_retry_topic(self.store_topic or self.topic)

    def with_origin_topic(self) -> Message:
        """The message as a consumer of the group sees it: a copy pulled from ``%RETRY%<g>``
        carries its original topic again (``store_topic`` keeps the retry topic)."""
        origin = self.properties.get(P.RETRY_TOPIC)
        if origin and naming.is_retry_topic(self.topic):
            return replace(self, topic=origin, store_topic=self.topic)
        return self

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
            "topic": self.store_topic or self.topic,
            "queueId": self.queue_id, "queueOffset": self.queue_offset,
            "commitLogOffset": self.commitlog_offset, "tags": self.tags,
            "keys": " ".join(self.keys), "flag": self.flag, "properties": self.properties,
            "storeTimestamp": self.store_timestamp, "bornTimestamp": self.born_timestamp,
            "bornHost": self.born_host, "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times, "sysFlag": self.sys_flag,
        }
        try:
            out["body"] = self.body.decode()
        except UnicodeDecodeError:
            out["bodyBase64"] = base64.b64encode(self.body).decode()
        return out


def parse_failure_history(raw: str | None) -> list[Attempt]:
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        return [Attempt(0, "", raw)]
    if not isinstance(items, list):
        items = [items]
    return [Attempt.from_json(item) for item in items]


def append_failure(raw: str | None, attempt: Attempt, *, keep: int = 32) -> str:
    """``FAILURE_HISTORY`` with one more attempt (the newest ``keep`` are kept)."""
    history = [a.to_json() for a in parse_failure_history(raw)]
    history.append(attempt.to_json())
    return json.dumps(history[-keep:], separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where the store put a message (the schedule topic for a delayed one, the DLQ for an
    R10 reroute). ``msg_id`` is the message's unique id: its consumers see the same, and every
    look-up by it finds all its copies; ``offset_msg_id`` is where this copy is stored."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    uniq_key: str | None = None
    offset_msg_id: str = ""
    deliver_at: int | None = None
    """A timer message's delivery time as the store took it (epoch ms; SPEC T1), else None."""

    @classmethod
    def from_json(cls, raw: dict[str, Any], uniq_key: str | None = None) -> SendResult:
        """From the store's produce answer (:class:`clepsydra_core.wire.produce.ProduceAnswer`,
        its JSON names taken from there; read field by field, a third of the cost of building
        the wire value, on the path of every message sent). The slots are filled directly, not
        through the frozen class's ``__init__`` (``object.__setattr__`` by name for each
        field: half of a send's result's cost; DEC-sdk-send-path)."""
        get = raw.get
        msg_id = str(get(_A_MSG_ID, ""))
        result = _new_result(cls)
        _SET_MSG_ID(result, msg_id)
        _SET_TOPIC(result, str(get(_A_TOPIC, "")))
        _SET_QUEUE_ID(result, int(get(_A_QUEUE_ID, 0)))
        _SET_QUEUE_OFFSET(result, int(get(_A_QUEUE_OFFSET, 0)))
        _SET_COMMITLOG_OFFSET(result, int(get(_A_COMMITLOG_OFFSET, 0)))
        _SET_STORE_TIMESTAMP(result, int(get(_A_STORE_TIMESTAMP, 0)))
        _SET_UNIQ_KEY(result, uniq_key)
        offset_msg_id = get(_A_OFFSET_MSG_ID)
        _SET_OFFSET_MSG_ID(result, str(offset_msg_id) if offset_msg_id else msg_id)
        deliver_at = get(_A_DELIVER_AT)
        _SET_DELIVER_AT(result, None if deliver_at is None else _int_or_none(deliver_at))
        return result


_new_result = object.__new__
_new_message = object.__new__
(_M_MSG_ID, _M_TOPIC, _M_BODY, _M_QUEUE_ID, _M_QUEUE_OFFSET, _M_COMMITLOG_OFFSET, _M_TAGS, _M_KEYS,
 _M_FLAG, _M_PROPERTIES, _M_STORE_TIMESTAMP, _M_BORN_TIMESTAMP, _M_BORN_HOST, _M_STORE_HOST,
 _M_RECONSUME_TIMES, _M_SYS_FLAG, _M_STORE_TOPIC, _M_OFFSET_MSG_ID) = (
    vars(Message)[f.name].__set__ for f in dataclass_fields(Message))
"""Each of :class:`Message`'s slots' setters, in the order of its fields (the unpacking fails
at import if a field is added without its setter here)."""
_SET_MSG_ID, _SET_TOPIC, _SET_QUEUE_ID, _SET_QUEUE_OFFSET, _SET_COMMITLOG_OFFSET, \
    _SET_STORE_TIMESTAMP, _SET_UNIQ_KEY, _SET_OFFSET_MSG_ID, _SET_DELIVER_AT = (
        vars(SendResult)[f.name].__set__ for f in dataclass_fields(SendResult))
"""Each of :class:`SendResult`'s slots' setters, in the order of its fields (the unpacking
fails at import if a field is added without its setter here)."""
_ANSWER = ProduceAnswer.json_name_of()
_A_MSG_ID, _A_TOPIC, _A_QUEUE_ID, _A_QUEUE_OFFSET = (
    _ANSWER["msg_id"], _ANSWER["topic"], _ANSWER["queue_id"], _ANSWER["queue_offset"])
_A_COMMITLOG_OFFSET, _A_STORE_TIMESTAMP = _ANSWER["commitlog_offset"], _ANSWER["store_timestamp"]
_A_OFFSET_MSG_ID, _A_DELIVER_AT = _ANSWER["offset_msg_id"], _ANSWER["deliver_at"]
"""The produce answer's JSON names :meth:`SendResult.from_json` reads, one constant each."""
_CHANGE = timers.KeyCancelled.json_name_of()
"""The names a cancel's or a reschedule's answer is told apart by (by key: ``msgIds``)."""
_VIEW = StoredMessage.json_name_of()
_V_BODY = _VIEW["body"]
_V_BODY_BASE64 = _VIEW["body_base64"]
_V_BORN_HOST = _VIEW["born_host"]
_V_BORN_TIMESTAMP = _VIEW["born_timestamp"]
_V_COMMITLOG_OFFSET = _VIEW["commitlog_offset"]
_V_FLAG = _VIEW["flag"]
_V_KEYS = _VIEW["keys"]
_V_MSG_ID = _VIEW["msg_id"]
_V_OFFSET_MSG_ID = _VIEW["offset_msg_id"]
_V_PROPERTIES = _VIEW["properties"]
_V_QUEUE_ID = _VIEW["queue_id"]
_V_QUEUE_OFFSET = _VIEW["queue_offset"]
_V_RECONSUME_TIMES = _VIEW["reconsume_times"]
_V_STORE_HOST = _VIEW["store_host"]
_V_STORE_TIMESTAMP = _VIEW["store_timestamp"]
_V_SYS_FLAG = _VIEW["sys_flag"]
_V_TAGS = _VIEW["tags"]
_V_TOPIC = _VIEW["topic"]
"""The store's message view's JSON names, one constant each (``Message.from_json`` reads every
pulled message: a global is quicker than a dict look-up)."""
PAGE = PullAnswer.json_name_of()
"""The JSON names of a pull page (:class:`PullAnswer`), for the consumers' pull loops."""


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """What a cancel or a reschedule did (SPEC T1): ``status`` ``"cancelled"`` or
    ``"rescheduled"``, the msgIds it acted on (one, or every pending message of the key) and,
    for a reschedule, the new delivery time in epoch ms. Read from the store's answer with
    its wire types (``clepsydra_core.wire.timers``)."""

    status: str
    msg_ids: tuple[str, ...]
    deliver_at: int | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ScheduleChange:
        rescheduled = raw.get(_CHANGE["status"]) == timers.RESCHEDULED
        if _CHANGE["msg_ids"] in raw:
            by_key = (timers.KeyRescheduled if rescheduled else timers.KeyCancelled).from_json(raw)
            return cls(by_key.status, tuple(by_key.msg_ids), getattr(by_key, "deliver_at", None))
        one = (timers.MessageRescheduled if rescheduled else timers.MessageCancelled).from_json(
            raw)
        return cls(one.status, (one.msg_id,), getattr(one, "deliver_at", None))

    @property
    def msg_id(self) -> str:
        """The first (for a msgId: the only) message acted on."""
        return self.msg_ids[0] if self.msg_ids else ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "msgIds": list(self.msg_ids)}
        if self.deliver_at is not None:
            out["deliverAt"] = self.deliver_at
        return out


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

