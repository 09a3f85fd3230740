"""Timers (SPEC T1, T2) through the SDK and the `clepsydra` command on a real stack (store,
scheduler worker and beat, Redis): a timer sent with `--in` arrives, never before its time; a
cancelled one never arrives; a rescheduled one moves; a delivered one answers 409
ALREADY_DELIVERED and an unknown one 404; `clepsydra timers` shows the backlog.

"Never arrives" is checked against a control message due after it: the scheduler delivers in
time order, so once the control has arrived the cancelled (or moved) one would have too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from clepsydra_client.consumer.pull_consumer import PullConsumer
from clepsydra_client.ids import new_uniq_key
from clepsydra_client.message import Message
from clepsydra_core.errors import AlreadyDelivered, MessageNotFound
from tools.processes import wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import Cli, ClientStack, Names

pytestmark = pytest.mark.integration

WAIT_S = 60.0
"""How long a test waits for a delivery before it fails (a stuck scheduler, not a timing)."""


def delivered(stack: ClientStack, topic: str) -> list[Message]:
    """Every message in the topic's queues, in queue order."""
    with PullConsumer(None, stack.store.url) as pc:
        out: list[Message] = []
        for queue in pc.queues(topic):
            out.extend(pc.pull(queue, 0, 100).messages)
        return out


def wait_for_body(stack: ClientStack, topic: str, body: str) -> Message:
    wait_until(lambda: any(m.text == body for m in delivered(stack, topic)), WAIT_S, 0.05,
               what=f"{body!r} delivered to {topic}")
    return next(m for m in delivered(stack, topic) if m.text == body)


def test_send_in_2s_arrives_not_before_its_time_then_cancel_answers_409(
        stack: ClientStack, cli: Cli, admin: AdminClient, names: Names) -> None:
    # SPEC T1: `clepsydra send --in`, delivered no earlier than the time; 409 once delivered
    topic = names("t")
    admin.create_topic(topic, 1)
    before_ms = int(datetime.now(UTC).timestamp() * 1000)
    sent = cli("--json", "send", topic, "in two seconds", "--in", "2s")
    assert sent.code == 0, sent.err
    deliver_at = sent.json()["deliverAt"]
    assert deliver_at >= before_ms + 2000
    text = cli("send", topic, "shown", "--in", "2s")
    assert text.code == 0 and ", due " in text.out and "(in " in text.out
    m = wait_for_body(stack, topic, "in two seconds")
    assert m.store_timestamp >= deliver_at, "delivered before its time (SPEC T2)"
    assert m.msg_id == sent.json()["msgId"]
    late = cli("message", "cancel", m.msg_id)
    assert late.code == 1 and "ALREADY_DELIVERED" in late.err
    assert "cannot be taken back" in late.err and "Traceback" not in late.err
    moved = cli("message", "reschedule", m.msg_id, "--in", "1h")
    assert moved.code == 1 and "ALREADY_DELIVERED" in moved.err


def test_cancel_makes_it_never_arrive(stack: ClientStack, cli: Cli, admin: AdminClient,
                                      names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    doomed = cli("--json", "send", topic, "cancelled", "--in", "2s").json()
    control_at = doomed["deliverAt"] + 500
    assert cli("send", topic, "control", "--at", str(control_at)).code == 0
    cancelled = cli("--json", "message", "cancel", doomed["msgId"])
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json() == {"status": "cancelled", "msgIds": [doomed["msgId"]]}
    wait_for_body(stack, topic, "control")
    assert [m.text for m in delivered(stack, topic)] == ["control"]


def test_cancel_by_key_takes_back_every_pending_one(
        stack: ClientStack, cli: Cli, admin: AdminClient, producer: Producer,
        names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    ids = {producer.send(topic, f"k{n}", keys=["order-7"], delay=timedelta(seconds=2)).msg_id
           for n in range(2)}
    last = producer.send(topic, "control", delay=timedelta(seconds=3))
    out = cli("--json", "message", "cancel", "--topic", topic, "--key", "order-7")
    assert out.code == 0, out.err
    assert out.json()["status"] == "cancelled" and set(out.json()["msgIds"]) == ids
    assert last.deliver_at is not None
    wait_for_body(stack, topic, "control")
    assert [m.text for m in delivered(stack, topic)] == ["control"]
    unknown = cli("message", "cancel", "--topic", topic, "--key", "no-such-key")
    assert unknown.code == 1 and "MESSAGE_NOT_FOUND" in unknown.err


def test_reschedule_moves_it_later_and_earlier(
        stack: ClientStack, cli: Cli, admin: AdminClient, producer: Producer,
        names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    # earlier: an hour ahead, moved to two seconds from now
    far = producer.send(topic, "was an hour", deliver_at=datetime.now(UTC) + timedelta(hours=1))
    moved = cli("--json", "message", "reschedule", far.msg_id, "--in", "2s")
    assert moved.code == 0, moved.err
    answer = moved.json()
    assert answer["status"] == "rescheduled" and answer["msgIds"] == [far.msg_id]
    assert far.deliver_at is not None and answer["deliverAt"] < far.deliver_at
    # later: two seconds ahead, moved an hour away (by the SDK, by key)
    near = producer.send(topic, "was two seconds", keys=["later"], delay=2000)
    change = producer.reschedule(topic=topic, key="later", delay=timedelta(hours=1))
    assert change.status == "rescheduled" and change.msg_ids == (near.msg_id,)
    assert near.deliver_at is not None and change.deliver_at is not None
    assert change.deliver_at >= near.deliver_at + 3_000_000
    producer.send(topic, "control", deliver_at=near.deliver_at + 500)
    m = wait_for_body(stack, topic, "was an hour")
    assert m.store_timestamp >= answer["deliverAt"]
    wait_for_body(stack, topic, "control")
    assert sorted(m.text for m in delivered(stack, topic)) == ["control", "was an hour"]
    assert producer.cancel(near.msg_id).status == "cancelled"  # leave nothing pending


def test_sdk_errors_are_typed(stack: ClientStack, producer: Producer, admin: AdminClient,
                              names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    with pytest.raises(MessageNotFound):
        producer.cancel(new_uniq_key())
    now = producer.send(topic, "past", deliver_at=0)  # a time in the past delivers now
    wait_for_body(stack, topic, "past")
    with pytest.raises(AlreadyDelivered):
        producer.reschedule(now.msg_id, delay=1000)


def test_timers_shows_the_backlog_by_hour_ahead(cli: Cli, admin: AdminClient,
                                                producer: Producer, names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    r = producer.send(topic, "tomorrow", delay=timedelta(hours=5, minutes=30))
    try:
        data = cli("--json", "timers").json()
        assert data["pending"] >= 1
        assert any(h["hour"] == 5 and h["count"] >= 1 for h in data["byHourAhead"])
        text = cli("timers")
        assert text.code == 0 and "HOURS AHEAD" in text.out and "5-6h" in text.out
        assert "pending" in text.out and "lateness" in text.out
    finally:
        producer.cancel(r.msg_id)
