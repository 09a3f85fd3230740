"""The store-side queue lock table of orderly consumers (SPEC C1, DEC-orderly-queue-locks;
RocketMQ's RebalanceLockManager): lock a batch, renew, expiry, other clients refused, unlock."""

from __future__ import annotations

from clepsydra_store.queue_locks import LockHolder, QueueLocks


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def test_lock_batch_grants_free_queues_and_refuses_another_clients() -> None:
    # SPEC C1: a queue is held by one client of a group at a time
    clock = Clock()
    locks = QueueLocks(60_000, clock)
    assert locks.lock("g", "a", [("T", 0), ("T", 1)]) == [("T", 0), ("T", 1)]
    assert locks.lock("g", "b", [("T", 1), ("T", 2)]) == [("T", 2)]
    assert locks.lock("other-group", "b", [("T", 1)]) == [("T", 1)]  # per group
    assert locks.holders("g") == [LockHolder("T", 0, "a", clock.now_ms + 60_000),
                                  LockHolder("T", 1, "a", clock.now_ms + 60_000),
                                  LockHolder("T", 2, "b", clock.now_ms + 60_000)]


def test_renewal_keeps_the_lock_past_the_first_expiry() -> None:
    # SPEC C1: renewed every 20 s, a lock never lapses
    clock = Clock()
    locks = QueueLocks(60_000, clock)
    locks.lock("g", "a", [("T", 0)])
    for _ in range(5):
        clock.now_ms += 20_000
        assert locks.lock("g", "a", [("T", 0)]) == [("T", 0)]
        assert locks.lock("g", "b", [("T", 0)]) == []
    assert locks.holders("g")[0].expires_at_ms == clock.now_ms + 60_000


def test_an_expired_lock_goes_to_the_next_client() -> None:
    # SPEC C1: 60 s without renewal frees the queue
    clock = Clock()
    locks = QueueLocks(60_000, clock)
    locks.lock("g", "a", [("T", 0)])
    clock.now_ms += 60_000
    assert locks.lock("g", "b", [("T", 0)]) == []  # exactly at the expiry: still a's
    clock.now_ms += 1
    assert locks.lock("g", "b", [("T", 0)]) == [("T", 0)]
    assert locks.lock("g", "a", [("T", 0)]) == []
    assert [h.client_id for h in locks.holders("g")] == ["b"]


def test_expired_locks_are_not_listed() -> None:
    clock = Clock()
    locks = QueueLocks(1_000, clock)
    locks.lock("g", "a", [("T", 0)])
    clock.now_ms += 1_001
    assert locks.holders("g") == []


def test_unlock_releases_only_the_clients_own_queues() -> None:
    # SPEC C1: unlocked on drop; another client's lock is left alone
    clock = Clock()
    locks = QueueLocks(60_000, clock)
    locks.lock("g", "a", [("T", 0)])
    locks.lock("g", "b", [("T", 1)])
    assert locks.unlock("g", "a", [("T", 0), ("T", 1), ("T", 9)]) == [("T", 0)]
    assert locks.lock("g", "b", [("T", 0)]) == [("T", 0)]
    assert locks.unlock("nobody", "a", [("T", 0)]) == []
