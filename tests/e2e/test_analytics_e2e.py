"""The analytics service on the real local stack (`python -m tools.stack`): a known workload of
delayed messages, messages failing once and messages failing until the DLQ with a reason →
export → jobs → the report's numbers equal the workload exactly; the schedule makes a report
on its own."""

from __future__ import annotations

import io
import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import requests

from clepsydra_client.cli.main import main as cli_main
from clepsydra_client.consumer.listener import ConsumeFromWhere, ConsumeResult
from clepsydra_client.consumer.push import PushConsumer
from clepsydra_client.message import Message
from tests.fixtures.stack import RunningStack
from tools.processes import wait_until

pytestmark = pytest.mark.e2e

LEVELS = (1, 2, 3)
PER_LEVEL = 8  # N = 24 delayed messages
FAIL_ONCE = 4  # k
FAIL_ALWAYS = 3  # j, dead-lettered after MAX_RETRIES retries
MAX_RETRIES = 2
REASON = "ValueError: card declined"


def _cli(analytics_url: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["--analytics-url", analytics_url, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_report_numbers_equal_the_workload(
        start_stack: Callable[..., RunningStack]) -> None:
    stack = start_stack(CLEPSYDRA_DELAY_LEVELS="1s 2s 3s",
                        CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S="600",  # the run must ask for it
                        CLEPSYDRA_ANALYTICS_EXPORT_POLL_S="0.2",
                        CLEPSYDRA_ANALYTICS_SCHEDULE_S="20",
                        CLEPSYDRA_ANALYTICS_SPARK_MEMORY="1g",
                        CLEPSYDRA_ANALYTICS_SHUFFLE_PARTITIONS="2")
    # the address table's row ("  analytics http://..."), not the analytics' echoed log lines
    # ("analytics | ...")
    analytics_url = next(line.split()[-1] for line in stack.output().splitlines()
                         if re.fullmatch(r"  analytics +http://\S+", line))
    assert requests.post(f"{stack.store_url}/v1/topics", json={"name": "orders", "queues": 2},
                         timeout=10).status_code == 201
    assert requests.put(f"{stack.retry_url}/v1/groups/billing",
                        json={"retryMaxTimes": MAX_RETRIES}, timeout=10).status_code in (200, 201)

    bodies = [f"ok-{level}-{i}" for level in LEVELS for i in range(PER_LEVEL)]
    kinds = ["fail-once"] * FAIL_ONCE + ["fail-always"] * FAIL_ALWAYS
    bodies = [f"{kinds[i]}-{b}" if i < len(kinds) else b for i, b in enumerate(bodies)]
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def listener(messages: list[Message], _context: Any) -> ConsumeResult:
        for m in messages:
            with lock:
                seen[m.text] += 1
            if m.text.startswith("fail-always") or (m.text.startswith("fail-once")
                                                     and m.reconsume_times == 0):
                raise ValueError("card declined")
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("billing", stack.store_url, stack.retry_url,
                            consume_from_where=ConsumeFromWhere.FIRST, heartbeat_interval_s=0.3,
                            persist_interval_s=0.3, pull_idle_max_s=0.05)
    consumer.subscribe("orders", "*")
    consumer.register_concurrent(listener)
    consumer.start()
    try:
        messages = [{"body": b, "delayLevel": LEVELS[n // PER_LEVEL]}
                    for n, b in enumerate(bodies)]
        resp = requests.post(f"{stack.store_url}/v1/topics/orders/messages/batch",
                             json={"messages": messages}, timeout=10)
        assert resp.status_code == 201, resp.text

        def settled() -> bool:
            with lock:
                done = all(seen[b] >= 1 for b in bodies)
                once = all(seen[b] == 2 for b in bodies if b.startswith("fail-once"))
                always = all(seen[b] == MAX_RETRIES + 1 for b in bodies
                             if b.startswith("fail-always"))
            dlq = requests.get(f"{stack.retry_url}/v1/groups/billing/dlq", timeout=10).json()
            return done and once and always and len(dlq["messages"]) == FAIL_ALWAYS

        wait_until(settled, 120, interval_s=0.5, what="the workload to settle")
    finally:
        consumer.shutdown()

    code, out, err = _cli(analytics_url, "report", "run", "--since", "1h", "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["report"].endswith("report.html")

    count_per_level: Counter[int] = Counter()
    for row in result["jobs"]["lateness"]:
        count_per_level[row["level"]] += row["count"]
        assert row["early"] == 0 and row["pending"] == 0
        assert row["p50Ms"] <= row["p95Ms"] <= row["p99Ms"] <= row["maxMs"]
    # every retry waits at level 3 + reconsumeTimes, clamped to the table's max (3)
    assert count_per_level == {1: PER_LEVEL, 2: PER_LEVEL,
                               3: PER_LEVEL + FAIL_ONCE + MAX_RETRIES * FAIL_ALWAYS}

    [funnel] = result["jobs"]["funnel"]
    assert {k: funnel[k] for k in ("group", "topic", "total", "firstTime", "afterRetries",
                                   "deadLettered")} == {
        "group": "billing", "topic": "orders", "total": len(bodies),
        "firstTime": len(bodies) - FAIL_ONCE - FAIL_ALWAYS, "afterRetries": {"1": FAIL_ONCE},
        "deadLettered": FAIL_ALWAYS}

    [dead] = result["jobs"]["dead-letters"]
    assert (dead["group"], dead["topic"], dead["reason"], dead["count"]) == (
        "billing", "orders", REASON, FAIL_ALWAYS)
    assert dead["oldestAgeS"] >= 0

    per_topic: Counter[str] = Counter()
    for row in result["jobs"]["throughput"]:
        per_topic[row["topic"]] += row["messages"]
    assert per_topic == {"orders": len(bodies),
                         "%RETRY%billing": FAIL_ONCE + MAX_RETRIES * FAIL_ALWAYS,
                         "%DLQ%billing": FAIL_ALWAYS}

    code, out, _ = _cli(analytics_url, "export", "status")
    assert code == 0
    lines = dict(line.split("  ", 1) for line in out.strip().splitlines())
    assert set(lines) == {"orders", "%RETRY%billing", "%DLQ%billing"}
    assert lines["orders"].startswith("lag=0 exported=24")

    page = requests.get(f"{analytics_url}/v1/reports/{result['runId']}/report.html", timeout=10)
    assert page.status_code == 200 and "funnel.png" in page.text

    # the local schedule (every 20 s here) makes a report on its own, in its own process
    def scheduled_run() -> bool:
        runs = requests.get(f"{analytics_url}/v1/reports", timeout=10).json()["reports"]
        return any(r["runId"] != result["runId"] for r in runs)

    wait_until(scheduled_run, 120, interval_s=1.0, what="a scheduled report run")
