"""The store's read routes (SPEC C3; DESIGN "HTTP contract"): a stored message's JSON view
(:func:`clepsydra_core.records.message_to_json` writes it, and ``decode_view`` for a pull's
page straight from the record's bytes, DEC-pull-json-view) and the answers that carry it:

- ``GET /v1/topics/{topic}/queues/{queueId}/messages?offset=&max=&tags=&body=&waitMs=`` ->
  :class:`PullAnswer`
- ``GET /v1/messages/{msgId}`` and ``GET /v1/messages?topic=&key=`` -> :class:`MessageList`
- ``GET /v1/commitlog/{offset}`` -> :class:`StoredMessage`
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import WireValue, wire_meta

DEFAULT_PULL = 32
MAX_PULL = 1000
"""Most messages one pull, or one look-up by key, answers."""
MAX_PULL_WAIT_MS = 30_000
"""The longest a pull may ask the store to hold it (``waitMs``): with nothing at its
offset, the store answers when a message is appended to the queue or when the wait ends."""


@dataclass(frozen=True, slots=True)
class StoredMessage(WireValue):
    """A stored message: the body as ``body`` when it is UTF-8 text, else as ``bodyBase64``;
    neither with ``body=false``."""

    msg_id: str = field(metadata=wire_meta(doc="the message's unique id, the same in every "
                                               "copy"))
    offset_msg_id: str = field(metadata=wire_meta(doc="this copy's place: store host + "
                                                      "CommitLog offset"))
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int = field(metadata=wire_meta(json="commitLogOffset"))
    tags: str | None
    keys: str
    flag: int
    properties: dict[str, str]
    store_timestamp: int
    born_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    sys_flag: int
    body_size: int = field(metadata=wire_meta(doc="the body's length in bytes (given even "
                                                  "with body=false)"))
    body: str | None = None
    body_base64: str | None = None
    shard: int | None = field(default=None, metadata=wire_meta(
        doc="the store shard that holds this copy (look-ups with more than one shard)"))


@dataclass(frozen=True, slots=True)
class MessageList(WireValue):
    """Every stored message that matches, as a list even for a look-up by msgId
    (DEC-message-history): one message has several stored copies - the copy parked in the
    schedule topic (S1) and the one delivered from it (D4), each retry of a send-back (R3), its
    dead letter (R6), its resends - which keep the message's msgId (its ``UNIQ_KEY``), so a
    look-up by msgId answers every copy, oldest first; each copy's own place is its
    ``offsetMsgId``."""

    messages: list[StoredMessage]
    unreachable: list[int] | None = field(default=None, metadata=wire_meta(
        doc="store shards that did not answer the look-up (it may hold more copies there)"))


@dataclass(frozen=True, slots=True)
class PullAnswer(WireValue):
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
