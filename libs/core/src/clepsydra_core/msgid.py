"""msgId: store host (IPv4 + port) and CommitLog offset, 32 hex digits, so a msgId locates
its message. ``encode_msg_id(b"\x7f\0\0\1", 8081, 4096)``.
"""

from __future__ import annotations

import re
import socket
import struct
from dataclasses import dataclass

from clepsydra_core.errors import ValidationError

_LAYOUT = struct.Struct(">4sIq")
MSG_ID_PATTERN = "^[0-9A-Fa-f]{16}[0-7][0-9A-Fa-f]{15}$"
"""A msgId: 32 hex digits, the last 16 a CommitLog offset (never negative: its first digit is
0-7). The OpenAPI documents carry it; :func:`decode_msg_id` refuses what it does not match."""
_HEX32 = re.compile(MSG_ID_PATTERN[1:-1])


@dataclass(frozen=True, slots=True)
class MsgId:
    host: str
    port: int
    commitlog_offset: int


def pack_host(host_port: str) -> bytes:
    """``"10.0.0.5:8081"`` -> 8 bytes (IPv4, port). Unparseable input packs as 0.0.0.0:0."""
    host, _, port = host_port.rpartition(":")
    try:
        return socket.inet_aton(host) + struct.pack(">I", int(port))
    except (OSError, ValueError, struct.error):
        return b"\0" * 8


def unpack_host(raw: bytes) -> str:
    """8 bytes -> ``"ip:port"``."""
    (port,) = struct.unpack_from(">I", raw, 4)
    return f"{socket.inet_ntoa(raw[:4])}:{port}"


def encode_msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """store_host is the 8-byte packed host of the store that holds the message."""
    return (store_host + struct.pack(">q", commitlog_offset)).hex().upper()


def decode_msg_id(msg_id: str) -> MsgId:
    """ValidationError if the text is not a msgId."""
    if not isinstance(msg_id, str) or not _HEX32.fullmatch(msg_id):
        raise ValidationError(f"not a msgId (32 hex digits, the last 16 an offset >= 0): "
                              f"{msg_id!r}", code="INVALID_MSG_ID")
    ip, port, offset = _LAYOUT.unpack(bytes.fromhex(msg_id))
    return MsgId(socket.inet_ntoa(ip), port, offset)
