"""This shard's status and its share of the data (``GET /v1/cluster/self``): what ``clepsydra
cluster`` prints per shard and what says a drained shard can be taken away (DEC-shard-drain).

- ``pending_delayed``: entries of the delay levels not handed over yet plus timers pending (a
  pass over the timer log: 20 bytes a timer);
- ``unconsumed``: on its user and ``%RETRY%`` queues, what each group that committed progress
  there has not consumed yet (the analytics exporter's group included: its export waits too);
- ``removable``: draining, and both of those zero. Its dead letters (``dead_letters``) and its
  history stay on its volumes: they go with it.
"""

from __future__ import annotations

import time

from clepsydra_core import naming
from clepsydra_core.wire.cluster import UP, ShardStatus
from clepsydra_store.cluster.state import ClusterState
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.engine.types import TopicInfo


def _consumed_by_groups(info: TopicInfo) -> bool:
    """Topics whose progress groups keep: user topics and ``%RETRY%`` (not the DLQ, S3's
    internal topics nor the parking topic)."""
    return not naming.is_system_topic(info.name) or naming.is_retry_topic(info.name)


def _unconsumed(store: MessageStore, info: TopicInfo) -> int:
    bounds = {q.queue_id: q.max_offset for q in info.queues}
    behind = 0
    for offsets in store.topic_offsets(info.name).values():
        for queue_id, committed in offsets.items():
            high = bounds.get(queue_id)
            if high is not None and high > committed:
                behind += high - committed
    return behind


def pending_delayed(store: MessageStore, stats: dict[str, float]) -> int:
    levels = sum(int(v) for k, v in stats.items() if k.startswith("schedule_backlog_level_"))
    return levels + store.timer_backlog(time.time_ns() // 1_000_000).pending


def shard_status(store: MessageStore, state: ClusterState, *, shard: int, url: str,
                 writable: bool, store_host: str, shares: bool = True) -> ShardStatus:
    """This shard's status; without ``shares`` only who and where it is and whether it takes
    messages (what a client's membership needs: no pass over the data)."""
    if not shares:
        return ShardStatus(id=shard, url=url, state=UP, writable=writable and not state.draining,
                           draining=state.draining, store_host=store_host)
    stats = store.stats()
    topics = store.list_topics()
    user = [t for t in topics if not naming.is_system_topic(t.name)]
    held = [t for t in topics if not naming.is_system_topic(t.name)
            or naming.is_retry_topic(t.name) or naming.is_dlq_topic(t.name)]
    dead = sum(q.max_offset - q.min_offset for t in topics if naming.is_dlq_topic(t.name)
               for q in t.queues)
    unconsumed = sum(_unconsumed(store, t) for t in topics if _consumed_by_groups(t))
    pending = pending_delayed(store, stats)
    draining = state.draining
    return ShardStatus(
        id=shard, url=url, state=UP, writable=writable and not draining, draining=draining,
        store_host=store_host, topics=len(user), queues=sum(len(t.queues) for t in held),
        commitlog_bytes=int(stats["commitlog_max_offset"] - stats["commitlog_min_offset"]),
        pending_delayed=pending, unconsumed=unconsumed, dead_letters=dead,
        removable=draining and pending == 0 and unconsumed == 0)
