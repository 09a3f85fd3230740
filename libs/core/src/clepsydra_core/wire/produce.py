"""The store's produce routes (SPEC P1, L2, S3; DESIGN "HTTP contract"), spoken by the store
and the client SDK:

- ``POST /v1/topics/{topic}/messages`` :class:`ProduceMessage` -> 201 :class:`ProduceAnswer`
- ``POST /v1/topics/{topic}/messages/batch`` :class:`ProduceBatch` -> 201
  :class:`ProduceResults`, one result per message, in order

The store's hot path reads the common shape of a message with a parser of its own
(``clepsydra_store.api.produce.parse_plain``) that takes exactly what :class:`ProduceMessage`
takes; any other message is read with :meth:`ProduceMessage.from_json`, whose error names the
field. A test holds the two together.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import INT32_MAX, INT32_MIN, INT64_MAX, WireValue, wire_meta
from clepsydra_core.wire.timers import delay_ms_meta, deliver_at_meta

MAX_BATCH = 1000
"""Most messages one batch takes."""
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""Standard base64 with its padding (what ``base64.b64decode(validate=True)`` reads)."""
PRODUCER_RESERVED = tuple(sorted(P.RESERVED - P.CLIENT_SETTABLE))
"""Property names the system sets and a producer may not (P1)."""
DELAY_FIELDS = ("delayLevel", "deliverAt", "delayMs")
"""A message's ways of being delayed; at most one is given (SPEC T1)."""

_ONE_BODY = {"type": "string"}
_INT = {"type": "integer"}


@dataclass(frozen=True, slots=True)
class ProduceMessage(WireValue):
    """One message: exactly one of ``body`` (UTF-8 text) and ``bodyBase64`` (bytes); at most
    one of ``delayLevel``, ``deliverAt`` and ``delayMs`` (SPEC L2, T1)."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {
        "anyOf": [{"required": ["body"], "properties": {"body": _ONE_BODY}},
                  {"required": ["bodyBase64"], "properties": {"bodyBase64": _ONE_BODY}}],
        "not": {"anyOf": [
            {"required": ["body", "bodyBase64"],
             "properties": {"body": _ONE_BODY, "bodyBase64": _ONE_BODY}},
            *({"required": list(pair), "properties": {name: _INT for name in pair}}
              for pair in itertools.combinations(DELAY_FIELDS, 2)),
        ]},
    }

    body: str | None = field(default=None, metadata=wire_meta(doc="UTF-8 text"))
    body_base64: str | None = field(default=None, metadata=wire_meta(
        pattern=BASE64_PATTERN, code="INVALID_BASE64", doc="the body's bytes, base64",
        schema={"contentEncoding": "base64"}))
    tags: str | None = None
    keys: str | list[str] | None = field(default=None, metadata=wire_meta(
        doc="space-separated text, or a list of keys without spaces",
        schema={"anyOf": [{"type": "string"},
                          {"type": "array", "items": {"type": "string", "pattern": "^[^ ]+$"}},
                          {"type": "null"}]}))
    properties: dict[str, str] | None = field(default=None, metadata=wire_meta(
        type_code="INVALID_PROPERTIES", rule="P1",
        doc="names and values; reserved names are set by the system (P1)",
        schema={"propertyNames": {"minLength": 1, "not": {"enum": list(PRODUCER_RESERVED)}}}))
    queue_id: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=INT32_MAX, doc="the queue; default: round robin"))
    delay_level: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=INT32_MAX, code="INVALID_DELAY_LEVEL", rule="L2",
        doc="0: not delayed; above the highest level: the highest (L2)"))
    deliver_at: int | None = field(default=None, metadata=deliver_at_meta())
    delay_ms: int | None = field(default=None, metadata=delay_ms_meta())
    flag: int | None = field(default=None, metadata=wire_meta(minimum=INT32_MIN,
                                                               maximum=INT32_MAX))
    born_timestamp: int | None = field(default=None, metadata=wire_meta(
        minimum=0, maximum=INT64_MAX, doc="epoch ms; default: now"))

    def wire_check(self, name: str) -> None:
        if self.body is not None and self.body_base64 is not None:
            raise ValidationError("give body or bodyBase64, not both", code="BODY_AND_BASE64")
        if self.body is None and self.body_base64 is None:
            raise ValidationError("a message needs body or bodyBase64", code="MISSING_BODY")
        for prop in self.properties or ():
            if not prop or prop in PRODUCER_RESERVED:
                raise ValidationError(f"{name}.properties: {prop!r} is empty or reserved (set by "
                                      "the system)", rule="P1", code="INVALID_PROPERTIES")
        given = [name for name, value in zip(DELAY_FIELDS, (self.delay_level, self.deliver_at,
                                                              self.delay_ms), strict=True)
                 if value is not None]
        if len(given) > 1:
            raise ValidationError(f"{name}: give at most one of delayLevel, deliverAt and "
                                  f"delayMs, got {' and '.join(given)}", rule="T1",
                                  code="INVALID_REQUEST")
        if isinstance(self.keys, list) and not all(k and " " not in k for k in self.keys):
            raise ValidationError(f"{name}.keys must be a string or a list of non-empty strings "
                                  "without spaces", code="INVALID_REQUEST")


@dataclass(frozen=True, slots=True)
class ProduceBatch(WireValue):
    """Messages stored together, or none of them: one bad message refuses the batch."""

    messages: list[ProduceMessage] = field(metadata=wire_meta(min_items=1,
                                                              max_items=MAX_BATCH))

    @classmethod
    def of_json(cls, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The batch's JSON of messages already encoded (``ProduceMessage.json_of``)."""
        return {cls.json_names()[0]: messages}

    @classmethod
    def of_encoded(cls, parts: list[bytes]) -> dict[str, Any]:
        """The batch's JSON from its messages already encoded by ``orjson.dumps`` as JSON
        arrays (each part one or more messages): the parts are joined, not parsed again
        (``orjson.dumps`` writes a fragment as it is)."""
        pieces: list[bytes | memoryview] = [b"["]
        for part in parts:
            if len(part) > 2:
                if len(pieces) > 1:
                    pieces.append(b",")
                pieces.append(memoryview(part)[1:-1])  # no copy until the one join
        pieces.append(b"]")
        return {cls.json_names()[0]: orjson.Fragment(b"".join(pieces))}


@dataclass(frozen=True, slots=True)
class ProduceAnswer(WireValue):
    """Where a message was stored: its placement (the schedule topic for a delayed one, S1)."""

    msg_id: str = field(metadata=wire_meta(doc=(
        "the message's unique id (its UNIQ_KEY, made by the client, or by the store when the "
        "producer gave none): the id its consumers see, kept by every copy (parked, delivered, "
        "retried, dead-lettered, resent), and the id GET /v1/messages/{msgId} finds them all "
        "by")))
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int = field(metadata=wire_meta(json="commitLogOffset"))
    store_timestamp: int
    offset_msg_id: str = field(metadata=wire_meta(doc=(
        "this copy's place: store host + CommitLog offset (RocketMQ's offsetMsgId)")))
    deliver_at: int | None = field(default=None, metadata=wire_meta(doc=(
        "a timer message's effective delivery time, epoch ms (SPEC T1); absent otherwise")))


@dataclass(frozen=True, slots=True)
class ProduceResults(WireValue):
    results: list[ProduceAnswer]
