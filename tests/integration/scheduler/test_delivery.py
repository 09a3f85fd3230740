"""The scheduler with real parts: redis-server, the store process, Celery worker and beat."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.naming import delay_offset_key
from clepsydra_core.runtime import telemetry
from tests.fixtures.scheduler import TOPIC, SchedulerStack, assert_each_once
from tools.processes import free_port, wait_until

pytestmark = pytest.mark.integration


def test_nothing_arrives_before_due_then_everything_once(stack: SchedulerStack) -> None:
    # SPEC D3, D4, D5, D9, D10
    metrics_port = free_port()
    stack.beat()
    stack.worker(CLEPSYDRA_SCHEDULER_METRICS_PORT=str(metrics_port))
    stored_at: dict[str, int] = {}
    for level in (1, 2, 3):
        results = stack.produce(100, level=level, prefix=f"L{level}-")
        for i, r in enumerate(results):
            assert r["topic"] == naming.SCHEDULE_TOPIC and r["queueId"] == level - 1
            stored_at[f"L{level}-{i}"] = r["storeTimestamp"]
    assert stack.api.count(TOPIC) == 0  # right after produce: nothing delivered early
    stack.wait_delivered(300)
    messages = stack.api.pull_all(TOPIC)
    assert_each_once(messages, list(stored_at))
    for m in messages:
        level = int(m["properties"][P.SCHEDULE_OFFSET].split(":")[0])
        due = stored_at[m["body"]] + level * 1_000  # table "1s 2s 3s"
        assert m["body"].startswith(f"L{level}-")
        assert int(m["properties"][P.DELIVER_TS]) == due
        assert m["storeTimestamp"] >= due  # never early
        assert P.DELAY not in m["properties"]

    status = subprocess.run([sys.executable, "-m", "clepsydra_scheduler", "status"],
                            env=stack.procs[0].env, capture_output=True, text=True, timeout=60,
                            check=True).stdout
    rows = {line.split()[0]: line.split() for line in status.splitlines()[1:]}
    assert [rows[str(lv)][8] for lv in (1, 2, 3)] == ["100", "100", "100"]  # delivered
    assert [rows[str(lv)][6] for lv in (1, 2, 3)] == ["0", "0", "0"]  # backlog
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert 'clepsydra_scheduler_delivered_total{level="2"} 100.0' in text
    assert 'clepsydra_scheduler_lateness_seconds_count{level="3"} 100.0' in text


def test_level_above_the_table_is_delivered_at_the_max_level(stack: SchedulerStack) -> None:
    # SPEC L2: level 99 -> max level (3 = 3 s)
    stack.worker()
    [result] = stack.api.produce(TOPIC, [{"body": "clamped", "delayLevel": 99}])
    assert result["queueId"] == 2
    stack.wait_delivered(1, timeout_s=30)
    [m] = stack.api.pull_all(TOPIC)
    assert m["properties"][P.SCHEDULE_OFFSET] == "3:0"
    assert int(m["properties"][P.DELIVER_TS]) == result["storeTimestamp"] + 3_000
    assert m["storeTimestamp"] >= result["storeTimestamp"] + 3_000


def test_shortened_table_delivers_old_long_delays_now(stack: SchedulerStack) -> None:
    # SPEC D3: stored under "1s 2s 30s"; the table is now "1s 2s 3s"
    stack.restart_store(levels="1s 2s 30s")
    [result] = stack.api.produce(TOPIC, [{"body": "was-30s", "delayLevel": 3}])
    tags_code = result["storeTimestamp"] + 30_000
    stack.restart_store(levels="1s 2s 3s")
    stack.worker()
    stack.wait_delivered(1, timeout_s=30)
    [m] = stack.api.pull_all(TOPIC)
    assert m["body"] == "was-30s"
    assert m["storeTimestamp"] < tags_code  # corrected: not held for the old 30 s
    assert int(m["properties"][P.DELIVER_TS]) < tags_code


def test_store_down_for_a_while_then_back_skips_nothing(stack: SchedulerStack) -> None:
    # SPEC D6: progress stays at the failed entry, retried after the back-off
    worker = stack.worker()
    stack.produce(200, level=1)
    stack.store.stop()
    wait_until(lambda: worker.log().count("store call failed level=1") >= 3, 30,
               what="the worker to retry against the stopped store")
    stack.restart_store(stop=False)
    stack.wait_delivered(200)
    assert_each_once(stack.api.pull_all(TOPIC), [f"m{i}" for i in range(200)])


def test_unbuildable_messages_are_parked_and_delivery_moves_on(stack: SchedulerStack) -> None:
    # SPEC D7. The API cannot store a delayed message without REAL_TOPIC, so the test makes
    # the real destination invalid behind the store's back: topic "Gone" is removed and topic
    # "Shrunk" loses queues from the store's topics.json while the store is stopped.
    stack.api.create_topic("Gone", 1)
    stack.api.create_topic("Shrunk", 4)
    stack.api.produce("Gone", [{"body": "to-gone", "delayLevel": 1}])
    stack.api.produce("Shrunk", [{"body": "to-q3", "delayLevel": 1, "queueId": 3}])
    stack.produce(1, level=1, prefix="fine")
    stack.store.stop()
    topics_file = stack.store_home / "store" / naming.CONFIG_DIR / naming.TOPICS_FILE
    doc = json.loads(topics_file.read_text())
    del doc["Gone"]
    doc["Shrunk"]["queues"] = 1
    topics_file.write_text(json.dumps(doc))
    stack.restart_store(stop=False)
    stack.worker()
    stack.wait_delivered(2, topic=naming.SCHEDULE_ERROR_TOPIC, timeout_s=30)
    stack.wait_delivered(1)
    parked = stack.api.pull_all(naming.SCHEDULE_ERROR_TOPIC)
    reasons = {m["body"]: m["properties"][P.SCHEDULE_ERROR] for m in parked}
    assert reasons["to-gone"].startswith("real_topic_missing")
    assert reasons["to-q3"].startswith("real_qid_out_of_range")
    assert [m["body"] for m in stack.api.pull_all(TOPIC)] == ["fine0"]
    wait_until(lambda: int(stack.redis().get(delay_offset_key(1)) or 0) == 3, 20,
               what="progress past the parked entries")


def test_progress_outside_the_queue_is_corrected(stack: SchedulerStack) -> None:
    # SPEC D8: below the minimum -> the minimum; above the maximum -> the maximum; logged
    r = stack.redis()
    r.set(delay_offset_key(1), -5)
    stack.produce(5, level=1, prefix="a")
    worker = stack.worker()
    stack.wait_delivered(5)
    assert "progress below the queue minimum level=1 progress=-5 min_offset=0" in worker.log()
    worker.stop()
    r.set(delay_offset_key(1), 1_000_000)
    worker = stack.worker(name="worker2")
    wait_until(lambda: "progress above the queue maximum level=1 progress=1000000 "
               "max_offset=5" in worker.log(), 20, what="the D8 log line")
    wait_until(lambda: r.get(delay_offset_key(1)) == "5", 20, what="progress at the maximum")
    stack.produce(3, level=1, prefix="b")
    stack.wait_delivered(8)
    assert_each_once(stack.api.pull_all(TOPIC), [f"a{i}" for i in range(5)]
                     + [f"b{i}" for i in range(3)])


def test_store_handover_spans_are_children_of_the_delivery_span(
        stack: SchedulerStack, tmp_path: Path) -> None:
    # SPEC O1: the worker sends its scheduler.deliver span's context as `traceparent`
    store_spans, worker_spans = tmp_path / "store-spans.jsonl", tmp_path / "worker-spans.jsonl"
    stack.restart_store(CLEPSYDRA_OTEL_EXPORTER=f"file:{store_spans}")
    stack.worker(CLEPSYDRA_OTEL_EXPORTER=f"file:{worker_spans}")
    stack.produce(3, level=1)
    stack.wait_delivered(3)

    def spans(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines()] \
            if path.exists() else []

    wait_until(lambda: any(s["name"] == "scheduler.deliver" for s in spans(worker_spans)), 10,
               what="the delivery span")
    deliver = [s for s in spans(worker_spans) if s["name"] == "scheduler.deliver"]
    assert sum(s["attributes"]["clepsydra.delivered"] for s in deliver) == 3
    assert {s["attributes"]["clepsydra.delay_level"] for s in deliver} == {1}
    handovers = {s["parentSpanId"]: s for s in spans(store_spans)
                 if s["name"] == "store.handover"}
    for span in deliver:
        child = handovers[span["spanId"]]
        assert child["traceId"] == span["traceId"]
        assert child["service"] == telemetry.STORE_SERVICE
        assert span["service"] == telemetry.SCHEDULER_SERVICE


def test_status_prints_prometheus_text(stack: SchedulerStack) -> None:
    # SPEC D10, O2
    worker = stack.worker()
    stack.produce(4, level=2)
    stack.wait_delivered(4)
    wait_until(lambda: stack.redis().hget(naming.delay_stats_key(2), "delivered") == "4", 10,
               what="statistics recorded")
    text = subprocess.run([sys.executable, "-m", "clepsydra_scheduler", "status",
                           "--prometheus"], env=worker.env, capture_output=True, text=True,
                          timeout=60, check=True).stdout
    assert 'clepsydra_scheduler_delivered_total{level="2"} 4.0' in text
    assert 'clepsydra_scheduler_backlog{level="2"} 0.0' in text
    assert 'clepsydra_scheduler_progress_offset{level="2"} 4.0' in text
