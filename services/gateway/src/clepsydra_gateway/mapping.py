"""How RocketMQ 5's protocol maps onto Clepsydra's, decided once and pure: no gRPC, no Redis,
no HTTP (the protobuf types are filled by ``service.py``).

- receipt and recall handles (opaque to the client, versioned, checked on the way back; they
  name the store shard of the message, DEC-gateway-shard-handles);
- the queue a message goes to (round robin by the store; a FIFO ``message_group`` by the same
  consistent hash the official client uses: SHA-256 of the group, modulo the queues - with
  store shards, an index into the topic's queues of every shard, shard by shard);
- a stored message's wire view: its topic (a ``%RETRY%`` copy shows its origin topic), user
  properties, the delivery attempt (``reconsumeTimes`` + 1), the body's CRC32;
- the consumer's back-off and max attempts, built from the group's retry settings and the
  delay-level table (SPEC R5, R7);
- Clepsydra's errors as the protocol's status codes;
- the credentials of the ``authorization`` metadata (DEC-gateway-credentials).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import orjson

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    AlreadyDelivered,
    BodyTooLarge,
    ClepsydraError,
    DiskFull,
    Forbidden,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    NotFound,
    RateLimited,
    TopicNotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import MAX_SHARD
from clepsydra_core.retry_rules import retry_level_for


class Status(IntEnum):
    """The protocol's status codes the gateway answers (``apache.rocketmq.v2.Code``; a test
    holds them equal to the generated enum)."""

    OK = 20000
    BAD_REQUEST = 40000
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    TOO_MANY_REQUESTS = 42900
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    UNSUPPORTED = 50500


class GatewayError(Exception):
    """A request the gateway answers with a protocol status other than OK (nothing written)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---- handles ----------------------------------------------------------------------------------

RECEIPT_PREFIX = "cg1."
"""Version 1 of the gateway's receipt handle: a message of store shard 0 (the only shard of a
one-store stack). An old handle must still read: versioned (DEC-gateway-shard-handles)."""
RECEIPT_PREFIX_SHARDED = "cg2."
"""Version 2: version 1's fields and the store shard (above 0) that holds the message."""
RECALL_PREFIX = "cr1."
RECALL_PREFIX_SHARDED = "cr2."
MAX_HANDLE_LEN = 2048


def _b64(doc: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")


def _unb64(text: str) -> object:
    padded = text + "=" * (-len(text) % 4)
    return orjson.loads(base64.urlsafe_b64decode(padded.encode("ascii")))


def _fields(text: str, versions: dict[str, int], bad: GatewayError) -> tuple[str, list[Any]]:
    """(the prefix, the fields) of a handle written by ``prefix + _b64([...])`` with as many
    fields as ``versions`` gives its prefix; ``bad`` when it is not one."""
    prefix = text[:4]
    count = versions.get(prefix)
    if count is None or len(text) > MAX_HANDLE_LEN:
        raise bad
    try:
        doc = _unb64(text[len(prefix):])
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise bad from None
    if not isinstance(doc, list) or len(doc) != count:
        raise bad
    return prefix, doc


def _count(value: object) -> bool:
    """A queue id, offset or shard as a handle holds it: an int, not a bool, not negative."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shard_field(prefix: str, doc: list[Any], sharded: str, bad: GatewayError) -> int:
    """The shard of a decoded handle: 0 for a version-1 handle; a version-2 handle's last
    field, which is above 0 (shard 0's handles are always version 1) and at most MAX_SHARD."""
    if prefix != sharded:
        return 0
    shard = doc[-1]
    if not _count(shard) or not 0 < shard <= MAX_SHARD:
        raise bad
    return int(shard)


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """Which delivery of which stored message: the group, where the copy is stored (a user
    topic or ``%RETRY%<group>``), its queue and queue offset, the delivery's nonce (a change of
    invisible time makes a new one; the old handle then no longer acks), and the store shard
    that holds it (DEC-store-shards).

    A handle of shard 0 is written as version 1, byte for byte the handle of a gateway from
    before shards (so a one-store stack's handles are unchanged, and such a gateway reads
    them); one of another shard as version 2, which adds the shard (DEC-gateway-shard-handles).
    """

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    nonce: str
    shard: int = 0

    def encode(self) -> str:
        fields: list[Any] = [self.group, self.topic, self.queue_id, self.queue_offset,
                             self.nonce]
        if self.shard == 0:
            return RECEIPT_PREFIX + _b64(fields)
        return RECEIPT_PREFIX_SHARDED + _b64([*fields, self.shard])

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """The handle; GatewayError INVALID_RECEIPT_HANDLE when it is not one of ours."""
        bad = GatewayError(Status.INVALID_RECEIPT_HANDLE,
                           "invalid receipt handle: not one this gateway gave out")
        prefix, doc = _fields(text, {RECEIPT_PREFIX: 5, RECEIPT_PREFIX_SHARDED: 6}, bad)
        if (not all(isinstance(v, str) and v for v in (doc[0], doc[1], doc[4]))
                or not all(_count(v) for v in (doc[2], doc[3]))):
            raise bad
        shard = _shard_field(prefix, doc, RECEIPT_PREFIX_SHARDED, bad)
        return cls(doc[0], doc[1], doc[2], doc[3], doc[4], shard)

    @property
    def member(self) -> str:
        """Its name in the deadlines set (group/topic/queue/offset[/shard])."""
        return delivery_member(self.group, self.topic, self.queue_id, self.queue_offset,
                               self.shard)


def delivery_member(group: str, topic: str, queue_id: int, queue_offset: int,
                    shard: int = 0) -> str:
    """A delivery's name in the deadlines set: ``group/topic/queue/offset``, and ``/shard``
    for a store shard other than 0 (shard 0's names are those of a one-store stack,
    DEC-shard-keys)."""
    name = f"{group}/{topic}/{queue_id}/{queue_offset}"
    return name if shard == 0 else f"{name}/{shard}"


def parse_member(member: str) -> tuple[str, str, int, int, int]:
    """(group, topic, queue id, offset, shard) of a deadlines set member."""
    group, topic, queue_id, offset, *rest = member.split("/")
    return group, topic, int(queue_id), int(offset), int(rest[0]) if rest else 0


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """A scheduled message to recall: its topic and msgId (the store's cancel, SPEC T1), and
    the store shard that holds it (versioned as the receipt handle: shard 0's are version 1,
    DEC-gateway-shard-handles)."""

    topic: str
    msg_id: str
    shard: int = 0

    def encode(self) -> str:
        if self.shard == 0:
            return RECALL_PREFIX + _b64([self.topic, self.msg_id])
        return RECALL_PREFIX_SHARDED + _b64([self.topic, self.msg_id, self.shard])

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        bad = GatewayError(Status.BAD_REQUEST, "invalid recall handle: not one this gateway "
                                               "gave out")
        prefix, doc = _fields(text, {RECALL_PREFIX: 2, RECALL_PREFIX_SHARDED: 3}, bad)
        if not all(isinstance(v, str) and v for v in doc[:2]):
            raise bad
        return cls(doc[0], doc[1], _shard_field(prefix, doc, RECALL_PREFIX_SHARDED, bad))


# ---- placement and messages -------------------------------------------------------------------


def queue_of_group(message_group: str, queue_count: int) -> int:
    """The queue of a FIFO message group: the official client's own consistent hash (SHA-256,
    big-endian, modulo the queues), so every message of a group lands in one queue."""
    digest = hashlib.sha256(message_group.encode("utf-8")).digest()
    return int.from_bytes(digest, "big") % max(queue_count, 1)


def crc32_hex(body: bytes) -> str:
    """The body digest a consumer checks: CRC32, 8 upper-case hex digits."""
    return format(zlib.crc32(body) & 0xFFFFFFFF, "08X")


DIGESTS = {1: lambda b: crc32_hex(b),
           2: lambda b: hashlib.md5(b, usedforsecurity=False).hexdigest().upper(),
           3: lambda b: hashlib.sha1(b, usedforsecurity=False).hexdigest().upper()}
"""``DigestType`` (CRC32, MD5, SHA1) -> how the protocol writes it."""


def check_digest(digest_type: int, checksum: str, body: bytes) -> None:
    """A sent body against the digest its producer gave (none given: nothing to check)."""
    if digest_type == 0 and not checksum:
        return
    compute = DIGESTS.get(digest_type)
    if compute is None:
        raise GatewayError(Status.BAD_REQUEST, f"unknown body digest type {digest_type}")
    if compute(body) != checksum.upper():
        raise GatewayError(Status.MESSAGE_CORRUPTED,
                           "the body does not match its digest: nothing was stored")


def wire_topic(stored_topic: str, props: dict[str, str]) -> str:
    """The topic a consumer sees: a ``%RETRY%`` copy shows the topic it was first sent to
    (SPEC R4, R15)."""
    if naming.is_retry_topic(stored_topic):
        return props.get(P.RETRY_TOPIC) or stored_topic
    return stored_topic


HIDDEN = P.RESERVED | {P.SHARDING_KEY}
"""Properties the protocol carries in its own fields, or that are Clepsydra's bookkeeping."""


def user_properties(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k not in HIDDEN}


def delivery_attempt(reconsume_times: int) -> int:
    """The protocol's 1-based attempt: the first delivery is 1, each retry adds one (R8)."""
    return reconsume_times + 1


def max_attempts(retry_max_times: int) -> int:
    """A first attempt and the group's retries (R5), within int32."""
    return min(retry_max_times + 1, 2**31 - 1)


def backoff_s(levels: DelayLevels, retry_max_times: int, *, limit: int = 64) -> list[int]:
    """The waits between attempts a consumer is told (whole seconds, at least 1): the retry
    ladder, level 3 + reconsumeTimes clamped to the table (R7). At most ``limit`` steps (the
    client reuses the last one past them)."""
    steps = max(1, min(retry_max_times, limit))
    return [max(1, math.ceil(levels.delay_ms(levels.clamp(retry_level_for(i))) / 1000))
            for i in range(steps)]


def ms_of(seconds: int, nanos: int) -> int:
    return seconds * 1000 + nanos // 1_000_000


# ---- errors -----------------------------------------------------------------------------------


def status_of(error: ClepsydraError) -> Status:
    """The protocol status of an error a store or retry call answered."""
    code = getattr(error, "code", "")
    if isinstance(error, TopicNotFound):
        return Status.TOPIC_NOT_FOUND
    if isinstance(error, GroupNotFound):
        return Status.CONSUMER_GROUP_NOT_FOUND
    if isinstance(error, MessageNotFound | AlreadyDelivered):
        return Status.NOT_FOUND
    if isinstance(error, NotFound):
        return Status.NOT_FOUND
    if isinstance(error, Unauthorized):
        return Status.UNAUTHORIZED
    if isinstance(error, Forbidden | NoPermission):
        return Status.FORBIDDEN
    if isinstance(error, RateLimited):
        return Status.TOO_MANY_REQUESTS
    if isinstance(error, ValidationError) or 400 <= getattr(error, "http_status", 500) < 500:
        if code == BodyTooLarge.code:
            return Status.MESSAGE_BODY_TOO_LARGE
        if error.rule == "T1" or "deliverAt" in error.message:
            return Status.ILLEGAL_DELIVERY_TIME
        if code == "INVALID_PROPERTIES":
            return Status.ILLEGAL_MESSAGE_PROPERTY_KEY
        if code == "INVALID_TOPIC":
            return Status.ILLEGAL_TOPIC
        if code == "INVALID_GROUP":
            return Status.ILLEGAL_CONSUMER_GROUP
        return Status.BAD_REQUEST
    if isinstance(error, Unavailable | DiskFull):
        return Status.INTERNAL_SERVER_ERROR
    return Status.INTERNAL_ERROR


# ---- credentials ------------------------------------------------------------------------------

AUTH_SCHEME = "MQv2-HMAC-SHA1"


def access_key(authorization: str | None) -> str | None:
    """The ``Credential=`` of an ``authorization`` metadata value (``MQv2-HMAC-SHA1
    Credential=<ak>, SignedHeaders=..., Signature=...``), None when absent or malformed. The
    access key is the token itself (DEC-gateway-credentials)."""
    if not authorization or not authorization.startswith(AUTH_SCHEME + " "):
        return None
    for part in authorization[len(AUTH_SCHEME) + 1:].split(","):
        name, _, value = part.strip().partition("=")
        if name == "Credential":
            return value.strip() or None
    return None
