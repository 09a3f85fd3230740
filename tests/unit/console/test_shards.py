"""The console's view of store shards (clepsydra_console.shards, DEC-console-shards): the shards
table's totals leave an unreachable shard out and say so, timers and levels are summed over the
shards with each shard's own line, queues are (shard, queueId) rows and a shard that did not
answer gets no offsets and no lag rather than zeros; the store's rates summed over the shards'
counters."""

from __future__ import annotations

from clepsydra_client.admin import LevelStatus
from clepsydra_console import rates
from clepsydra_console.shards import (
    LagRow,
    LevelRow,
    ShardRead,
    cluster_view,
    level_rows,
    merge_levels,
    merge_timers,
    partial_text,
    route_partial,
    route_rows,
    shard_timers,
    size_text,
    unread,
)
from clepsydra_core.wire.cluster import (
    UNREACHABLE,
    UP,
    ClusterAnswer,
    RouteAnswer,
    RouteQueue,
    ShardStatus,
)
from clepsydra_core.wire.schedule import LevelInfo
from clepsydra_core.wire.timers import HourCount, Lateness, TimerBacklog


def _up(shard: int, pending: int, queues: int = 4, size: int = 1000) -> ShardStatus:
    return ShardStatus(shard, f"http://s{shard}", UP, writable=True, draining=False, topics=2,
                       queues=queues, commitlog_bytes=size, pending_delayed=pending,
                       unconsumed=shard, dead_letters=1)


def test_the_shards_table_sums_the_shards_that_answered_and_names_the_others() -> None:
    answer = ClusterAnswer(0, [_up(1, 5), _up(0, 3),
                               ShardStatus(2, "http://s2", UNREACHABLE, error="refused")])
    view = cluster_view(answer)
    assert [s.id for s in view.shards] == [0, 1, 2]  # by id, the unreachable one listed
    assert (view.pending_delayed, view.queues, view.commitlog_bytes) == (8, 8, 2000)
    assert (view.unconsumed, view.dead_letters) == (1, 2)
    assert view.topics == 2  # every topic is on every shard: counted once, not summed
    assert view.unreachable == [2]
    assert view.partial is not None and "shard 2 did not answer" in view.partial
    whole = cluster_view(ClusterAnswer(0, [_up(0, 1), _up(1, 2)]))
    assert whole.partial is None and whole.pending_delayed == 3


def test_partial_texts() -> None:
    assert partial_text([]) is None
    assert partial_text([2], "timers") == ("store shard 2 did not answer: the timers leave out "
                                           "what it holds")
    assert "shards 1, 3" in (partial_text([3, 1, 3]) or "")
    assert unread([ShardRead(0, 1), ShardRead(1, error="x"), ShardRead(2, error="y")]) == [1, 2]


def test_sizes_read_as_a_person_reads_them() -> None:
    assert size_text(None) == "-"
    assert size_text(512) == "512 B"
    assert size_text(3 * 1024 * 1024 // 2) == "1.5 MiB"
    assert size_text(5 * 1024 ** 3) == "5.0 GiB"


def test_timers_of_every_shard_summed_hour_by_hour() -> None:  # SPEC T1, T2
    a = TimerBacklog(3, [HourCount(0, 1), HourCount(2, 2)], 10, 5_000, Lateness(4, 9, 12))
    b = TimerBacklog(4, [HourCount(2, 3), HourCount(5, 1)], 7, 4_000, Lateness(6, 8, 20))
    c = TimerBacklog(0, [], 0, None, None)
    merged = merge_timers([a, b, c])
    assert merged is not None
    assert merged.pending == 7 and merged.handed_over == 17
    assert [(h.hour, h.count) for h in merged.by_hour_ahead] == [(0, 1), (2, 5), (5, 1)]
    assert merged.next_due_at == 4_000
    assert merged.lateness == Lateness(6, 9, 20)  # the worst shard's, not an invented mean
    assert merge_timers([a]) is a and merge_timers([]) is None
    assert merge_timers([c, c]) == TimerBacklog(0, [], 0, None, None)


def _level(level: int, backlog: int, next_ts: int | None, lag: int) -> LevelStatus:
    info = LevelInfo(level=level, delay_ms=level * 1000, queue_id=level - 1, min_offset=0,
                     max_offset=backlog, handed_over=-1)
    return LevelStatus(info, lag, next_ts)


def test_levels_of_every_shard_summed_level_by_level() -> None:  # SPEC L1, D10
    one = level_rows([_level(1, 2, 900, 0), _level(2, 0, None, 0)])
    assert one == [LevelRow(1, 1000, 2, 900, 0), LevelRow(2, 2000, 0, None, 0)]
    two = level_rows([_level(1, 3, 800, 50), _level(2, 1, 1200, 0)])
    merged = merge_levels([one, two])
    assert merged == [LevelRow(1, 1000, 5, 800, 50), LevelRow(2, 2000, 1, 1200, 0)]


def test_each_shards_timer_line_says_when_it_could_not_be_read() -> None:
    backlog = TimerBacklog(2, [HourCount(1, 2)], 0, 10, None)
    lines = shard_timers(
        [ShardRead(1, error="refused"), ShardRead(0, backlog)],
        [ShardRead(0, [LevelRow(1, 1000, 3, None, 0), LevelRow(2, 2000, 1, None, 0)]),
         ShardRead(1, error="refused")])
    assert [(x.shard, x.level_pending, x.error) for x in lines] == [(0, 4, None),
                                                                   (1, None, "refused")]
    assert lines[0].timers is backlog


def test_a_topics_queues_are_shard_and_queue_rows_an_unreachable_shard_without_offsets(
        ) -> None:
    route = RouteAnswer("orders", [
        RouteQueue(1, 0, "http://s1", True, True, 0, 7),
        RouteQueue(0, 1, "http://s0", True, True, 2, 4),
        RouteQueue(0, 0, "http://s0", True, True, 0, 3),
        RouteQueue(2, 0, "http://s2", False, False)], unreachable=[2], missing=[3])
    rows = route_rows(route)
    assert [(r.shard, r.queue_id, r.min_offset, r.max_offset, r.reachable) for r in rows] == [
        (0, 0, 0, 3, True), (0, 1, 2, 4, True), (1, 0, 0, 7, True), (2, 0, None, None, False)]
    text = route_partial(route) or ""
    assert "shard 2 did not answer" in text and "3 answered without this topic" in text
    assert route_partial(RouteAnswer("orders", rows and [])) is None


def test_lag_is_never_guessed_for_a_shard_that_did_not_answer() -> None:  # SPEC C4
    assert LagRow("orders", 1, 0, 10, 4, "c1").lag == 6
    assert LagRow("orders", 1, 0, 10, None, None).lag == 10  # nothing committed yet
    assert LagRow("orders", 2, 0, None, None, None, reachable=False).lag is None


def test_the_stores_rates_are_summed_over_the_shards_counters() -> None:
    now = [0.0]
    produced = {"http://s0": iter([10.0, 30.0]), "http://s1": iter([0.0, 5.0])}

    def make(url: str) -> rates.Sampler:
        def read() -> rates.Counters:
            if url == "http://s2":
                raise OSError("connection refused")
            return {rates.PRODUCED: next(produced[url])}
        return rates.Sampler(read, min_gap_s=2.0, clock=lambda: now[0])

    samplers = rates.ShardSamplers(make)
    urls = ["http://s0", "http://s1", "http://s2"]
    first = samplers.rate(urls, rates.PRODUCED)
    assert first.value is None  # measuring: one reading each
    assert first.errors == ["http://s2: connection refused"]
    now[0] = 10.0
    second = samplers.rate(urls, rates.PRODUCED)
    assert second.value is not None and abs(second.value - 2.5) < 1e-9  # (20 + 5) / 10 s
    assert second.errors == ["http://s2: connection refused"]
    assert samplers.of("http://s0") is samplers.of("http://s0")
