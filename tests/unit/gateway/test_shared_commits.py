"""Two gateway processes over one Redis commit a queue's progress (SPEC C4) without setting it
back (DEC-gateway-shared-commits): each flushes the commit point the shared state has, not the
one it last saw itself. A real redis-server; the store a stand-in that keeps the last commit it
is sent, as the store does."""

from __future__ import annotations

from typing import Any, cast

import redis

from clepsydra_gateway.backend import Backend
from clepsydra_gateway.consume import Consumption
from clepsydra_gateway.settings import GatewaySettings
from clepsydra_gateway.state import Delivery, GatewayState
from tools.processes import RedisServer


class Store:
    """The store's offsets as commits set them: the last one sent wins."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str, int, int], int] = {}
        self.calls = 0

    def commit(self, group: str, topic: str, shard: int, queue_id: int, offset: int,
               token: str | None) -> None:
        self.calls += 1
        self.offsets[(group, topic, shard, queue_id)] = offset


def test_two_gateways_never_commit_a_queue_back(redis_server: RedisServer) -> None:
    state = GatewayState(redis.Redis.from_url(redis_server.url))
    store = Store()
    settings = cast(GatewaySettings, None)  # flushing reads no setting
    old, new = (Consumption(settings, state, cast(Backend, store)) for _ in range(2))
    group, topic, shard, queue = "g", "t", 2, 0
    assert state.advance(group, topic, queue, 0, shard=shard) == 0
    handed = [(o, Delivery(n=f"n{o}", d=10**13, a=1, m=f"m{o}")) for o in range(4)]
    assert state.hand_out(group, topic, queue, 0, 4, handed, fifo=False, shard=shard) == 0

    def ack(gateway: Consumption, offset: int) -> None:
        done, commit, _ = state.settle(group, topic, queue, offset, f"n{offset}", shard=shard)
        assert done == 1
        gateway.commit(group, topic, shard, queue, commit, None)

    ack(old, 0)  # gateway "old" saw the queue's point move to 1, then 2
    ack(old, 1)
    ack(new, 2)  # gateway "new" settled the rest: 4
    ack(new, 3)
    new.flush_commits()
    assert store.offsets[(group, topic, shard, queue)] == 4
    old.flush_commits()  # later, with its own older view
    assert store.offsets[(group, topic, shard, queue)] == 4  # not set back to 2
    assert state.committed(group, topic, queue, shard=shard) == 4
    calls = store.calls
    old.flush_commits()
    new.flush_commits()
    assert store.calls == calls  # nothing left to commit


def test_a_flush_commits_again_when_another_gateway_moved_the_point_meanwhile(
        redis_server: RedisServer) -> None:
    state = GatewayState(redis.Redis.from_url(redis_server.url))
    group, topic, queue = "g", "t", 1
    state.advance(group, topic, queue, 0, shard=0)
    handed = [(o, Delivery(n=f"n{o}", d=10**13, a=1, m=f"m{o}")) for o in range(3)]
    state.hand_out(group, topic, queue, 0, 3, handed, fifo=False, shard=0)
    sent: list[int] = []

    class Racing(Store):
        def commit(self, *args: Any) -> None:  # another gateway settles the rest meanwhile
            super().commit(*args)
            sent.append(args[4])
            if len(sent) == 1:
                for o in (1, 2):
                    state.settle(group, topic, queue, o, f"n{o}", shard=0)

    store = Racing()
    gateway = Consumption(cast(GatewaySettings, None), state, cast(Backend, store))
    done, commit, _ = state.settle(group, topic, queue, 0, "n0", shard=0)
    assert done == 1
    gateway.commit(group, topic, 0, queue, commit, None)
    gateway.flush_commits()
    assert sent == [1, 3]  # its own point, then the newer one it found after
    assert store.offsets[(group, topic, 0, queue)] == 3
