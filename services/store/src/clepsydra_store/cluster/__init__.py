"""A store shard's part in a cluster of stores (DEC-store-shards): share-nothing shards, no
coordinator, no replication. Each shard is a whole store over its own volumes; a topic has its
queues on every shard; a message stays on the shard that stored it for life (its delay level
or timer, its retries and its dead letter), as on RocketMQ's brokers. What a shard adds to a
one-store store:

- ``state.py``: its own durable cluster state (drained or not, topics deleted through it);
- ``peers.py``: its calls to the other shards (local scope, short timeouts, in parallel);
- ``share.py``: its status and share of the data (``GET /v1/cluster/self``);
- ``sync.py``: the topics and group settings it takes from its peers when it starts.

The HTTP side (the cluster routes, and the existing routes every shard applies or any shard
answers for all) is ``api/cluster.py`` and ``api/fanout.py``. With one shard none of this asks
anything of anyone: the store answers exactly as a one-store stack did.
"""

from __future__ import annotations

from clepsydra_core import naming
from clepsydra_core.shards import ClusterShape
from clepsydra_core.wire.cluster import ShardStatus
from clepsydra_store.cluster.peers import Peers
from clepsydra_store.cluster.share import shard_status
from clepsydra_store.cluster.state import ClusterState
from clepsydra_store.cluster.sync import PeerSync
from clepsydra_store.engine.message_store import MessageStore


class Cluster:
    def __init__(self, shape: ClusterShape, store: MessageStore, *, writable: bool,
                 store_host: str, token: str | None = None) -> None:
        self.shape = shape
        self.store = store
        self.writable = writable
        """CLEPSYDRA_STORE_WRITABLE: a read-only store refuses writes whether drained or not."""
        self.store_host = store_host
        self.state = ClusterState(store.config.data_dir / naming.CONFIG_DIR)
        self.peers = Peers(shape, token=token)
        self.sync = PeerSync(store, self.state, self.peers)

    @property
    def shard_id(self) -> int:
        return self.shape.shard_id

    @property
    def clustered(self) -> bool:
        return self.shape.clustered

    @property
    def accepting(self) -> bool:
        """Takes new messages: writable and not draining (R2, DEC-shard-drain)."""
        return self.writable and not self.state.draining

    def status(self, *, shares: bool = True) -> ShardStatus:
        return shard_status(self.store, self.state, shard=self.shard_id,
                            url=self.shape.url_of(self.shard_id), writable=self.writable,
                            store_host=self.store_host, shares=shares)

    def start(self) -> None:
        self.sync.start()

    def close(self) -> None:
        self.sync.close()
        self.peers.close()
