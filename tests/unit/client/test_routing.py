"""The SDK over a cluster of store shards (clepsydra_client.routing; DEC-store-shards,
DEC-shard-send-retry): which shard a send goes to, when it is sent again elsewhere, and how a
queue named by the application maps onto the shards. Stand-in clients answer the store's routes
(a unit test: no store process); the integration suite runs the same over real shards."""

from __future__ import annotations

from typing import Any

import pytest

from clepsydra_client.consumer.rebalance import (
    AverageByCircleStrategy,
    AverageStrategy,
    ConfigStrategy,
    ConsistentHashStrategy,
    MachineRoomStrategy,
    allocate_all,
)
from clepsydra_client.message import MessageQueue
from clepsydra_client.routing import AVOID_S, Router, hash_index, sent_elsewhere
from clepsydra_core.errors import (
    ClepsydraError,
    DiskFull,
    NoPermission,
    NotSent,
    Unavailable,
    ValidationError,
)
from clepsydra_core.runtime.http import HttpClient, segment
from clepsydra_core.runtime.shard_map import REFRESH_S

SHARDS = 3
QUEUES = 2


class Shard:
    """A store shard as a client sees it: answers the cluster, a route, produces; records every
    call; ``fail`` raises on produce."""

    def __init__(self, cluster: Cluster, shard: int) -> None:
        self.cluster = cluster
        self.shard = shard
        self.base_url = f"http://shard-{shard}"
        self.timeout_s = 1.0
        self.shards_hint = SHARDS
        self.calls: list[tuple[str, str]] = []
        self.fail: ClepsydraError | None = None

    def path(self, template: str, *args: str | int) -> str:
        return template.format(*(segment(a) for a in args))

    def sibling(self, base_url: str, service: str | None = None) -> Shard:
        return self.cluster.by_url[base_url]

    def get(self, path: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        self.calls.append(("GET", path))
        if path == "/v1/cluster":
            return {"self": self.shard, "shards": [
                {"id": s.shard, "url": s.base_url, "state": "up", "writable": s.writable}
                for s in self.cluster.shards]}
        if path.startswith("/v1/routes/"):
            return {"topic": "orders", "queues": [
                {"shard": s.shard, "queueId": q, "url": s.base_url, "writable": s.writable,
                 "reachable": True, "minOffset": 0, "maxOffset": 0}
                for s in self.cluster.shards for q in range(QUEUES)],
                "unreachable": [], "missing": []}
        raise AssertionError(path)

    @property
    def writable(self) -> bool:
        return self.shard not in self.cluster.drained

    def post(self, path: str, json: Any = None, **kw: Any) -> dict[str, Any]:
        self.calls.append(("POST", path))
        if self.fail is not None:
            raise self.fail
        return {"shard": self.shard, "queueId": (json or {}).get("queueId")}

    def close(self) -> None:
        return None


class Cluster:
    def __init__(self) -> None:
        self.drained: set[int] = set()
        self.shards = [Shard(self, s) for s in range(SHARDS)]
        self.by_url = {s.base_url: s for s in self.shards}

    def router(self, clock: list[float] | None = None) -> Router:
        now = clock or [0.0]
        bootstrap: Any = self.shards[0]
        return Router(bootstrap, clock=lambda: now[0])

    def produced(self) -> list[int]:
        return [s.shard for s in self.shards for m, _ in s.calls if m == "POST"]


def _send(router: Router) -> int:
    answer, shard = router.send("orders", lambda http: http.post("/v1/topics/orders/messages"))
    assert answer["shard"] == shard
    return shard


def test_plain_sends_go_to_every_shard_in_turn() -> None:  # DEC-store-shards
    cluster = Cluster()
    router = cluster.router()
    shards = [_send(router) for _ in range(30)]
    assert sorted(set(shards)) == [0, 1, 2]
    assert all(shards.count(s) == 10 for s in range(SHARDS))


def test_a_send_no_shard_stored_goes_to_another_and_that_shard_is_avoided() -> None:
    # DEC-shard-send-retry: a refused connection, a drained shard, a full disk
    for refusal in (NotSent("refused"), NoPermission("drained", rule="R2"), DiskFull("full")):
        cluster = Cluster()
        clock = [0.0]
        router = cluster.router(clock)
        cluster.shards[1].fail = refusal
        shards = [_send(router) for _ in range(20)]
        assert 1 not in shards and len(shards) == 20  # every send acknowledged elsewhere
        tried = [s for s in cluster.produced() if s == 1]
        assert len(tried) == 1  # one retry, then the shard is left out for a while
        clock[0] += AVOID_S + 1
        cluster.shards[1].fail = None
        assert 1 in [_send(router) for _ in range(6)]


def test_a_send_whose_answer_was_lost_is_not_sent_again() -> None:  # DEC-shard-send-retry
    cluster = Cluster()
    router = cluster.router()
    for shard in cluster.shards:
        shard.fail = Unavailable("reset after the request was written")
    with pytest.raises(Unavailable):
        _send(router)
    assert len(cluster.produced()) == 1  # it may have been stored: never twice
    assert not sent_elsewhere(Unavailable("x")) and sent_elsewhere(NotSent("x"))


def test_when_every_shard_refuses_the_last_refusal_is_raised() -> None:
    cluster = Cluster()
    router = cluster.router()
    for shard in cluster.shards:
        shard.fail = DiskFull("disk full")
    with pytest.raises(DiskFull):
        _send(router)
    assert sorted(cluster.produced()) == [0, 1, 2]  # each shard once, no more


def test_a_drained_shard_gets_no_plain_send() -> None:  # DEC-shard-drain
    cluster = Cluster()
    cluster.drained.add(2)
    router = cluster.router()
    assert 2 not in {_send(router) for _ in range(12)}


def test_a_queue_id_is_an_index_into_every_shards_queues() -> None:
    cluster = Cluster()
    router = cluster.router()
    assert router.clustered
    queues = [router.queue_of("orders", i) for i in range(SHARDS * QUEUES)]
    assert queues == sorted(queues)
    assert queues[0] == MessageQueue("orders", 0, 0)
    assert queues[3] == MessageQueue("orders", 1, 1)
    assert queues[5] == MessageQueue("orders", 1, 2)
    with pytest.raises(ValidationError, match=r"0\.\.5"):
        router.queue_of("orders", SHARDS * QUEUES)


def test_a_hash_key_picks_the_same_queue_everywhere() -> None:
    router = Cluster().router()
    picks = {router.hashed("orders", "order-42") for _ in range(5)}
    assert len(picks) == 1
    assert picks == {hash_index("order-42", SHARDS * QUEUES)}
    assert len({hash_index(f"order-{i}", SHARDS * QUEUES) for i in range(200)}) == 6


def test_a_one_store_client_reads_no_membership() -> None:
    """A store whose answers name no cluster: not one call of the router's own."""
    cluster = Cluster()
    lone: Any = cluster.shards[0]
    lone.shards_hint = 0
    router = Router(lone)
    assert not router.clustered
    assert router.members()[0].url == "http://shard-0"
    assert router.send("orders", lambda http: "sent") == ("sent", 0)
    assert lone.calls == []


def test_queues_of_every_shard_are_ordered_topic_shard_queue() -> None:  # SPEC C1
    queues = [MessageQueue("b", 0, 0), MessageQueue("a", 1, 1), MessageQueue("a", 0, 1),
              MessageQueue("a", 5, 0)]
    assert sorted(queues) == [MessageQueue("a", 5, 0), MessageQueue("a", 0, 1),
                              MessageQueue("a", 1, 1), MessageQueue("b", 0, 0)]
    assert MessageQueue("a", 1) == MessageQueue("a", 1, 0)
    assert str(MessageQueue("a", 1)) == "a#1" and str(MessageQueue("a", 1, 2)) == "a@2#1"


@pytest.mark.parametrize("strategy", [AverageStrategy(), AverageByCircleStrategy(),
                                      ConsistentHashStrategy()])
def test_every_strategy_gives_every_shards_queue_to_one_consumer(strategy: Any) -> None:
    # SPEC C1 over (shard, queueId): the strategies unchanged, the queues of every shard
    queues = [MessageQueue("orders", q, s) for s in range(SHARDS) for q in range(4)]
    owners = allocate_all(strategy, queues, ["c1", "c2", "c3", "c4", "c5"])
    assert sorted(owners) == sorted(queues)
    shares = [strategy.allocate(c, queues, ["c1", "c2", "c3", "c4", "c5"])
              for c in ["c1", "c2", "c3", "c4", "c5"]]
    assert sum(len(s) for s in shares) == len(queues)


def test_the_configured_strategies_take_queues_of_any_shard() -> None:
    # SPEC C1: by config and by machine room, (shard, queueId) queues as any other
    queues = [MessageQueue("orders", q, s) for s in range(SHARDS) for q in range(2)]
    configured = [MessageQueue("orders", 1, 2), MessageQueue("orders", 0, 1)]
    assert ConfigStrategy(configured).allocate("c1", queues, ["c1", "c2"]) == configured
    rooms = MachineRoomStrategy(["room-a"], lambda q: "room-a" if q.shard != 1 else "room-b")
    shares = [rooms.allocate(c, queues, ["c1", "c2"]) for c in ("c1", "c2")]
    assert sorted(shares[0] + shares[1]) == [q for q in queues if q.shard != 1]
    assert not set(shares[0]) & set(shares[1])


def test_a_route_is_read_again_after_refresh_s_and_at_once_after_a_failed_send() -> None:
    # DEC-store-shards: routes and membership polled every 30 s (RocketMQ's clients poll
    # their name server), and a send that failed reads its topic's route again at once
    cluster = Cluster()
    clock = [0.0]
    router = cluster.router(clock)

    def reads(prefix: str) -> int:
        return sum(1 for s in cluster.shards for m, p in s.calls
                   if m == "GET" and p.startswith(prefix))

    _send(router)
    assert (reads("/v1/routes/"), reads("/v1/cluster")) == (1, 1)
    clock[0] += REFRESH_S - 1
    for _ in range(6):
        _send(router)
    assert (reads("/v1/routes/"), reads("/v1/cluster")) == (1, 1)  # younger than 30 s
    clock[0] += 2
    _send(router)
    assert (reads("/v1/routes/"), reads("/v1/cluster")) == (2, 2)
    cluster.shards[1].fail = NotSent("refused")
    sent = [_send(router) for _ in range(3)]  # one of them tries shard 1 first
    assert 1 not in sent
    assert reads("/v1/routes/") == 3  # read again after the failure, not 30 s later


def test_http_client_reads_the_cluster_size_from_its_answers() -> None:
    client = HttpClient("http://127.0.0.1:9")
    assert client.shards_hint == 0
    sibling = client.sibling("http://127.0.0.1:10", "store shard 1")
    assert sibling.base_url == "http://127.0.0.1:10" and sibling.service == "store shard 1"


def test_the_route_refresh_period_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # DEC-route-refresh: CLEPSYDRA_CLIENT_ROUTE_REFRESH_S, default 30 s (RocketMQ's route poll)
    from clepsydra_client.settings import ROUTE_REFRESH_VAR, route_refresh_s
    from clepsydra_core.errors import ConfigError

    monkeypatch.delenv(ROUTE_REFRESH_VAR, raising=False)
    assert route_refresh_s() == REFRESH_S == 30.0
    assert Cluster().router().refresh_s == REFRESH_S
    monkeypatch.setenv(ROUTE_REFRESH_VAR, "5")
    router = Cluster().router()
    assert router.refresh_s == 5.0 and router.shards.refresh_s == 5.0
    assert route_refresh_s({ROUTE_REFRESH_VAR: "0.5"}) == 0.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match=ROUTE_REFRESH_VAR):
            route_refresh_s({ROUTE_REFRESH_VAR: bad})
