"""A worker serves every store shard (DEC-store-shards): shard 0's runs that no predecessor
handed a lease to (beat's keep-alives, a starting worker's kick) start the other shards' runs
that need one - none holds their lease, or an earlier process of this very worker does (a
restart takes its own leases back at once, DEC-scheduler-lease)."""

from __future__ import annotations

from clepsydra_core.errors import Unavailable
from clepsydra_core.runtime.shard_map import Member
from clepsydra_scheduler.ports import LeaseToken, WorkerIdentity
from clepsydra_scheduler.runtime import SchedulerRuntime
from clepsydra_scheduler.settings import SchedulerSettings, default_concurrency

ME = WorkerIdentity("pod-a/worker", 20)


def _token(name: str, incarnation: int) -> str:
    return LeaseToken(incarnation, 3, "run1", name).encode()


class _Members:
    """The membership a worker reads (clepsydra_core.runtime.shard_map.ShardMap's ``members``)."""

    def __init__(self, ids: list[int] | None) -> None:
        self.ids = ids

    def members(self) -> list[Member]:
        if self.ids is None:
            raise Unavailable("store away")
        return [Member(i, f"http://127.0.0.1:{8081 + 100 * i}") for i in self.ids]


def _runtime(ids: list[int] | None) -> SchedulerRuntime:
    runtime = SchedulerRuntime(SchedulerSettings.from_env({}))
    runtime._shards = _Members(ids)  # type: ignore[assignment]
    return runtime


def test_a_shard_needs_a_run_when_its_lease_is_free_or_held_by_an_earlier_process_of_mine() -> None:
    runtime = _runtime([0])
    assert runtime.needs_run(None, ME)
    assert runtime.needs_run(_token("pod-a/worker", 19), ME)  # my process before a restart
    assert not runtime.needs_run(_token("pod-a/worker", 20), ME)  # my own run: it serves
    assert not runtime.needs_run(_token("pod-b/worker", 5), ME)  # another worker serves it
    assert not runtime.needs_run("0f3a9c", ME)  # an older worker's bare token: left to expire


def test_shard_0_kicks_the_other_shards_that_need_a_run() -> None:
    runtime = _runtime([0, 1, 2, 3])
    holders = {1: None, 2: _token("pod-b/worker", 9), 3: _token("pod-a/worker", 4)}
    kicked: list[int] = []
    runtime.kick_shards(kicked.append, holders.__getitem__, ME, "level=1")
    assert kicked == [1, 3]  # never shard 0 (the run kicking), never one another worker holds


def test_an_unreadable_membership_or_lease_kicks_nothing_and_the_run_goes_on() -> None:
    kicked: list[int] = []
    _runtime(None).kick_shards(kicked.append, lambda s: None, ME, "timers")
    assert kicked == []

    def holder(shard: int) -> str | None:
        if shard == 1:
            raise Unavailable("redis away")
        return None

    _runtime([0, 1, 2]).kick_shards(kicked.append, holder, ME, "timers")
    assert kicked == [2]  # shard 1's failure is logged; shard 2 is still started


def test_a_worker_has_a_thread_for_every_shards_levels_and_timers() -> None:
    # every (shard, level) run and every shard's timers' run hold a thread for their period
    assert default_concurrency(18, 1) == 18 + 4  # a one-store stack's default, unchanged
    assert default_concurrency(18, 3) == 3 * 19 + 3
    settings = SchedulerSettings.from_env({"CLEPSYDRA_STORE_SHARDS": "3"})
    assert settings.concurrency == default_concurrency(settings.levels.max_level, 3)
