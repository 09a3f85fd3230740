"""The whole retry ladder with the real scheduler delivering each retry (all-1s level table):
a message fails 17 times, is retried 16 times at levels 3..18 and ends in the DLQ with its
failure history intact (SPEC R5-R8, R15, R16, D4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_core import naming
from clepsydra_core import properties as P
from tools.processes import Process

if TYPE_CHECKING:
    from tests.integration.retry.conftest import RetryStack

pytestmark = pytest.mark.integration


def test_sixteen_retries_then_the_dlq(stack: RetryStack, scheduler: list[Process],
                                      names: Callable[[str], str]) -> None:
    # SPEC R5 (default 16), R6, R7 (levels 3 + reconsumeTimes), R8, R15, R16 failure history
    group, topic = names("G"), names("T")
    stack.put_group(group)
    stack.create_topic(topic)
    sent = stack.produce(topic, "ladder body", tags="L", keys="ladder-key",
                         properties={"app": "kept"})
    message: dict[str, Any] = stack.message(sent["commitLogOffset"])
    trace_id = message["properties"][P.TRACEPARENT].split("-")[1]
    retry_topic = naming.retry_topic(group)
    levels: list[int] = []
    for attempt in range(16):
        result = stack.ok_send_back(group, commitLogOffset=message["commitLogOffset"],
                                    reason=f"RuntimeError: attempt {attempt}",
                                    consumerId=f"consumer-{attempt % 2}")
        assert result["outcome"] == "RETRY", (attempt, result)
        levels.append(result["delayLevel"])
        # the scheduler hands the retry to %RETRY%<group> after 1 s (D4)
        message = stack.wait_message(retry_topic, 0, attempt)
        assert message["reconsumeTimes"] == attempt + 1
        assert message["properties"][P.RETRY_TOPIC] == topic  # SPEC R15: original visible
        assert P.DELAY not in message["properties"]
    assert levels == list(range(3, 19))

    last = stack.ok_send_back(group, commitLogOffset=message["commitLogOffset"],
                              reason="RuntimeError: attempt 16", consumerId="consumer-0")
    assert last["outcome"] == "DLQ" and last["topic"] == naming.dlq_topic(group)
    dead = stack.by_msg_id(last["msgId"])
    props = dead["properties"]
    assert dead["topic"] == naming.dlq_topic(group) and dead["reconsumeTimes"] == 17
    assert dead["body"] == "ladder body" and dead["tags"] == "L" and props["app"] == "kept"
    assert props[P.DLQ_REASON] == "max_reconsume_times"
    assert props[P.ORIGIN_MESSAGE_ID] == sent["msgId"] and props[P.RETRY_TOPIC] == topic
    assert props[P.TRACEPARENT].split("-")[1] == trace_id  # one trace for the whole life

    history = json.loads(props[P.FAILURE_HISTORY])
    assert [h["reconsumeTimes"] for h in history] == list(range(17))
    assert [h["reason"] for h in history] == [f"RuntimeError: attempt {n}" for n in range(17)]
    assert [h["consumer"] for h in history] == [f"consumer-{n % 2}" for n in range(17)]
    times = [h["time"] for h in history]
    assert times == sorted(times) and times[-1] - times[0] >= 15_000  # 16 waits of >= 1 s

    shown = stack.http.get(f"{stack.retry.url}/v1/groups/{group}/dlq/{last['msgId']}").json()
    assert shown["failureHistory"] == history and shown["attempts"] == 17
    assert shown["originTopic"] == topic and shown["dlqReason"] == "max_reconsume_times"
