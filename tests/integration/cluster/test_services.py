"""The scheduler and the analytics exporter over three store shards (DEC-store-shards,
DEC-shard-keys): every level and the timers delivered on each shard under that shard's keys
(shard 0's those of a one-store stack), and every shard's queues exported once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kombu
import pytest
import redis

from clepsydra_core import naming
from clepsydra_core.msgid import shard_of_offset_msg_id
from clepsydra_scheduler import tasks
from clepsydra_scheduler.celery_app import create_celery, level_queues
from clepsydra_scheduler.runtime import SchedulerRuntime
from clepsydra_scheduler.settings import SchedulerSettings
from tests.integration.cluster.conftest import LEVELS, SHARDS, TOPIC, Cluster
from tools.processes import free_port, wait_until

pytestmark = pytest.mark.integration


def test_every_shard_s_levels_and_timers_are_delivered_on_that_shard(
        make_cluster: Callable[..., Cluster]) -> None:  # SPEC D1, D9, T1
    cluster = make_cluster(scheduler=True)
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 1}).raise_for_status()
    due: dict[int, list[int]] = {}
    for shard in range(SHARDS):
        for level in (1, 2):
            cluster.produce(shard, TOPIC, delayLevel=level, body=f"l{level}@{shard}")
        at = int(time.time() * 1000) + 1500
        timer = cluster.produce(shard, TOPIC, deliverAt=at, body=f"t@{shard}")
        assert shard_of_offset_msg_id(timer["offsetMsgId"]) == shard
        due.setdefault(shard, []).append(at)

    def delivered(shard: int) -> list[dict[str, object]]:
        page = cluster.get(shard, f"/v1/topics/{TOPIC}/queues/0/messages",
                           params={"offset": 0, "max": 100}).json()
        return list(page["messages"])

    wait_until(lambda: all(len(delivered(s)) == 3 for s in range(SHARDS)), 30,
               what="every shard's delayed messages handed over")
    for shard in range(SHARDS):
        messages = delivered(shard)
        assert sorted(str(m["body"]) for m in messages) == [f"l1@{shard}", f"l2@{shard}",
                                                            f"t@{shard}"]
        timer = next(m for m in messages if str(m["body"]).startswith("t@"))
        assert int(str(timer["storeTimestamp"])) >= due[shard][0]  # never early (T1)
    client = redis.Redis.from_url(cluster.stack.redis_url, decode_responses=True)
    keys = set(client.keys("clepsydra:schedule:*"))
    assert naming.delay_offset_key(1) in keys  # shard 0: the keys of a one-store stack
    assert {naming.delay_offset_key(1, s) for s in (1, 2)} <= keys
    assert {naming.delay_lease_key(1, s) for s in range(SHARDS)} <= keys
    assert {naming.timer_lease_key(s) for s in range(SHARDS)} <= keys
    time.sleep(2)  # nothing handed over twice (D9)
    assert all(len(delivered(s)) == 3 for s in range(SHARDS))


def _settings(store_url: str, redis_url: str) -> SchedulerSettings:
    return SchedulerSettings.from_env({"CLEPSYDRA_STORE_URL": store_url,
                                       "CLEPSYDRA_REDIS_URL": redis_url,
                                       "CLEPSYDRA_DELAY_LEVELS": LEVELS,
                                       "CLEPSYDRA_SCHEDULER_RUN_S": "0.2"})


def _kicked(store_url: str, redis_url: str) -> list[tuple[str, dict[str, int]]]:
    """A starting worker's kick (``tasks.kick``) sent through a real Celery app to the real
    Redis, then taken as the worker takes it (its queues, its transport's options): (queue,
    keyword arguments) of each run, in the order a worker starts them."""
    settings = _settings(store_url, redis_url)
    app = create_celery(settings)
    tasks.kick(app, SchedulerRuntime(settings))
    taken: list[tuple[str, dict[str, int]]] = []

    def on_message(body: Any, message: Any) -> None:
        taken.append((message.delivery_info["routing_key"], body[1]))
        message.ack()

    queues = [app.amqp.queues[name] for name in level_queues(settings)]
    with app.connection_for_read() as conn, \
            kombu.Consumer(conn, queues, accept=["json"], callbacks=[on_message]):
        while True:
            try:
                conn.drain_events(timeout=1)
            except TimeoutError:
                return taken


def test_a_starting_worker_starts_every_shard_s_runs_once_shortest_delay_first(
        cluster: Cluster) -> None:
    # DEC-scheduler-restart-kick: every shard's timers and levels sent at once, each naming its
    # shard (none waits for shard 0's run to start it, none sent twice), taken the timers
    # first, then the levels by delay, every shard's together; the membership unreadable,
    # shard 0's runs name no shard and start the others as beat's keep-alives do
    redis_url = cluster.stack.redis_url
    queues = [naming.TIMER_QUEUE_NAME] + [naming.schedule_queue_name(level)
                                          for level in range(1, len(LEVELS.split()) + 1)]
    assert _kicked(cluster.url, redis_url) == [(queue, {"shard": shard}) for queue in queues
                                              for shard in range(SHARDS)]
    unreadable = _kicked(f"http://127.0.0.1:{free_port()}", redis_url)
    assert unreadable == [(queue, {}) for queue in queues]
    # a run naming no shard (beat's keep-alive) starts the other shards' runs that need one;
    # a run naming its shard, shard 0's included, starts none (each is a real 0.2 s run)
    runtime = SchedulerRuntime(_settings(cluster.url, redis_url))
    for shard, starts in ((None, [1, 2]), (0, []), (2, [])):
        started: list[int] = []
        runtime.deliver(1, None, lambda _token: None, shard, started.append)
        assert started == starts, shard
        started.clear()
        runtime.deliver_timers(None, lambda _token: None, shard, started.append)
        assert started == starts, shard


def test_every_shard_s_queues_are_exported_once(cluster: Cluster, tmp_path: Path) -> None:
    from clepsydra_analytics.export_files import ExportFiles
    from clepsydra_analytics.export_shards import ShardedExporter
    from clepsydra_analytics.settings import AnalyticsSettings
    from clepsydra_analytics.status import export_status

    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 2}).raise_for_status()
    for shard in range(SHARDS):
        for i in range(5 + shard):
            cluster.produce(shard, TOPIC, body=f"m{i}@{shard}")
    settings = AnalyticsSettings.from_env({
        "CLEPSYDRA_HOME": str(tmp_path / "analytics"), "CLEPSYDRA_STORE_URL": cluster.url,
        "CLEPSYDRA_REDIS_URL": cluster.stack.redis_url})
    exporter = ShardedExporter(settings)
    exporter.prepare()
    assert exporter.catch_up(60).rows_written == 5 + 6 + 7
    assert sorted(exporter.parts) == [0, 1, 2]
    again = ShardedExporter(settings)  # a restarted exporter: nothing twice
    again.prepare()
    assert again.catch_up(30).rows_written == 0
    files = ExportFiles(settings.export_uri)
    ranges = files.ranges()
    assert {r.shard for r in ranges} == {0, 1, 2}
    assert sum(r.end_offset - r.start_offset for r in ranges) == 18
    for shard in range(SHARDS):  # each shard's exporter committed on its own shard
        offsets = cluster.get(shard, f"/v1/groups/{naming.EXPORT_GROUP}/offsets").json()
        assert sum(offsets["offsets"][TOPIC].values()) == 5 + shard
    from clepsydra_analytics.store_reader import StoreReader

    (status,) = [s for s in export_status(files, StoreReader(cluster.url), settings.topics)
                 if s.topic == TOPIC]
    assert (status.queues, status.exported_rows, status.lag) == (6, 18, 0)
