"""Allocation strategies (SPEC C1): pure, deterministic, disjoint and complete."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from clepsydra_client.consumer.rebalance import (
    AverageByCircleStrategy,
    AverageStrategy,
    ConfigStrategy,
    ConsistentHashStrategy,
    MachineRoomStrategy,
    allocate_all,
    md5_hash,
    strategy_by_name,
)
from clepsydra_client.message import MessageQueue
from clepsydra_core.errors import ConfigError

if TYPE_CHECKING:

    from clepsydra_client.consumer.rebalance import AllocateStrategy

def queues(n: int, topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, i) for i in range(n)]


def ids(share: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in share]


CONSUMERS = ["c1", "c2", "c3"]


def test_average_gives_contiguous_blocks_larger_first() -> None:  # SPEC C1
    s = AverageStrategy()
    assert [ids(s.allocate(c, queues(8), CONSUMERS)) for c in CONSUMERS] == [
        [0, 1, 2], [3, 4, 5], [6, 7]]


def test_average_with_more_consumers_than_queues_leaves_some_idle() -> None:  # SPEC C1
    s = AverageStrategy()
    got = [ids(s.allocate(c, queues(3), [f"c{i}" for i in range(5)])) for c in
           [f"c{i}" for i in range(5)]]
    assert got == [[0], [1], [2], [], []]


def test_average_by_circle_deals_round_robin() -> None:  # SPEC C1
    s = AverageByCircleStrategy()
    assert [ids(s.allocate(c, queues(8), CONSUMERS)) for c in CONSUMERS] == [
        [0, 3, 6], [1, 4, 7], [2, 5]]


def test_inputs_are_sorted_so_every_consumer_agrees() -> None:  # SPEC C1
    shuffled_q = queues(8)
    random.Random(3).shuffle(shuffled_q)
    for strategy in (AverageStrategy(), AverageByCircleStrategy(), ConsistentHashStrategy()):
        for c in CONSUMERS:
            assert strategy.allocate(c, shuffled_q, ["c3", "c1", "c2"]) == \
                strategy.allocate(c, queues(8), CONSUMERS)


def test_a_consumer_not_in_the_list_owns_nothing() -> None:
    assert AverageStrategy().allocate("ghost", queues(4), CONSUMERS) == []
    assert ConsistentHashStrategy().allocate("ghost", queues(4), CONSUMERS) == []


@pytest.mark.parametrize("strategy", [AverageStrategy(), AverageByCircleStrategy(),
                                      ConsistentHashStrategy(), ConsistentHashStrategy(3)],
                         ids=lambda s: s.name)
def test_every_queue_has_exactly_one_owner(strategy: AllocateStrategy) -> None:  # SPEC C1
    rng = random.Random(7)
    for _ in range(60):
        n_q, n_c = rng.randint(0, 40), rng.randint(1, 9)
        qs = queues(n_q, "A") + queues(rng.randint(0, 5), "B")
        cs = [f"10.0.0.{rng.randint(1, 250)}@{i}" for i in range(n_c)]
        shares = [strategy.allocate(c, qs, cs) for c in cs]
        flat = [q for share in shares for q in share]
        assert sorted(flat) == sorted(qs)
        assert len(flat) == len(set(flat))


def test_consistent_hash_moves_only_the_leavers_queues() -> None:  # SPEC C1
    s = ConsistentHashStrategy()
    qs = queues(64)
    before = allocate_all(s, qs, ["a", "b", "c", "d"])
    after = allocate_all(s, qs, ["a", "b", "d"])
    moved = [q for q in qs if before[q] != after[q]]
    assert moved and all(before[q] == "c" for q in moved)


def test_md5_hash_is_rocketmq_compatible_first_four_bytes() -> None:
    # MD5("a") = 0cc175b9c0f1b6a8...; the first 4 bytes big-endian
    assert md5_hash("a") == 0x0CC175B9


def test_config_strategy_returns_the_configured_list_as_given() -> None:
    # SPEC C1: RocketMQ's AllocateMessageQueueByConfig returns its list unchanged
    s = ConfigStrategy([MessageQueue("T", 1), MessageQueue("T", 9), MessageQueue("T", 0)])
    assert ids(s.allocate("any", queues(4), CONSUMERS)) == [1, 9, 0]


@pytest.mark.parametrize(("broker", "topic", "count", "consumers", "owners"), [
    # computed by RocketMQ's own ConsistentHashRouter and MessageQueue (compiled from the
    # apache/rocketmq sources and run with 10 virtual nodes), not by this code
    ("broker-a", "orders", 8, ["c1", "c2", "c3"], "c2 c1 c2 c1 c2 c2 c2 c1"),
    ("broker-a", "orders", 12, ["10.0.0.1@a", "10.0.0.2@b"],
     "10.0.0.2@b 10.0.0.2@b 10.0.0.1@a 10.0.0.2@b 10.0.0.1@a 10.0.0.1@a 10.0.0.2@b "
     "10.0.0.2@b 10.0.0.1@a 10.0.0.2@b 10.0.0.2@b 10.0.0.1@a"),
    ("clepsydra", "%RETRY%billing", 4, ["x@1", "x@2", "x@3", "x@4"], "x@3 x@1 x@3 x@2"),
])
def test_consistent_hash_agrees_with_rocketmq(broker: str, topic: str, count: int,
                                              consumers: list[str], owners: str) -> None:
    # SPEC C1: the queue key is MessageQueue.toString(), with the broker name
    s = ConsistentHashStrategy(broker_name=broker)
    qs = [MessageQueue(topic, i) for i in range(count)]
    got = allocate_all(s, qs, consumers)
    assert " ".join(got[q] for q in qs) == owners


def test_machine_room_shares_the_rooms_queues_evenly() -> None:  # SPEC C1
    rooms = {q: ("east" if q.queue_id < 5 else "west") for q in queues(8)}
    s = MachineRoomStrategy(["east"], rooms)
    shares = [ids(s.allocate(c, queues(8), ["c1", "c2"])) for c in ["c1", "c2"]]
    assert shares == [[0, 1, 4], [2, 3]]
    both = MachineRoomStrategy(["east", "west"], lambda q: rooms[q])
    flat = sorted(q for c in CONSUMERS for q in ids(both.allocate(c, queues(8), CONSUMERS)))
    assert flat == list(range(8))


def test_machine_room_needs_a_room() -> None:
    with pytest.raises(ConfigError):
        MachineRoomStrategy([], {})


def test_strategy_by_name() -> None:
    assert strategy_by_name("average-by-circle").name == "average-by-circle"
    with pytest.raises(ConfigError, match="unknown allocation strategy"):
        strategy_by_name("nope")
