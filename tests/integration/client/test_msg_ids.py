"""A message keeps its id, end to end through the SDK, the store, the scheduler
and the retry service: the msgId a producer gets for a delayed message is the id its consumer
sees, the id of its retry after a send-back and the id of its dead letter, and `message show`
with it finds every copy; each copy keeps its own place as offsetMsgId."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.listener import ConsumeResult
from clepsydra_core import naming
from tools.processes import wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.message import Message
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import Cli, Consumers, Names, Recorders

pytestmark = pytest.mark.integration


def test_a_delayed_message_keeps_its_id_through_retry_and_dlq(
        admin: AdminClient, producer: Producer, consumers: Consumers, recorder: Recorders,
        names: Names, cli: Cli) -> None:
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)

    def fail_twice(m: Message, ctx: Any) -> ConsumeResult:
        if m.reconsume_times == 0:
            ctx.delay_level_when_next_consume = 1  # one retry, 1 s later
            raise ValueError("first try")
        ctx.delay_level_when_next_consume = -1  # then straight to the DLQ
        raise ValueError("second try")

    rec = recorder(fail_twice)
    consumers(group, topic, rec)
    sent = producer.send(topic, "keep my id", delay_level=1)
    assert sent.topic == naming.SCHEDULE_TOPIC  # parked (S1)
    assert sent.msg_id == sent.uniq_key and sent.msg_id != sent.offset_msg_id
    rec.wait_for(lambda seen: len(seen) == 2, what="the delivery and its retry")
    first, retried = rec.seen
    assert first.msg_id == sent.msg_id and first.reconsume_times == 0  # delivered copy
    assert retried.msg_id == sent.msg_id and retried.reconsume_times == 1  # %RETRY% copy
    assert retried.is_retry and retried.topic == topic
    assert len({sent.offset_msg_id, first.offset_msg_id, retried.offset_msg_id}) == 3

    def dead() -> list[Message]:
        return list(admin.dlq_messages(group))

    wait_until(lambda: len(dead()) == 1, 30, 0.1, what="the dead letter")
    [letter] = dead()
    assert letter.msg_id == sent.msg_id  # the DLQ lists it by the same id
    assert admin.dlq_show(group, sent.msg_id).msg_id == sent.msg_id

    copies = admin.message_copies(sent.msg_id)  # GET /v1/messages/{msgId}: every copy
    assert {c.msg_id for c in copies} == {sent.msg_id}
    topics = [c.store_topic for c in copies]
    assert topics[0] == naming.SCHEDULE_TOPIC and topics[1] == topic
    assert naming.retry_topic(group) in topics and topics[-1] == naming.dlq_topic(group)
    assert [c.offset_msg_id for c in copies][:2] == [sent.offset_msg_id, first.offset_msg_id]
    assert admin.message_copies(retried.offset_msg_id) == copies  # one copy's place: all

    shown = cli("--json", "message", "show", sent.msg_id).json()
    assert shown["msgId"] == sent.msg_id and shown["topic"] == naming.dlq_topic(group)
    assert [c["offsetMsgId"] for c in shown["copies"]] == [c.offset_msg_id for c in copies]
    text = cli("message", "show", sent.msg_id).out
    for c in copies:
        assert c.offset_msg_id in text
