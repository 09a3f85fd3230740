"""A store cluster's shape (DESIGN "Runs on one machine, grows onto a cluster"; DEC-store-shards):
how many store shards there are, which one a store process is, where each answers, and the
local stack's ports rule. Pure (no I/O): the store's settings, the local stack (tools/parts.py)
and the scheduler's default concurrency read these.

- ``CLEPSYDRA_STORE_SHARDS`` (default 1): how many store shards. One is a one-store cluster,
  exactly the stack as it was before shards.
- ``CLEPSYDRA_STORE_SHARD_ID``: which shard this store is, a number, or a StatefulSet pod's name
  ending in its ordinal (``clepsydra-store-2`` is shard 2), so a pod's own name is its id.
- ``CLEPSYDRA_STORE_PEERS``: where every shard answers, index = shard id: a comma-separated list
  of URLs, or one URL with ``{id}`` in it (``http://clepsydra-store-{id}.clepsydra-store:8081``:
  the StatefulSet's pods behind its headless Service). Unset with one shard: the store's own
  ``CLEPSYDRA_STORE_URL``.
- The local stack's ports rule: shard ``i`` listens on ``CLEPSYDRA_STORE_PORT + i *
  CLEPSYDRA_STORE_SHARD_PORT_STEP`` (default step 100: 8081, 8181, 8281, ..., clear of the other
  services' 8082-8089) and keeps its data in ``$CLEPSYDRA_HOME/store`` (shard 0) or
  ``store-<i>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clepsydra_core.errors import ConfigError
from clepsydra_core.msgid import MAX_SHARD
from clepsydra_core.settings import Env, env_int, env_str

SHARDS_VAR = "CLEPSYDRA_STORE_SHARDS"
SHARD_ID_VAR = "CLEPSYDRA_STORE_SHARD_ID"
PEERS_VAR = "CLEPSYDRA_STORE_PEERS"
PORT_STEP_VAR = "CLEPSYDRA_STORE_SHARD_PORT_STEP"
DEFAULT_PORT_STEP = 100
"""Shard ``i`` of the local stack listens ``i * 100`` above shard 0 (module docstring)."""
MAX_SHARDS = 1024
"""Most shards a cluster has (an offsetMsgId could name up to MAX_SHARD + 1)."""
ID_TEMPLATE = "{id}"
_ORDINAL = re.compile(r"^(?:.*-)?(\d+)$")


def shard_count(env: Env) -> int:
    """``CLEPSYDRA_STORE_SHARDS`` (1..MAX_SHARDS)."""
    return env_int(env, SHARDS_VAR, 1, minimum=1, maximum=min(MAX_SHARDS, MAX_SHARD + 1))


def port_step(env: Env) -> int:
    return env_int(env, PORT_STEP_VAR, DEFAULT_PORT_STEP, minimum=1)


def shard_port(store_port: int, shard: int, step: int = DEFAULT_PORT_STEP) -> int:
    """The local stack's ports rule: where shard ``shard`` listens (module docstring)."""
    port = store_port + shard * step
    if port > 65535:
        raise ConfigError(f"shard {shard} would listen on port {port}, past 65535 "
                          f"(CLEPSYDRA_STORE_PORT {store_port} + {shard} x {PORT_STEP_VAR} "
                          f"{step}): lower one of them")
    return port


def parse_shard_id(raw: str, shards: int) -> int:
    """A shard id from ``CLEPSYDRA_STORE_SHARD_ID``: a number, or a name ending in ``-<n>`` (a
    StatefulSet pod's name and ordinal). ConfigError naming the variable otherwise, or when the
    id is not below ``shards``."""
    match = _ORDINAL.match(raw.strip())
    if match is None:
        raise ConfigError(f"{SHARD_ID_VAR}={raw!r} is neither a shard number nor a pod name "
                          "ending in its ordinal (clepsydra-store-2)")
    shard = int(match.group(1))
    if shard >= shards:
        raise ConfigError(f"{SHARD_ID_VAR}={raw!r} is shard {shard}, but {SHARDS_VAR}={shards} "
                          f"(shards 0..{shards - 1})")
    return shard


def peer_urls(raw: str, shards: int, own_url: str) -> tuple[str, ...]:
    """Every shard's URL, index = shard id, from ``CLEPSYDRA_STORE_PEERS`` (module docstring);
    ``own_url`` when it is unset and there is one shard."""
    raw = raw.strip()
    if not raw:
        if shards == 1:
            return (own_url.rstrip("/"),)
        raise ConfigError(f"{SHARDS_VAR}={shards} needs {PEERS_VAR}: every shard's URL, comma-"
                          f"separated, or one URL with {ID_TEMPLATE} for the shard id")
    if ID_TEMPLATE in raw:
        return tuple(raw.replace(ID_TEMPLATE, str(i)).rstrip("/") for i in range(shards))
    urls = tuple(u.strip().rstrip("/") for u in raw.split(","))
    if len(urls) != shards or not all(urls):
        raise ConfigError(f"{PEERS_VAR} names {len([u for u in urls if u])} URLs, "
                          f"{SHARDS_VAR}={shards} asks for {shards}")
    return urls


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """Which shard a store is and where every shard answers (index = shard id)."""

    shard_id: int = 0
    peers: tuple[str, ...] = ()
    """Every shard's URL; empty: a one-store cluster that advertises no URL of its own."""

    @property
    def shards(self) -> int:
        return max(len(self.peers), 1)

    @property
    def clustered(self) -> bool:
        """More than one shard: topic changes and look-ups reach the peers."""
        return len(self.peers) > 1

    def url_of(self, shard: int) -> str:
        return self.peers[shard] if shard < len(self.peers) else ""

    def others(self) -> list[int]:
        """Every shard id but this store's own."""
        return [i for i in range(len(self.peers)) if i != self.shard_id]

    @classmethod
    def from_env(cls, env: Env, own_url: str) -> ClusterShape:
        shards = shard_count(env)
        raw_id = env_str(env, SHARD_ID_VAR, "0")
        shard_id = parse_shard_id(raw_id, shards)
        return cls(shard_id=shard_id, peers=peer_urls(env_str(env, PEERS_VAR, ""), shards,
                                                      own_url))
