"""PushConsumer: subscribe, and the listener is called with messages as they arrive.

    consumer = PushConsumer("order-service", store_url, retry_url)
    consumer.subscribe("orders", "created || paid")
    consumer.register_concurrent(on_messages)       # or register_orderly(...)
    consumer.start()
    ...
    consumer.shutdown()

Clustering (default): the consumer heartbeats to the store every ``heartbeat_interval_s`` and
rebalances on every answer (C1); it subscribes to ``%RETRY%<group>`` itself (R15) and sends
failed messages back (R1, R9). Broadcasting: every queue, progress in a local file (C2), no
retries (R14). A pull loop per owned queue feeds a bounded process queue and the consume pool;
the committed offset follows C4 and is written every ``persist_interval_s`` and when a queue
is dropped. See :mod:`clepsydra_client.consumer.rebalance_service` for the hand-over rules.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clepsydra_client.consumer.consume_service import (
    ConcurrentConsumeService,
    ConsumeService,
    ConsumeSettings,
    OrderlyConsumeService,
    Stats,
)
from clepsydra_client.consumer.listener import (
    ConcurrentListener,
    ConsumeFromWhere,
    MessageModel,
    OrderlyListener,
)
from clepsydra_client.consumer.offsets import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from clepsydra_client.consumer.pulling import (
    DEFAULT_HOLD_MS,
    DEFAULT_LINGER_MS,
    DEFAULT_THREADS,
    PullSettings,
    QueuePuller,
)
from clepsydra_client.consumer.rebalance import AllocateStrategy, AverageStrategy
from clepsydra_client.consumer.rebalance_service import RebalanceService
from clepsydra_client.consumer.sendback import SendBack
from clepsydra_client.consumer.tags import TagExpression
from clepsydra_client.consumer.thread_pools import ScheduledPool, WorkerPool
from clepsydra_client.ids import local_ip, new_client_id
from clepsydra_client.message import MessageQueue
from clepsydra_client.routing import Router
from clepsydra_client.settings import ensure_tracing
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, ConfigError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.messages import MAX_PULL_WAIT_MS

logger = logging.getLogger(__name__)


BROADCASTING_DEFAULT_INSTANCE = "DEFAULT"
"""The instance name a broadcasting consumer's progress file is kept under when none is set
(RocketMQ's default instanceName): a restarted consumer finds its progress. Several
broadcasting consumers of one group on one machine each need their own ``instance_name``."""

@dataclass(frozen=True, slots=True)
class PushSettings:
    """Every knob of a push consumer, with RocketMQ's defaults where it has one."""

    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST
    young_queue_limit: int = 100_000
    """With LAST, a queue with no committed offset that never lost a message and holds at most
    this many starts at 0 instead of its end (RocketMQ's rule for a new group); 0: never."""
    strategy: AllocateStrategy = field(default_factory=AverageStrategy)
    consume_threads: int = 20
    consume_batch_size: int = 1
    pull_batch_size: int = 32
    pull_threads: int = DEFAULT_THREADS
    """The pull loops' threads; a pull held by the store keeps one busy (at most
    ``pull_threads - 1`` are held at once)."""
    pull_threshold_per_queue: int = 1000
    """Flow control: no pull while more than this many messages of a queue are unfinished
    (RocketMQ's ``pullThresholdForQueue``; DEC-flow-control-over)."""
    max_span: int = 2000
    """Flow control (concurrent): no pull while oldest unfinished and newest pulled are
    further apart than this."""
    pull_idle_max_s: float = 0.2
    """An empty pull not held by the store waits 10 ms, doubling up to this, before pulling
    the queue again."""
    pull_hold_ms: int = DEFAULT_HOLD_MS
    """A pull asks the store to hold it up to this long while its queue has nothing new,
    answering as soon as a message is appended (DEC-pull-hold); at most
    ``pull_threads - 1`` pulls are held at once. 0: no hold (the back-off only)."""
    pull_linger_ms: int = DEFAULT_LINGER_MS
    """After a pull that took its queue's last messages, the next pull waits this long, so
    that messages arriving meanwhile come in one pull (0: at once, one held pull woken per
    append)."""
    heartbeat_interval_s: float = 5.0
    persist_interval_s: float = 5.0
    consume_timeout_s: float = 15 * 60.0
    max_reconsume_times: int | None = None
    """None: 16 for concurrent (the group's setting applies), unlimited for orderly (R5)."""
    suspend_time_ms: int = 1000
    local_retry_delay_s: float = 5.0
    drop_wait_s: float | None = None
    """How long a dropped queue waits for its running listeners before committing;
    default the heartbeat interval."""
    handover_grace_s: float | None = None
    """How long a newly owned queue that another live consumer held waits before its first
    pull; default 2 x heartbeat interval + drop wait + 0.2 s."""
    lock_renew_interval_s: float = 20.0
    """Orderly, clustering: how often the store's queue locks are renewed (RocketMQ's 20 s;
    the store frees a lock after ``CLEPSYDRA_STORE_LOCK_EXPIRY_S``, 60 s, and the consumer
    stops consuming a queue half of that after its last successful lock;
    DEC-orderly-queue-locks)."""
    instance_name: str | None = None
    """Names this consumer (its client id, and its broadcasting progress file)."""
    offset_dir: Path | None = None
    """Broadcasting progress folder (default ``~/.clepsydra/offsets``)."""
    shutdown_wait_s: float = 10.0

    def validate(self) -> None:
        for name in ("consume_threads", "consume_batch_size", "pull_batch_size", "pull_threads",
                     "pull_threshold_per_queue"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 1 <= self.pull_batch_size <= 1000:
            raise ConfigError(f"pull_batch_size must be 1..1000, got {self.pull_batch_size}")
        if self.pull_linger_ms < 0:
            raise ConfigError(f"pull_linger_ms must be at least 0, got {self.pull_linger_ms}")
        if not 0 <= self.pull_hold_ms <= MAX_PULL_WAIT_MS:
            raise ConfigError(f"pull_hold_ms must be 0..{MAX_PULL_WAIT_MS}, "
                              f"got {self.pull_hold_ms}")
        for name in ("heartbeat_interval_s", "persist_interval_s", "consume_timeout_s",
                     "lock_renew_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def effective_drop_wait_s(self) -> float:
        return self.heartbeat_interval_s if self.drop_wait_s is None else self.drop_wait_s

    @property
    def effective_grace_s(self) -> float:
        if self.handover_grace_s is not None:
            return self.handover_grace_s
        return 2 * self.heartbeat_interval_s + self.effective_drop_wait_s + 0.2


class PushConsumer:
    def __init__(self, group: str, store_url: str, retry_url: str | None = None, *,
                 settings: PushSettings | None = None, timeout_s: float = 10.0,
                 token: str | None = None, **overrides: Any) -> None:
        from clepsydra_core.validation import validate_group_name

        self.group = validate_group_name(group)
        base = settings or PushSettings()
        if overrides:
            from dataclasses import replace

            base = replace(base, **overrides)
        base.validate()
        self.settings = base
        self.client_id = new_client_id(base.instance_name)
        ensure_tracing()
        self.store = HttpClient(store_url, timeout_s=timeout_s, service="store", token=token)
        self.router = Router(self.store)
        """Where each queue's store shard answers (DEC-store-shards)."""
        self.retry = (HttpClient(retry_url, timeout_s=timeout_s, service="retry service",
                                 token=token)
                      if retry_url else None)
        self.subscriptions: dict[str, TagExpression] = {}
        self.stats = Stats()
        self._service: ConsumeService | None = None
        self._listener: tuple[str, Any] | None = None
        self._started = False
        self._lock = threading.Lock()
        self.offset_store: OffsetStore = self._offset_store()
        self._pull_timers = ScheduledPool(base.pull_threads, f"pull-{self.group}")
        self._timers = ScheduledPool(1, f"consumer-{self.group}")
        self._executor: WorkerPool | None = None
        self.puller: QueuePuller | None = None
        self.rebalance: RebalanceService | None = None

    # ---- configuration -------------------------------------------------------------------

    @property
    def clustering(self) -> bool:
        return self.settings.message_model == MessageModel.CLUSTERING

    @property
    def orderly(self) -> bool:
        """An orderly listener is registered."""
        return self._listener is not None and self._listener[0] == "orderly"

    def _offset_store(self) -> OffsetStore:
        if self.clustering:
            return RemoteOffsetStore(self.store, self.group, self.router)
        # keyed by a name that survives a restart (RocketMQ keeps instanceName DEFAULT in
        # broadcasting mode), not by the client id, which carries the pid (C2)
        folder = self.settings.offset_dir or Path.home() / ".clepsydra" / "offsets"
        instance = self.settings.instance_name or BROADCASTING_DEFAULT_INSTANCE
        name = re.sub(r"[^A-Za-z0-9_.@-]", "_", f"{local_ip()}@{instance}")
        return LocalOffsetStore(folder / self.group / f"{name}.json", self.group)

    def subscribe(self, topic: str, expression: str = "*") -> PushConsumer:
        """Subscribe to a topic with a tag expression (``*`` or ``a || b``, C3)."""
        from clepsydra_core.validation import check_consumable, validate_topic_name

        validate_topic_name(topic)
        check_consumable(topic)
        if naming.is_dlq_topic(topic):
            raise ConfigError(f"{topic}: dead-letter topics are never consumed automatically "
                              "(R16); inspect them with `clepsydra dlq list`")
        with self._lock:
            self.subscriptions[topic] = TagExpression.parse(expression)
        return self

    def unsubscribe(self, topic: str) -> None:
        with self._lock:
            self.subscriptions.pop(topic, None)

    def register_concurrent(self, listener: ConcurrentListener) -> ConcurrentListener:
        """Use ``listener`` for concurrent consumption (usable as a decorator)."""
        self._listener = ("concurrent", listener)
        return listener

    def register_orderly(self, listener: OrderlyListener) -> OrderlyListener:
        """Use ``listener`` for orderly consumption (R12; usable as a decorator)."""
        self._listener = ("orderly", listener)
        return listener

    def all_subscriptions(self) -> dict[str, TagExpression]:
        """The subscriptions, with ``%RETRY%<group>`` added in clustering mode (R15)."""
        with self._lock:
            subs = dict(self.subscriptions)
        if self.clustering:
            subs.setdefault(naming.retry_topic(self.group), TagExpression.parse("*"))
        return subs

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> PushConsumer:
        if self._started:
            return self
        if self._listener is None:
            raise ConfigError("register a listener (register_concurrent or register_orderly) "
                              "before start()")
        if not self.subscriptions:
            raise ConfigError("subscribe to at least one topic before start()")
        s = self.settings
        kind, listener = self._listener
        orderly = kind == "orderly"
        self._executor = WorkerPool(s.consume_threads, f"consume-{self.group}")
        sendback = SendBack(self.group, self.client_id, store=self.store, retry=self.retry,
                            router=self.router)
        consume_settings = ConsumeSettings(
            group=self.group, client_id=self.client_id, model=s.message_model,
            batch_size=s.consume_batch_size, max_reconsume_times=s.max_reconsume_times,
            consume_timeout_s=s.consume_timeout_s, suspend_time_ms=s.suspend_time_ms,
            local_retry_delay_s=s.local_retry_delay_s)
        common: dict[str, Any] = {"executor": self._executor, "timers": self._timers,
                                  "sendback": sendback, "stats": self.stats}
        service: ConsumeService
        if orderly:
            service = OrderlyConsumeService(listener, consume_settings, **common)
        else:
            service = ConcurrentConsumeService(listener, consume_settings, **common)
        self._service = service
        self.puller = QueuePuller(
            self.store, self._pull_timers, service, self.stats,
            PullSettings(batch_size=s.pull_batch_size, threshold=s.pull_threshold_per_queue,
                         max_span=0 if orderly else s.max_span, idle_max_s=s.pull_idle_max_s,
                         orderly=orderly, hold_ms=s.pull_hold_ms, threads=s.pull_threads,
                         linger_ms=s.pull_linger_ms), self.router)
        self.rebalance = RebalanceService(self, self.puller, self._timers)
        self._pull_timers.start()
        self._timers.start()
        self._started = True
        self._timers.schedule(self._heartbeat_tick)
        self._timers.schedule(self._persist_tick, s.persist_interval_s)
        if self.rebalance.locking:  # DEC-orderly-queue-locks
            self._timers.schedule(self._lock_tick, s.lock_renew_interval_s)
        if not orderly:  # R13 in both models; broadcasting skips, R14
            self._timers.schedule(self._timeout_tick, self._timeout_scan_s)
        logger.info("consumer started group=%s client_id=%s model=%s subscriptions=%s",
                    self.group, self.client_id, s.message_model,
                    {t: str(e) for t, e in self.all_subscriptions().items()})
        return self

    @property
    def _timeout_scan_s(self) -> float:
        return min(max(self.settings.consume_timeout_s / 4, 0.05), 60.0)

    def _heartbeat_tick(self) -> None:
        if not self._started or self.rebalance is None:
            return
        try:
            self.rebalance.heartbeat_and_rebalance()
        except ClepsydraError as exc:
            logger.warning("heartbeat/rebalance failed group=%s client_id=%s error=%s "
                           "(keeping the queues owned so far)", self.group, self.client_id, exc)
        except Exception:
            logger.exception("heartbeat/rebalance failed group=%s client_id=%s", self.group,
                             self.client_id)
        self._timers.schedule(self._heartbeat_tick, self.settings.heartbeat_interval_s)

    def _lock_tick(self) -> None:
        if not self._started or self.rebalance is None:
            return
        try:
            self.rebalance.renew_locks()
        except Exception:
            logger.exception("queue lock renewal failed group=%s client_id=%s", self.group,
                             self.client_id)
        self._timers.schedule(self._lock_tick, self.settings.lock_renew_interval_s)

    def _persist_tick(self) -> None:
        if not self._started:
            return
        try:
            self.persist_offsets()
        except ClepsydraError:
            pass  # logged per queue by the offset store; the next period tries again
        except Exception:
            logger.exception("committing offsets failed group=%s", self.group)
        self._timers.schedule(self._persist_tick, self.settings.persist_interval_s)

    def _timeout_tick(self) -> None:
        if not self._started or self.puller is None:
            return
        service = self._service
        if isinstance(service, ConcurrentConsumeService):
            for pq in self.puller.active():
                try:
                    service.expire(pq)
                except Exception:
                    logger.exception("consume-timeout scan failed queue=%s", pq.queue)
        self._timers.schedule(self._timeout_tick, self._timeout_scan_s)

    def persist_offsets(self) -> None:
        """Commit the C4 offset of every owned queue now."""
        if self.puller is None:
            return
        queues = []
        for pq in self.puller.active():
            if not pq.lock_held():
                continue  # its lock lapsed: another may own it now (DEC-orderly-queue-locks)
            self.offset_store.update(pq.queue, pq.committable())
            queues.append(pq.queue)
        self.offset_store.persist(queues)

    def owned_queues(self) -> list[MessageQueue]:
        """Queues this consumer pulls now (or will, after a hand-over grace)."""
        return self.rebalance.owned() if self.rebalance else []

    @property
    def subscription_consistent(self) -> bool:
        """False when the store reports that the group's consumers subscribe differently (C5)."""
        return self.rebalance.consistent if self.rebalance else True

    @property
    def subscription_mismatches(self) -> list[Any]:
        return self.rebalance.mismatches if self.rebalance else []

    def shutdown(self) -> None:
        """Stop pulling, let running listeners finish (``shutdown_wait_s``), commit progress,
        unregister from the group."""
        if not self._started:
            return
        self._started = False
        self._timers.stop()
        # a pull held by the store is not waited for: its answer is dropped (pulling.py)
        self._pull_timers.stop(skip=self.puller.stop() if self.puller is not None else ())
        if self._service is not None:
            self._service.stopped = True  # queued batches are not started any more
        deadline = time.monotonic() + self.settings.shutdown_wait_s
        if self.puller is not None:
            self.puller.stop_all(self.settings.shutdown_wait_s)
        if self.rebalance is not None:  # queues given up whose listeners still run
            self.rebalance.finish_drops(max(deadline - time.monotonic(), 0.0))
        committed = False
        try:
            self.persist_offsets()
            committed = True
        except ClepsydraError as exc:
            logger.warning("final offset commit failed group=%s error=%s", self.group, exc)
        except Exception:
            logger.exception("final offset commit failed group=%s", self.group)
        if self.rebalance is not None and committed:
            self.rebalance.unlock_idle()  # uncommitted: the locks expire instead
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if self.rebalance is not None:
            self.rebalance.unregister()
        self.router.close()
        self.store.close()
        if self.retry is not None:
            self.retry.close()
        logger.info("consumer stopped group=%s client_id=%s", self.group, self.client_id)

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
