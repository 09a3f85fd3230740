"""The membership a client keeps of a store cluster (clepsydra_core.runtime.shard_map,
DEC-store-shards), as ``Producer.send`` asks it on every send (DEC-sdk-send-path): before any
answer named a cluster the one shard is a kept answer, no call made and no ``Member`` made a
send; the first answer that names a cluster makes the next question read the membership. A
real HTTP server on loopback answers (tests/unit/core/test_http_connections.py's)."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.runtime.shard_map import Member, ShardMap
from clepsydra_core.wire.cluster import SHARDS_HEADER
from tests.unit.core.test_http_connections import Exchange, Handler, Server, serve

__all__ = ["serve"]  # the fixture


def _cluster(named: list[int]) -> Callable[[Exchange], bool]:
    """A store that answers ``/v1/cluster`` with two shards, and any other call naming
    ``named[0]`` shards (0: no header, a one-store store)."""
    def handler(ex: Exchange) -> bool:
        if ex.target.startswith("/v1/cluster"):
            return ex.json(200, orjson.dumps({"self": 0, "shards": [
                {"id": 0, "url": "http://127.0.0.1:1", "state": "up", "writable": True},
                {"id": 1, "url": "http://127.0.0.1:2", "state": "up", "writable": True}]}),
                f"{SHARDS_HEADER}: 2")
        return ex.json(200, b"{}", *([f"{SHARDS_HEADER}: {named[0]}"] if named[0] else []))
    return handler


def _cluster_reads(server: Server) -> int:
    return sum(ex.target.startswith("/v1/cluster") for ex in server.requests)


def test_one_shard_is_a_kept_answer_until_an_answer_names_a_cluster(
        serve: Callable[[Handler], Server]) -> None:
    """DEC-sdk-send-path: with one store the membership is one kept list (the same object
    every time: no ``Member`` made a send) and ``clustered`` is False without a read; once the
    bootstrap store's answer names two shards, ``clustered`` reads the membership and the
    kept one-shard answer is not given again."""
    named = [0]
    server = serve(_cluster(named))
    http = HttpClient(server.url, service="store")
    shards = ShardMap(http)
    try:
        first = shards.members()
        assert first == [Member(0, server.url)]
        assert shards.members() is first  # kept, not made again
        http.get("/v1/topics")
        assert not shards.clustered and shards.members() is first
        assert _cluster_reads(server) == 0  # a one-store store: not one call more
        named[0] = 2
        http.get("/v1/topics")  # this answer names a cluster of two
        assert shards.clustered
        assert _cluster_reads(server) == 1
        assert [m.id for m in shards.members()] == [0, 1]
        assert shards.members() is not first and first == [Member(0, server.url)]
    finally:
        http.close()


def test_a_map_that_must_ask_reads_the_membership_without_an_answer_naming_it(
        serve: Callable[[Handler], Server]) -> None:
    """A ShardMap made with ``ask`` (the scheduler's) reads the membership at its first
    question, whatever the answers said: ``clustered``'s kept answer is not its."""
    server = serve(_cluster([0]))
    http = HttpClient(server.url, service="store")
    try:
        assert ShardMap(http, ask=True).clustered
        assert _cluster_reads(server) == 1
    finally:
        http.close()
