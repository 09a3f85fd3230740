"""The peers' side of ``bench.peers``: a Celery app and a Dramatiq actor that record each arrival,
and the consumer loop of a plain Redis sorted set -- each run as its own process, so the bench
can kill it with SIGKILL mid-run:

    python -m bench.peers_apps celery   BROKER OUT
    python -m bench.peers_apps dramatiq BROKER OUT
    python -m bench.peers_apps zset     BROKER OUT
    python -m bench.peers_apps clepsydra STORE_URL OUT TOPIC GROUP

Every consumer appends one line ``id,intended_ms,arrival_ms`` per delivery to OUT (opened
O_APPEND, written with one ``os.write`` before the delivery is acknowledged), so a line means
"the consumer saw it": a line twice is a duplicate, a missing line a loss.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

ZSET_KEY = "peers:zset"
ZSET_POP = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
"""
"""Takes up to ARGV[2] members due by ARGV[1] (ms) atomically: the usual sorted-set delay queue."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Arrivals:
    """The OUT file of one consumer process."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, ident: int, intended_ms: int) -> None:
        os.write(self.fd, f"{ident},{intended_ms},{now_ms()}\n".encode())


def celery_app(broker: str, out: str) -> Any:
    from celery import Celery

    app = Celery("peers", broker=broker, set_as_current=False)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True,
                    worker_hijack_root_logger=False, worker_send_task_events=False,
                    worker_enable_remote_control=False)
    arrivals = Arrivals(out)

    @app.task(name="peers.arrive", ignore_result=True)  # type: ignore[untyped-decorator]
    def arrive(ident: int, intended_ms: int) -> None:
        arrivals.record(ident, intended_ms)

    return app


def dramatiq_actor(broker: str, out: str | None) -> Any:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=broker))
    arrivals = Arrivals(out) if out else None

    @dramatiq.actor(actor_name="peers_arrive", max_retries=0)  # type: ignore[untyped-decorator]
    def arrive(ident: int, intended_ms: int) -> None:
        assert arrivals is not None
        arrivals.record(ident, intended_ms)

    return arrive


def run_dramatiq(broker: str, out: str) -> None:
    import dramatiq
    from dramatiq import Worker

    dramatiq_actor(broker, out)
    worker = Worker(dramatiq.get_broker(), worker_threads=2)
    worker.start()
    try:
        while True:
            time.sleep(3600)
    finally:
        worker.stop()


def run_zset(broker: str, out: str) -> None:
    import redis

    r = redis.Redis.from_url(broker)
    pop = r.register_script(ZSET_POP)
    arrivals = Arrivals(out)
    while True:
        due = pop(keys=[ZSET_KEY], args=[now_ms(), 100])
        if not due:
            time.sleep(0.001)
            continue
        for member in due:
            ident, intended = member.decode().split(":")
            arrivals.record(int(ident), int(intended))


def run_clepsydra(store_url: str, out: str, topic: str, group: str) -> None:
    from clepsydra_client import ConsumeResult

    arrivals = Arrivals(out)

    def listener(messages: Any, _context: Any) -> ConsumeResult:
        for m in messages:
            ident, intended = m.body.decode().split(":")
            arrivals.record(int(ident), int(intended))
        return ConsumeResult.SUCCESS

    serve_consumer(store_url, topic, group, listener)


def serve_consumer(store_url: str, topic: str, group: str, listener: Any,
                   **settings: Any) -> None:
    """A ``PushConsumer`` of ``topic`` from its first message with ``listener`` (and the
    ``PushSettings`` given), until the process is stopped."""
    from clepsydra_client import ConsumeFromWhere, PushConsumer

    consumer = PushConsumer(group, store_url, consume_from_where=ConsumeFromWhere.FIRST,
                            **settings)
    consumer.subscribe(topic, "*")
    consumer.register_concurrent(listener)
    consumer.start()
    try:
        while True:
            time.sleep(3600)
    finally:
        consumer.shutdown()


def main(argv: list[str]) -> None:
    system, target, out, *rest = argv
    if system == "celery":
        celery_app(target, out).worker_main(
            ["--quiet", "worker", "-P", "solo", "-l", "WARNING", "--without-gossip",
             "--without-mingle", "--without-heartbeat"])
    elif system == "dramatiq":
        run_dramatiq(target, out)
    elif system == "zset":
        run_zset(target, out)
    elif system == "clepsydra":
        run_clepsydra(target, out, *rest)
    else:
        raise SystemExit(f"unknown system {system!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
