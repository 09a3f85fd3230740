"""What a shard takes from its peers when it starts (DEC-store-shards): the user topics it lacks
(a new shard of a grown cluster, or one that was down while a topic was created) with the
queue count the peers have, the queues of a topic the peers grew meanwhile, and the consumer
groups' settings it lacks. Only additions: a shard never deletes or shrinks anything it reads
from a peer, and never takes back a topic deleted through it (its tombstone in
``ClusterState``, checked and taken under ``ClusterState.changing``).

It runs on a thread of its own once the store is up, until one peer answered (then it stops):
a shard starts and serves at once, its topics arrive within a peer's answer.
"""

from __future__ import annotations

import logging
import threading

from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, TopicNotFound
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.groups import GroupSettingsList
from clepsydra_core.wire.topics import TopicList
from clepsydra_store.cluster.peers import Peers
from clepsydra_store.cluster.state import ClusterState
from clepsydra_store.engine.message_store import MessageStore

logger = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0


class PeerSync:
    def __init__(self, store: MessageStore, state: ClusterState, peers: Peers) -> None:
        self.store = store
        self.state = state
        self.peers = peers
        self.stop = threading.Event()
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.peers.ids:
            self.done.set()
            return
        self._thread = threading.Thread(target=self._run, name="cluster-sync", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        wait_s = FIRST_RETRY_S
        while not self.stop.is_set():
            try:
                if self.run_once():
                    self.done.set()
                    return
            except Exception:
                logger.exception("cluster sync failed; trying again in %.0fs", wait_s)
            self.stop.wait(wait_s)
            wait_s = min(wait_s * 2, MAX_RETRY_S)

    def run_once(self) -> bool:
        """Take what the peers that answer have; True when at least one answered."""
        topics = self.peers.each(lambda s: read_answer(
            TopicList, self.peers.call(s, "GET", "/v1/topics")[1], "topics"))
        groups = self.peers.each(lambda s: read_answer(
            GroupSettingsList, self.peers.call(s, "GET", "/v1/groups")[1], "groups"))
        wanted: dict[str, int] = {}
        answered = 0
        for shard, listing in topics.items():
            if isinstance(listing, ClepsydraError):
                logger.info("cluster sync: shard %d did not list its topics: %s", shard, listing)
                continue
            answered += 1
            for topic in listing.topics:
                if not naming.is_system_topic(topic.name):
                    wanted[topic.name] = max(wanted.get(topic.name, 0), len(topic.queues))
        for name, queues in sorted(wanted.items()):
            with self.state.changing:  # not between a delete here and its tombstone
                if not self.state.is_deleted(name):
                    self._take_topic(name, queues)
        for settings in groups.values():
            if isinstance(settings, ClepsydraError):
                continue
            for group in settings.groups:
                if self.store.group_settings(group.group) is None:
                    self.store.put_group_settings(group.group, {
                        "retryQueueNums": group.retry_queue_nums,
                        "retryMaxTimes": group.retry_max_times})
                    logger.info("cluster sync: group settings taken from a peer group=%s",
                                group.group)
        return answered > 0

    def _take_topic(self, name: str, queues: int) -> None:
        try:
            have = len(self.store.get_topic(name).queues)
        except TopicNotFound:
            self.store.create_topic(name, queues)
            logger.info("cluster sync: topic taken from a peer topic=%s queues=%d", name, queues)
            return
        if have < queues:
            self.store.update_topic(name, queues)
            logger.info("cluster sync: topic grown as on a peer topic=%s queues=%d->%d", name,
                        have, queues)
