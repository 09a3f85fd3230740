"""A shard's start-up sync against a topic deleted through it (DEC-store-shards,
``cluster/sync.py``): it never takes back a topic between its delete here and the tombstone that
says so (``ClusterState.changing``). The peer is a real store app served on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import BaseWSGIServer, make_server

from clepsydra_core.errors import TopicNotFound
from clepsydra_core.shards import ClusterShape
from clepsydra_store.app import create_app
from clepsydra_store.cluster import Cluster
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.settings import StoreSettings
from tests.unit.store.conftest import OpenStore, engine_config


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[tuple[str, MessageStore]]:
    """A one-shard store app on a free loopback port: (its URL, its store)."""
    home = tmp_path / "peer"
    settings = StoreSettings.from_env({"CLEPSYDRA_HOME": str(home),
                                       "CLEPSYDRA_STORE_DIR": str(home / "store")})
    store = MessageStore(engine_config(home / "store"))
    server: BaseWSGIServer = make_server("127.0.0.1", 0, create_app(settings, store),
                                         threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", store
    server.shutdown()
    thread.join(5)
    store.close()


def test_the_sync_takes_no_topic_between_its_delete_here_and_its_tombstone(
        open_store: OpenStore, peer: tuple[str, MessageStore]) -> None:
    peer_url, peer_store = peer
    peer_store.create_topic("gone", 1)  # a peer that missed the delete
    store = open_store()
    store.create_topic("gone", 1)
    cluster = Cluster(ClusterShape(shard_id=0, peers=("http://127.0.0.1:1", peer_url)), store,
                      writable=True, store_host="127.0.0.1:1")
    try:
        # the delete through this shard, in the middle: gone from the store, no tombstone yet
        with cluster.state.changing:
            assert store.delete_topic("gone")
            sync = threading.Thread(target=cluster.sync.run_once)
            sync.start()
            sync.join(2)  # it read the peer; it must not take the topic now
            cluster.state.mark_deleted("gone", 1)
        sync.join(30)
        assert not sync.is_alive()
        with pytest.raises(TopicNotFound):
            store.get_topic("gone")
        # and a topic it lacks and never deleted is taken
        peer_store.create_topic("new", 2)
        assert cluster.sync.run_once()
        assert len(store.get_topic("new").queues) == 2
    finally:
        cluster.close()
