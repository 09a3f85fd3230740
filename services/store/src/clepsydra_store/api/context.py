"""What every route needs: the engine, the settings, the consumer registry, the orderly
consumers' queue locks, spans and metrics.

One ``StoreContext`` per app, kept in ``app.extensions["clepsydra"]``; every way in answers
through ``envelope.py`` with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from clepsydra_core.errors import NoPermission
from clepsydra_store.api.observability import Observability
from clepsydra_store.cluster import Cluster
from clepsydra_store.consumers import ConsumerRegistry
from clepsydra_store.engine.message_store import MessageStore
from clepsydra_store.queue_locks import QueueLocks
from clepsydra_store.settings import StoreSettings
from clepsydra_web.auth import Guard

EXTENSION = "clepsydra"


@dataclass(slots=True)
class StoreContext:
    settings: StoreSettings
    store: MessageStore
    consumers: ConsumerRegistry
    obs: Observability
    locks: QueueLocks
    owns_store: bool = True
    guard: Guard | None = None
    """Access control's guard (None: off), for routes whose topic is known only in the view."""
    cluster: Cluster | None = None
    """This store's shard of the cluster (DEC-store-shards; one shard by default)."""
    shards_header: tuple[str, str] | None = None
    """``X-Clepsydra-Shards`` and the cluster's size, on every answer of a store with more
    than one shard (DEC-store-shards); None with one."""

    def require_writable(self) -> None:
        """Every message write answers 403 NO_PERMISSION on a read-only store (R2)."""
        if not self.settings.engine.writable:
            raise NoPermission("the store does not accept writes "
                               "(CLEPSYDRA_STORE_WRITABLE=false)", rule="R2")

    def require_accepting(self) -> None:
        """A new message (a produce, a send-back's copy, a DLQ resend) answers 403
        NO_PERMISSION on a read-only store and on a shard being drained (R2,
        DEC-shard-drain); the scheduler's hand-over and the timers' go on there."""
        self.require_writable()
        if self.cluster is not None and self.cluster.state.draining:
            raise NoPermission(f"store shard {self.cluster.shard_id} is being drained: it "
                               "takes no new messages (send to another shard)", rule="R2")

    def close(self) -> None:
        """Close the engine if this app opened it (flushes and writes checkpoints)."""
        if self.cluster is not None:
            self.cluster.close()
        if self.owns_store:
            self.store.close()
