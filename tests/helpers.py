"""Small plain functions every suite may use (fixtures live in tests/conftest.py). Waiting for a
condition is ``tools.processes.wait_until``, the one the local stack and the benches use too."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.parts import Stack

_serial = itertools.count()

STORE_DISK_QUOTA_BYTES = 32 << 30


def store_disk_quota() -> dict[str, str]:
    """What every store a test starts is given (the suites' conftest puts it in the
    environment; the in-process apps, ``tools.stack`` and the containers take it explicitly):
    its disk guard weighs the store's own files against 32 GiB, not the fill of the host's
    volume, so a shared machine whose disk is 90 % full elsewhere does not make the tests'
    writes ``507 DISK_FULL`` (``CLEPSYDRA_STORE_DISK_MAX_RATIO``; DiskGuard's quota probe). The
    guard's own tests set a small quota of their own. ModuleNotFoundError in an env without
    the store (k8s), which starts none."""
    from clepsydra_store.engine.log.disk_usage import DISK_CAPACITY_VAR

    return {DISK_CAPACITY_VAR: str(STORE_DISK_QUOTA_BYTES)}


def now_ms() -> int:
    """Wall-clock milliseconds, the clock of the store's born and deliver times."""
    return time.time_ns() // 1_000_000


def unique_name(*parts: str) -> str:
    """``part-part-<serial>``: a topic or group name no other call in this process makes
    (letters, digits, ``_`` and ``-``: a dot becomes ``_``)."""
    return "-".join([*parts, str(next(_serial))]).replace(".", "_")


def grow(stack: Stack, shards: int) -> list[str]:
    """Add store shards to a running cluster the way docs/shards.md says ("Growing and
    shrinking"): each new shard started with the larger ``CLEPSYDRA_STORE_SHARDS`` and the
    longer peer list (it takes the topics from its peers), then each old shard restarted
    (SIGTERM, same port and data) with them, the highest first, shard 0 - the address every
    client is given - last. Returns the shards' URLs."""
    from clepsydra_core import shards as shard_rules
    from tools.parts import STORE, shard_name
    from tools.processes import free_port

    old = len(stack.shard_urls)
    ports = [free_port() for _ in range(old, shards)]
    urls = stack.shard_urls + [f"http://127.0.0.1:{p}" for p in ports]
    shape = {shard_rules.SHARDS_VAR: str(shards), shard_rules.PEERS_VAR: ",".join(urls)}
    for shard, port in zip(range(old, shards), ports, strict=True):
        name = shard_name(shard)
        own = {**shape, shard_rules.SHARD_ID_VAR: str(shard),
               STORE.port_var or "": str(port), STORE.url_var or "": urls[shard],
               "CLEPSYDRA_STORE_DIR": str(stack.home / name)}
        stack.add(STORE, name=name, **own)
        stack._shard_env[name] = own  # a later restart keeps its place
    for shard in reversed(range(old)):
        stack._shard_env[shard_name(shard)].update(shape)
        stack.restart(shard_name(shard))
    stack.env[shard_rules.SHARDS_VAR] = str(shards)  # parts started from now on
    stack.shard_urls = urls
    return urls
