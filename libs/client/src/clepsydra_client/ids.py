"""Client-made identifiers: the message uniqKey (``UNIQ_KEY``) and consumer client ids."""

from __future__ import annotations

import itertools
import os
import socket

from clepsydra_core.msgid import UniqIds, uniq_prefix

_client_seq = itertools.count(1)


def local_ip() -> str:
    """This host's IPv4 address as others would see it (no packet is sent), else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


_IDS = UniqIds(uniq_prefix(local_ip()))


def new_uniq_key() -> str:
    """A message's unique id, its msgId (``clepsydra_core.msgid``): 32 hex digits - IPv4,
    pid, milliseconds, counter - unique per process and sortable by time within one process
    (like RocketMQ's MessageClientIDSetter)."""
    return _IDS.new()


def new_client_id(instance_name: str | None = None) -> str:
    """``ip@instance``; the instance defaults to ``<pid>-<n>`` so that several consumers in
    one process stay distinct."""
    instance = instance_name or f"{os.getpid()}-{next(_client_seq)}"
    return f"{local_ip()}@{instance}"
