"""What a worker process holds for its level tasks: settings, the Redis offset store, its
identity in the leases (DEC-scheduler-lease), the stop flag set at shutdown, and the glue that
runs one level's delivery and chains the next run, for every store shard."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.runtime.shard_map import ShardMap
from clepsydra_scheduler.delivery import (
    DeliveryConfig,
    LevelDelivery,
    RunOutcome,
    RunReport,
    SystemClock,
)
from clepsydra_scheduler.handover_client import HttpHandoverApi
from clepsydra_scheduler.level_state import RedisLevelState, RedisTimerLease
from clepsydra_scheduler.ports import (
    LeaseToken,
    LevelStateUnavailable,
    StoreCallFailed,
    WorkerIdentity,
)
from clepsydra_scheduler.settings import SchedulerSettings
from clepsydra_scheduler.timer_delivery import TimerConfig, TimerDelivery, TimerRunReport

logger = logging.getLogger(__name__)

Requeue = Callable[[str], None]
"""Enqueue the level's next run, handing it the lease token."""
Kick = Callable[[int], None]
"""Enqueue a new run (a keep-alive) of the same level, or of the timers, for a store shard."""


class SchedulerRuntime:
    """Every worker serves every store shard (DEC-store-shards): each level, and the timers,
    run once per shard, leased and tracked under that shard's keys (DEC-shard-keys). Beat's
    keep-alives name no shard (shard 0's runs); such a run first enqueues one for each other
    shard whose run holds no lease, or whose lease an earlier process of this worker holds
    (DEC-scheduler-lease: taken back at once), so beat's schedule does not change with the
    cluster's size and a new shard is served within a keep-alive of the membership naming it.
    A starting worker's kick names every shard's run itself (DEC-scheduler-restart-kick)."""

    def __init__(self, settings: SchedulerSettings,
                 ready: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop = threading.Event()
        self.ready = ready or threading.Event()
        """Set while the worker consumes its queues (its /healthz says so)."""
        self._lock = threading.Lock()
        self._state: RedisLevelState | None = None
        self._worker_lock = threading.Lock()
        self._worker: WorkerIdentity | None = None
        self._shards: ShardMap | None = None

    @property
    def level_state(self) -> RedisLevelState:
        with self._lock:
            if self._state is None:
                self._state = RedisLevelState.from_url(self.settings.common.effective_redis_url)
            return self._state

    def state_of(self, shard: int) -> RedisLevelState:
        """One store shard's leases, progress and statistics (shard 0's: a one-store stack's)."""
        return self.level_state.of_shard(shard)

    @property
    def shards(self) -> ShardMap:
        """The store cluster's membership, read from CLEPSYDRA_STORE_URL every 30 s."""
        with self._lock:
            if self._shards is None:
                self._shards = ShardMap(HttpClient(
                    self.settings.common.store_url, timeout_s=self.settings.store_timeout_s,
                    connect_timeout_s=2.0, service="store", env_proxies=False), ask=True)
            return self._shards

    def store_url(self, shard: int) -> str:
        """Where shard ``shard`` answers (CLEPSYDRA_STORE_URL for a one-store stack)."""
        if shard == 0 and not self.shards.clustered:
            return self.settings.common.store_url
        member = self.shards.member(shard)
        if member is None:
            raise StoreCallFailed(f"no store shard {shard} in the cluster")
        return member.url

    def needs_run(self, holder: str | None, worker: WorkerIdentity) -> bool:
        """Whether a shard's lease (its holder's token) wants a new run: none holds it, or an
        earlier process of this worker does (a restart takes it back at once)."""
        if holder is None:
            return True
        held = LeaseToken.decode(holder)
        return held is not None and held.name == worker.name and \
            held.incarnation < worker.incarnation

    def kick_shards(self, kick: Kick, holder: Callable[[int], str | None],
                    worker: WorkerIdentity, what: str) -> None:
        """A run naming no shard that no predecessor handed its lease to (beat's keep-alive;
        a starting worker's kick when the membership was unreadable): a new run for every
        other shard that :meth:`needs_run`; what fails here is logged, the run goes on."""
        try:
            others = [m.id for m in self.shards.members() if m.id != 0]
        except ClepsydraError as exc:
            logger.warning("store cluster membership not readable for %s: %s", what, exc)
            return
        for shard in others:
            try:
                if self.needs_run(holder(shard), worker):
                    kick(shard)
            except (LevelStateUnavailable, ClepsydraError) as exc:
                logger.warning("could not start %s shard=%d: %s", what, shard, exc)
            except Exception:
                logger.exception("could not start %s shard=%d", what, shard)

    @property
    def worker(self) -> WorkerIdentity:
        """This process in the leases (DEC-scheduler-lease): the settings' worker name and an
        incarnation number taken from Redis once (LevelStateUnavailable while it is away)."""
        with self._worker_lock:
            if self._worker is None:
                self._worker = WorkerIdentity(self.settings.worker_name,
                                              self.level_state.incarnation())
                logger.info("scheduler worker name=%s incarnation=%d", self._worker.name,
                            self._worker.incarnation)
            return self._worker

    def delivery_config(self, level: int) -> DeliveryConfig:
        s = self.settings
        return DeliveryConfig(level=level, delay_ms=s.levels.delay_ms(level), run_s=s.run_s,
                              lease_ms=s.lease_ms, batch=s.batch, poll_ms=s.poll_ms,
                              backoff_s=s.backoff_s)

    def _identity(self, what: str) -> WorkerIdentity | None:
        try:
            return self.worker
        except LevelStateUnavailable as exc:
            logger.warning("offset store unavailable at run start %s: %s", what, exc.message)
            return None

    def deliver(self, level: int, token: str | None, requeue: Requeue,
                shard: int | None = None, kick: Kick | None = None) -> str:
        """One run of a level of a store shard (the body of the ``deliver_level`` task); one
        that names no shard (beat's keep-alive) is shard 0's and first starts the other shards'
        runs (``kick``)."""
        if level not in self.settings.levels.levels():
            logger.error("no such delay level level=%d (table: %s)", level, self.settings.levels)
            return "unknown_level"
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        where = f"level={level}" + (f" shard={shard}" if shard else "")
        worker = self._identity(where)
        if worker is None:
            return RunOutcome.NOT_ACQUIRED.value
        if token is None and shard is None and kick is not None:
            self.kick_shards(kick, lambda s: self.state_of(s).holder(level), worker, where)
        shard = shard or 0
        try:
            url = self.store_url(shard)
        except (StoreCallFailed, ClepsydraError) as exc:
            logger.warning("%s: %s", where, exc)
            return RunOutcome.NOT_ACQUIRED.value
        store = HttpHandoverApi(url, timeout_s=self.settings.store_timeout_s)
        state = self.state_of(shard)
        try:
            while True:
                delivery = LevelDelivery(self.delivery_config(level), store, state,
                                         SystemClock(self.stop), worker=worker)
                report = delivery.run(token)
                if not self._chain(delivery, report, requeue, where):
                    return report.outcome.value
                token = report.token
        finally:
            store.close()

    def deliver_timers(self, token: str | None, requeue: Requeue, shard: int | None = None,
                       kick: Kick | None = None) -> str:
        """One run of a store shard's timers' delivery (the body of the ``deliver_timers``
        task); one that names no shard (beat's keep-alive) is shard 0's and first starts the
        other shards' (``kick``)."""
        if self.stop.is_set():
            return RunOutcome.STOPPED.value
        where = "timers" + (f" shard={shard}" if shard else "")
        worker = self._identity(where)
        if worker is None:
            return RunOutcome.NOT_ACQUIRED.value
        if token is None and shard is None and kick is not None:
            self.kick_shards(kick, lambda s: RedisTimerLease(self.state_of(s)).holder(), worker,
                             where)
        shard = shard or 0
        s = self.settings
        try:
            url = self.store_url(shard)
        except (StoreCallFailed, ClepsydraError) as exc:
            logger.warning("%s: %s", where, exc)
            return RunOutcome.NOT_ACQUIRED.value
        store = HttpHandoverApi(url, timeout_s=s.store_timeout_s)
        try:
            while True:
                delivery = TimerDelivery(TimerConfig(run_s=s.run_s, lease_ms=s.lease_ms,
                                                     batch=s.batch, backoff_s=s.backoff_s,
                                                     interval_ms=s.timer_interval_ms),
                                         store, RedisTimerLease(self.state_of(shard)),
                                         SystemClock(self.stop), worker=worker)
                report = delivery.run(token)
                if not self._chain(delivery, report, requeue, where):
                    return report.outcome.value
                token = report.token
        finally:
            store.close()

    def _chain(self, delivery: LevelDelivery | TimerDelivery,
               report: RunReport | TimerRunReport,
               requeue: Requeue, what: str) -> bool:
        """After a run: a run that ended hands its lease token to the next run (requeued);
        when the next run cannot be enqueued (the broker away) it runs here, in this task
        (True), rather than leave the level to a keep-alive; stopping releases the lease."""
        if report.outcome is not RunOutcome.RUN_ENDED:
            return False
        if self.stop.is_set():
            delivery.release()
            return False
        try:
            requeue(report.token)
        except Exception:
            logger.exception("could not enqueue the next run %s; it runs in this task", what)
            return not self.stop.is_set()
        return False
