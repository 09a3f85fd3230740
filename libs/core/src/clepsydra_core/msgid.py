"""The two ids of a message (as RocketMQ's msgId and offsetMsgId).

- The **msgId** is the message's unique id, its ``UNIQ_KEY`` property: made by the client when
  it sends (or by the store when a producer gives none), 32 hex digits - IPv4, pid,
  milliseconds, counter, like RocketMQ's ``MessageClientIDSetter`` - and kept by every copy the
  message gets: parked, delivered, retried, dead-lettered, resent. The id a producer is given
  is the id its consumers see and the id every tool finds all the copies by.
- The **offsetMsgId** locates one stored record: store host (IPv4 + port) and CommitLog offset,
  also 32 hex digits (``encode_msg_id(b"\x7f\0\0\1" + port, 4096)``). A record written before
  unique ids has no ``UNIQ_KEY``: its msgId is its offsetMsgId.

The store host's port field is 4 bytes and a port needs 2: the upper two carry the store's
shard id (DEC-shard-in-msgid), so an offsetMsgId alone names the shard that holds the record
and a look-up from any shard goes straight to it. Shard 0 writes zeros there: every id written
before shards, and every id of a one-store cluster, is unchanged and reads as shard 0.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import socket
import struct
import time
from dataclasses import dataclass

from clepsydra_core.errors import ValidationError

_LAYOUT = struct.Struct(">4sIq")
MSG_ID_PATTERN = "^[0-9A-Fa-f]{16}[0-7][0-9A-Fa-f]{15}$"
"""An offsetMsgId (the store's physical id): 32 hex digits, the last 16 a CommitLog offset
(never negative: its first digit is 0-7). :func:`decode_msg_id` refuses what it does not
match."""
_HEX32 = re.compile(MSG_ID_PATTERN[1:-1])
MAX_ID_CHARS = 255
"""A msgId is 32 hex digits when Clepsydra made it; a producer may set its own ``UNIQ_KEY``,
up to this long."""
ID_PATTERN = "^[!-~]{1,255}$"
"""What a look-up takes as a msgId or offsetMsgId: printable ASCII without spaces, at most
MAX_ID_CHARS (the OpenAPI documents carry it; :func:`check_id` refuses what it does not
match)."""
_ID = re.compile(ID_PATTERN[1:-1])


MAX_SHARD = 0xFFFF
"""The highest shard id an offsetMsgId can carry (the upper half of its port field)."""


@dataclass(frozen=True, slots=True)
class MsgId:
    host: str
    port: int
    commitlog_offset: int
    shard: int = 0
    """The shard that holds the record (DEC-shard-in-msgid; 0 for every id before shards)."""


def pack_host(host_port: str, shard: int = 0) -> bytes:
    """``"10.0.0.5:8081"`` -> 8 bytes (IPv4, then a 4-byte field: ``shard`` in its upper half,
    the port in its lower half). Unparseable input packs as 0.0.0.0:0 (still with the shard)."""
    if not 0 <= shard <= MAX_SHARD:
        raise ValueError(f"a shard id is 0..{MAX_SHARD}, got {shard}")
    host, _, port = host_port.rpartition(":")
    try:
        number = int(port)
        if not 0 <= number <= 0xFFFF:
            raise ValueError(port)
        return socket.inet_aton(host) + struct.pack(">I", shard << 16 | number)
    except (OSError, ValueError, struct.error):
        return b"\0" * 4 + struct.pack(">I", shard << 16)


@functools.lru_cache(maxsize=1024)
def unpack_host(raw: bytes) -> str:
    """8 bytes -> ``"ip:port"`` (the shard bits left out: the host's own address). Kept for
    the last 1,024 hosts: a pull's view of every message unpacks its two, of which a store
    sees few (DEC-pull-page-spans)."""
    (field,) = struct.unpack_from(">I", raw, 4)
    return f"{socket.inet_ntoa(raw[:4])}:{field & 0xFFFF}"


def shard_of_host(raw: bytes) -> int:
    """The shard id packed into 8 bytes of store host (:func:`pack_host`)."""
    (field,) = struct.unpack_from(">I", raw, 4)
    return int(field >> 16)


def encode_msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """store_host is the 8-byte packed host of the store that holds the message."""
    return (store_host + struct.pack(">q", commitlog_offset)).hex().upper()


def decode_msg_id(msg_id: str) -> MsgId:
    """ValidationError if the text is not a msgId."""
    if not isinstance(msg_id, str) or not _HEX32.fullmatch(msg_id):
        raise ValidationError(f"not a msgId (32 hex digits, the last 16 an offset >= 0): "
                              f"{msg_id!r}", code="INVALID_MSG_ID")
    ip, port, offset = _LAYOUT.unpack(bytes.fromhex(msg_id))
    return MsgId(socket.inet_ntoa(ip), port & 0xFFFF, offset, port >> 16)


def offset_msg_id(text: str) -> MsgId | None:
    """The decoded offsetMsgId, None when the text does not have its shape."""
    if not isinstance(text, str) or not _HEX32.fullmatch(text):
        return None
    ip, port, offset = _LAYOUT.unpack(bytes.fromhex(text))
    return MsgId(socket.inet_ntoa(ip), port & 0xFFFF, offset, port >> 16)


def shard_of_offset_msg_id(text: str) -> int | None:
    """The shard an offsetMsgId names (DEC-shard-in-msgid), None when the text is not one (a
    msgId: a message's unique id names no shard)."""
    if not isinstance(text, str) or len(text) != 32 or not _HEX32.fullmatch(text):
        return None
    return int(text[8:12], 16)


def check_id(text: object) -> str:
    """A msgId or offsetMsgId as a look-up takes it (:data:`ID_PATTERN`); ValidationError
    (INVALID_MSG_ID) for anything else."""
    if not isinstance(text, str) or not _ID.fullmatch(text):
        raise ValidationError(f"not a msgId (the unique id of a message, or an offsetMsgId: "
                              f"32 hex digits; printable ASCII without spaces, at most "
                              f"{MAX_ID_CHARS}): {text!r}", code="INVALID_MSG_ID")
    return text


class UniqIds:
    """Maker of unique ids for one process: ``prefix`` (IPv4 and pid, 6 bytes), then the time
    in milliseconds (6 bytes) and a counter (4 bytes), as 32 upper-case hex digits; unique per
    process and sortable by time within it. Thread-safe: ``next`` of an ``itertools.count``
    is one step under the interpreter's lock, and the id's first 24 digits (prefix and time)
    are made once per millisecond, kept as one (time, text) pair (the SDK makes one id per
    message sent: a lock and three formats were 0.66 µs of it)."""

    def __init__(self, prefix: bytes) -> None:
        if len(prefix) != 6:
            raise ValueError(f"a unique id prefix is 6 bytes (IPv4, pid), got {len(prefix)}")
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._head: tuple[int, str] = (-1, "")

    def new(self) -> str:
        seq = next(self._counter) & 0xFFFFFFFF
        now_ms = time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF
        head = self._head
        if head[0] != now_ms:
            head = self._head = (now_ms, f"{self._prefix}{now_ms:012X}")
        return f"{head[1]}{seq:08X}"


def uniq_prefix(ip: str) -> bytes:
    """The 6-byte prefix of this process's unique ids: its IPv4 address (0.0.0.0 when it does
    not parse) and its pid."""
    try:
        raw = socket.inet_aton(ip)
    except OSError:
        raw = b"\0" * 4
    return raw + struct.pack(">H", os.getpid() & 0xFFFF)
