"""Push consumers against the real store, retry service and scheduler: tag filters (C3),
committed progress (C4), retries (R1, R5, R9, R11, R13, R15), orderly retry (R12),
broadcasting (C2, R14), consume-from-where (C1) and the trace through retries (O1)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.listener import (
    ConsumeFromWhere,
    ConsumeResult,
    MessageModel,
    OrderlyResult,
)
from clepsydra_client.consumer.pull_consumer import PullConsumer
from clepsydra_client.message import Message, MessageQueue
from clepsydra_client.producer import OutgoingMessage
from clepsydra_client.topics import fetch_topic_or_none
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.runtime import telemetry
from tools.processes import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from clepsydra_client.admin import AdminClient
    from clepsydra_client.message import Message
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import (
        ClientStack,
        Consumers,
        Names,
        Recorders,
    )

pytestmark = pytest.mark.integration


def test_tag_expression_filters_and_progress_moves_past_filtered(stack: ClientStack,
                                                                 admin: AdminClient,
                                                                 producer: Producer,
                                                                 consumers: Consumers,
                                                                 recorder: Recorders,
                                                                 names: Names) -> None:
    # SPEC C3, C4
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 2)
    rec = recorder()
    consumers(group, topic, rec, expression="paid || shipped")
    for i, tag in enumerate(["paid", "created", "shipped", "paid", "refunded", None]):
        producer.send(topic, f"m{i}", tags=tag, queue_id=i % 2)
    rec.wait_for(lambda seen: len(seen) >= 3, what="3 matching messages")
    time.sleep(0.5)
    assert sorted(rec.bodies()) == ["m0", "m2", "m3"]
    assert {m.tags for m in rec.seen} == {"paid", "shipped"}
    wait_until(lambda: admin.offsets(group, topic) == {MessageQueue(topic, 0): 3,
                                                       MessageQueue(topic, 1): 3},
               10, what="committed offsets past the filtered messages")


def test_committed_offset_waits_for_the_slowest_message(
        stack: ClientStack, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    # SPEC C4: with a batch in flight the commit is the smallest unfinished offset
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    release = threading.Event()

    def decide(m: Message, ctx: object) -> None:
        if m.text == "m2":
            release.wait(20)

    rec = recorder(decide)
    consumers(group, topic, rec)
    producer.send_batch(topic, [_out(f"m{i}") for i in range(6)])
    rec.wait_for(lambda seen: len(seen) == 6, what="all six started")
    time.sleep(1.0)  # several commit periods
    assert admin.offsets(group, topic)[MessageQueue(topic, 0)] == 2
    release.set()
    wait_until(lambda: admin.offsets(group, topic)[MessageQueue(topic, 0)] == 6, 10,
               what="commit past the released message")


def test_flow_control_stops_pulling_past_the_threshold_as_rocketmq_does(
        stack: ClientStack, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    # DEC-flow-control-over: RocketMQ pulls again while a queue holds the threshold or fewer
    # unfinished messages and stops once it holds more: a pull of `threshold` messages is
    # followed by one more while the first are consumed (it was held back at the threshold)
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    producer.send_batch(topic, [_out(f"m{i}") for i in range(60)])
    release = threading.Event()

    def decide(m: Message, ctx: object) -> None:
        release.wait(20)

    rec = recorder(decide)
    c = consumers(group, topic, rec, pull_threshold_per_queue=20, pull_batch_size=20,
                  consume_threads=1)
    try:
        wait_until(lambda: c.stats.snapshot().get("flow_control", 0) >= 2, 15,
                   what="flow control")
        assert c.stats.snapshot().get("pulled") == 40  # 20 held: pulled again; 40: stopped
        assert len(rec.seen) == 1  # the listener still holds the first
    finally:
        release.set()
    rec.wait_for(lambda seen: len(seen) == 60, what="every message once released")
    assert sorted(rec.bodies()) == sorted(f"m{i}" for i in range(60))


def test_delayed_message_arrives_after_its_delay(stack: ClientStack, admin: AdminClient,
                                                 producer: Producer, consumers: Consumers,
                                                 recorder: Recorders, names: Names) -> None:
    # SPEC L2, S1, D4 seen from the client: level 2 is 1 s in the test table
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    rec = recorder()
    consumers(group, topic, rec)
    sent = producer.send(topic, "later", delay_level=2, keys=["order-7"])
    assert sent.topic == naming.SCHEDULE_TOPIC
    rec.wait_for(lambda seen: len(seen) == 1, what="the delayed message")
    m = rec.seen[0]
    assert m.topic == topic and m.keys == ("order-7",)
    assert m.store_timestamp - sent.store_timestamp >= 1000


def test_listener_outcomes_choose_retry_level_or_dlq(
        stack: ClientStack, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    # SPEC R11 (-1 DLQ, 0 broker decides, >0 that level), R15 (retries come back with the
    # original topic), R1 (send-back with reason and consumer id)
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 2)
    admin.set_group_settings(group)

    def decide(m: Message, ctx: Any) -> ConsumeResult:
        if m.reconsume_times > 0:
            return ConsumeResult.SUCCESS
        ctx.delay_level_when_next_consume = {"dlq": -1, "broker": 0, "level": 1}.get(m.text, 0)
        if m.text == "ok":
            return ConsumeResult.SUCCESS
        raise ValueError(f"cannot handle {m.text}")

    rec = recorder(decide)
    c = consumers(group, topic, rec)
    for body in ("ok", "dlq", "broker", "level"):
        producer.send(topic, body, tags="t1")
    rec.wait_for(lambda seen: {m.text for m in seen if m.reconsume_times == 1}
                 == {"broker", "level"}, what="two retried messages")
    retried = {m.text: m for m in rec.seen if m.reconsume_times == 1}
    for m in retried.values():
        assert m.topic == topic and m.store_topic == naming.retry_topic(group)  # R15
        assert m.properties[P.RETRY_TOPIC] == topic
        assert m.tags == "t1"
        attempt = m.failure_history[-1]
        assert attempt.consumer == c.client_id
        assert attempt.reason == f"ValueError: cannot handle {m.text}"
    assert "dlq" not in retried
    dead = list(admin.dlq_messages(group))
    assert [m.text for m in dead] == ["dlq"]
    assert dead[0].properties[P.DLQ_REASON] == "level_negative"
    assert Counter(rec.bodies()) == {"ok": 1, "dlq": 1, "broker": 2, "level": 2}
    assert naming.retry_topic(group) in {q.topic for q in c.owned_queues()}  # R15


def test_max_reconsume_times_then_dlq_never_consumed(
        stack: ClientStack, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    # SPEC R5, R6, R16
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)
    rec = recorder(lambda m, ctx: ConsumeResult.RECONSUME_LATER)
    consumers(group, topic, rec, max_reconsume_times=2)
    producer.send(topic, "poison", keys=["p-1"])
    wait_until(lambda: len(list(admin.dlq_messages(group))) == 1, 30, 0.1, what="dead letter")
    time.sleep(1.5)
    assert [m.reconsume_times for m in rec.seen] == [0, 1, 2]
    dead = next(iter(admin.dlq_messages(group)))
    assert dead.origin_topic == topic and dead.reconsume_times == 3
    assert [a.reconsume_times for a in dead.failure_history] == [0, 1, 2]


def test_orderly_failure_retries_in_order_then_dead_letters(
        stack: ClientStack, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    # SPEC R12: local retry with suspend, in order; after max -> %RETRY% with the max -> DLQ
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)
    flaky = {"m1": 2}

    def decide(m: Message, ctx: Any) -> OrderlyResult:
        if m.text == "poison":
            return OrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if flaky.get(m.text, 0):
            flaky[m.text] -= 1
            raise RuntimeError("flaky")
        return OrderlyResult.SUCCESS

    rec = recorder(decide)
    consumers(group, topic, rec, orderly=True, max_reconsume_times=2, suspend_time_ms=100)
    producer.send_batch(topic, [_out(b) for b in ("m0", "m1", "poison", "m3")])
    rec.wait_for(lambda seen: "m3" in [m.text for m in seen], what="m3 after the poison")
    assert rec.bodies() == ["m0", "m1", "m1", "m1", "poison", "poison", "poison", "m3"]
    assert [m.reconsume_times for m in rec.seen if m.text == "poison"] == [0, 1, 2]
    wait_until(lambda: [m.text for m in admin.dlq_messages(group)] == ["poison"], 10,
               what="poison dead-lettered")
    retry_topic = fetch_topic_or_none(admin.store, naming.retry_topic(group))
    assert retry_topic is None or retry_topic.message_count == 0  # R10 rerouted it


def test_consume_timeout_sends_back_with_level_3_and_frees_the_slot(stack: ClientStack,
                                                                    admin: AdminClient,
                                                                    producer: Producer,
                                                                    consumers: Consumers,
                                                                    recorder: Recorders,
                                                                    names: Names) -> None:
    # SPEC R13
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)
    release = threading.Event()

    def decide(m: Message, ctx: Any) -> ConsumeResult:
        if m.text == "slow" and m.reconsume_times == 0:
            release.wait(20)
        return ConsumeResult.SUCCESS

    rec = recorder(decide)
    c = consumers(group, topic, rec, consume_timeout_s=0.5)
    producer.send_batch(topic, [_out("slow"), _out("fast")])
    rec.wait_for(lambda seen: ("slow", 1) in [(m.text, m.reconsume_times) for m in seen],
                 what="the slow message back from the retry topic")
    assert c.stats.snapshot()["timeouts"] == 1
    retried = next(m for m in rec.seen if m.reconsume_times == 1)
    assert "consume timeout" in retried.failure_history[-1].reason
    wait_until(lambda: admin.offsets(group, topic)[MessageQueue(topic, 0)] == 2, 10,
               what="slot freed: commit past the held message")
    release.set()


def test_r9_fallback_when_the_retry_service_is_down(stack: ClientStack, admin: AdminClient,
                                                    producer: Producer, consumers: Consumers,
                                                    recorder: Recorders, names: Names) -> None:
    # SPEC R9: the client sends the new message to %RETRY%<group> itself
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    retry = stack.start_retry(names("retry"))
    retry.stop()
    rec = recorder(lambda m, ctx: ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0
                   else ConsumeResult.SUCCESS)
    c = consumers(group, topic, rec, retry_url=retry.url)
    sent = producer.send(topic, "needs-retry", tags="x", keys=["k-9"],
                         properties={"tenant": "acme"})
    rec.wait_for(lambda seen: len(seen) == 2, what="the message consumed again")
    first, again = rec.seen
    assert c.stats.snapshot()["fallback"] == 1
    assert again.store_topic == naming.retry_topic(group) and again.topic == topic
    assert again.reconsume_times == 1
    assert again.properties[P.RETRY_TOPIC] == topic
    assert again.properties[P.ORIGIN_MESSAGE_ID] == sent.msg_id
    assert again.properties[P.MAX_RECONSUME_TIMES] == "16"
    assert again.properties["tenant"] == "acme" and again.tags == "x"
    assert again.keys == ("k-9",) and again.uniq_key == first.uniq_key
    assert again.failure_history[-1].consumer == c.client_id
    assert again.store_timestamp - first.store_timestamp >= 1000  # level 3 + 0 = 1 s here


def test_broadcasting_every_consumer_gets_everything_and_never_retries(stack: ClientStack,
                                                                       admin: AdminClient,
                                                                       producer: Producer,
                                                                       consumers: Consumers,
                                                                       recorder: Recorders,
                                                                       names: Names,
                                                                       tmp_path: Path) -> None:
    # SPEC C2 (every queue, progress per consumer), R14
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 3)
    a = recorder(lambda m, ctx: ConsumeResult.RECONSUME_LATER if m.text == "bad" else None)
    b = recorder()
    common = {"message_model": MessageModel.BROADCASTING, "offset_dir": tmp_path}
    ca = consumers(group, topic, a, instance_name="a", **common)
    consumers(group, topic, b, instance_name="b", **common)
    wait_until(lambda: len(ca.owned_queues()) == 3, 10, what="every queue")
    producer.send_batch(topic, [_out(f"m{i}") for i in range(9)] + [_out("bad")])
    for rec in (a, b):
        rec.wait_for(lambda seen: len(seen) == 10, what="all ten")
    time.sleep(1.0)
    assert sorted(a.bodies()) == sorted(b.bodies())
    assert a.bodies().count("bad") == 1  # skipped, not retried
    assert admin.topic(topic).message_count == 10
    assert stack.admin().offsets(group) == {}  # nothing kept in the store
    ca.shutdown()
    files = sorted(p.name for p in (tmp_path / group).iterdir())
    assert len(files) == 2 and all(f.endswith(".json") for f in files)
    # a restarted consumer with the same instance name resumes from its own file
    again = recorder()
    consumers(group, topic, again, instance_name="a", **common)
    producer.send(topic, "after-restart")
    again.wait_for(lambda seen: "after-restart" in [m.text for m in seen], what="new message")
    time.sleep(0.5)
    assert again.bodies() == ["after-restart"]


def test_consume_timeout_applies_in_broadcasting_too(stack: ClientStack, admin: AdminClient,
                                                     producer: Producer, consumers: Consumers,
                                                     recorder: Recorders, names: Names,
                                                     tmp_path: Path) -> None:
    # SPEC R13, R14: a held message frees its slot (skipped, never retried)
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    release = threading.Event()

    def decide(m: Message, ctx: Any) -> ConsumeResult:
        if m.text == "slow":
            release.wait(20)
        return ConsumeResult.SUCCESS

    rec = recorder(decide)
    c = consumers(group, topic, rec, consume_timeout_s=0.5,
                  message_model=MessageModel.BROADCASTING, offset_dir=tmp_path)
    producer.send_batch(topic, [_out("slow"), _out("fast")])
    wait_until(lambda: c.stats.snapshot().get("timeouts", 0) == 1, 15, what="the timeout")

    def committed() -> int:
        c.persist_offsets()
        progress = json.loads(next((tmp_path / group).iterdir()).read_text())
        return int(progress["offsets"][topic]["0"])

    # the slot of the held message was freed while its listener still runs ("fast" is
    # finished by another thread: waited for, not raced)
    wait_until(lambda: committed() == 2, 10, what="offset 2 committed")
    assert not release.is_set()
    assert [m.text for m in rec.seen].count("slow") == 1  # not consumed again
    release.set()


def test_consume_from_where_and_committed_offsets(stack: ClientStack, admin: AdminClient,
                                                  producer: Producer, consumers: Consumers,
                                                  recorder: Recorders, names: Names) -> None:
    # SPEC C1: new queues start from the committed offset, else consume-from-where
    topic = names("t")
    admin.create_topic(topic, 1)
    producer.send_batch(topic, [_out("old1"), _out("old2")])
    last, first, young = recorder(), recorder(), recorder()
    c_last = consumers(names("last"), topic, last, young_queue_limit=0,
                       consume_from_where=ConsumeFromWhere.LAST)
    # LAST on a young queue (nothing deleted, few entries) starts at 0, as
    # RocketMQ's broker does for a new group: "send, then consume" shows the messages
    consumers(names("young"), topic, young, consume_from_where=ConsumeFromWhere.LAST)
    consumers(names("first"), topic, first, consume_from_where=ConsumeFromWhere.FIRST)
    wait_until(lambda: c_last.owned_queues(), 10, what="a queue")
    time.sleep(0.5)
    producer.send(topic, "new")
    first.wait_for(lambda seen: len(seen) == 3, what="everything")
    young.wait_for(lambda seen: len(seen) == 3, what="everything, the queue being young")
    last.wait_for(lambda seen: len(seen) == 1, what="only the new one")
    assert last.bodies() == ["new"]
    # a group with a committed offset resumes there, whatever consume-from-where says
    group = names("resume")
    admin.commit_offset(group, MessageQueue(topic, 0), 1)
    resumed = recorder()
    consumers(group, topic, resumed, consume_from_where=ConsumeFromWhere.LAST)
    resumed.wait_for(lambda seen: len(seen) == 2, what="from offset 1")
    assert resumed.bodies() == ["old2", "new"]


def test_consume_spans_continue_the_producers_trace_through_retries(
        memory_spans: InMemorySpanExporter, stack: ClientStack, admin: AdminClient,
        producer: Producer, consumers: Consumers, recorder: Recorders, names: Names,
) -> None:
    # SPEC O1
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)
    rec = recorder(lambda m, ctx: ConsumeResult.RECONSUME_LATER if m.reconsume_times < 2
                   else None)
    consumers(group, topic, rec)
    sent = producer.send(topic, "traced")
    rec.wait_for(lambda seen: len(seen) == 3, what="three attempts")
    produce = [s for s in memory_spans.get_finished_spans() if s.name == "client.produce"
               and (s.attributes or {}).get("messaging.message.id") == sent.msg_id]
    assert len(produce) == 1
    trace_id = produce[0].context.trace_id
    wait_until(lambda: len([s for s in memory_spans.get_finished_spans()
                            if s.name == "client.consume"
                            and s.context.trace_id == trace_id]) == 3, 5,
               what="three consume spans in the producer's trace")
    consume = [s for s in memory_spans.get_finished_spans() if s.name == "client.consume"
               and s.context.trace_id == trace_id]
    assert all(s.parent is not None for s in consume)
    assert sorted(int(str((s.attributes or {})[telemetry.RECONSUME_TIMES]))
                  for s in consume) == [
        0, 1, 2]
    send_backs = [s for s in memory_spans.get_finished_spans()
                  if s.name == "client.send_back" and s.context.trace_id == trace_id]
    assert len(send_backs) == 2
    assert all(m.trace_id == f"{trace_id:032x}" for m in rec.seen)


def test_pull_consumer_with_manual_offsets(stack: ClientStack, admin: AdminClient,
                                           producer: Producer, names: Names) -> None:
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 2)
    producer.send_batch(topic, [_out(f"m{i}", tags="a" if i % 2 else "b", queue_id=0)
                                for i in range(6)])
    with PullConsumer(group, stack.store.url) as pc:
        queues = pc.queues(topic)
        assert queues == [MessageQueue(topic, 0), MessageQueue(topic, 1)]
        assert pc.committed_offset(queues[0]) is None
        result = pc.pull(queues[0], 0, 10, "a")
        assert [m.text for m in result.messages] == ["m1", "m3", "m5"]
        assert result.next_offset == 6
        pc.commit(queues[0], 4)
        assert pc.committed_offset(queues[0]) == 4
        assert pc.pull(queues[1], 0).status == "NO_NEW_MSG"


def _out(body: str, **kw: Any) -> OutgoingMessage:
    return OutgoingMessage(body, **kw)
