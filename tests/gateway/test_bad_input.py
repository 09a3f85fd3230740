"""Bad input through the protocol itself (a raw gRPC stub, as a broken or hostile client would
send it): each answer is the protocol's status with a clear message, nothing is written, the
gateway stays up; an RPC it does not serve answers NOT_IMPLEMENTED naming itself."""

from __future__ import annotations

import zlib

import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from tests.gateway.conftest import Gw, message, receive_until
from tools.processes import http_ok

pytestmark = pytest.mark.gateway


def _send(gw: Gw, topic: str, body: bytes, **system: object) -> s.SendMessageResponse:
    m = d.Message(topic=d.Resource(name=topic), body=body)
    m.system_properties.message_id = "01ABCDEF0123456789ABCDEF0123456789"
    m.system_properties.message_type = d.MessageType.NORMAL
    for name, value in system.items():
        if name == "digest":
            m.system_properties.body_digest.CopyFrom(value)  # type: ignore[arg-type]
        else:
            setattr(m.system_properties, name, value)
    return gw.stub().SendMessage(s.SendMessageRequest(messages=[m]), timeout=10)


def test_unknown_topic_oversized_body_wrong_digest_write_nothing(gw: Gw) -> None:
    topic = gw.topic(queues=1)
    before = gw.max_offset(topic)
    answer = _send(gw, "no-such-topic-anywhere", b"x")
    assert answer.status.code == d.Code.TOPIC_NOT_FOUND
    assert "no-such-topic-anywhere" in answer.status.message
    answer = _send(gw, topic, b"x" * (4 * 1024 * 1024 + 1))
    assert answer.status.code == d.Code.MESSAGE_BODY_TOO_LARGE
    assert "4194304" in answer.status.message
    wrong = d.Digest(type=d.DigestType.CRC32, checksum=format(zlib.crc32(b"other"), "08X"))
    answer = _send(gw, topic, b"payload", digest=wrong)
    assert answer.status.code == d.Code.MESSAGE_CORRUPTED
    answer = _send(gw, topic, b"")
    assert answer.status.code == d.Code.MESSAGE_BODY_EMPTY
    assert gw.max_offset(topic) == before  # nothing written
    right = d.Digest(type=d.DigestType.CRC32, checksum=format(zlib.crc32(b"payload"), "08X"))
    assert _send(gw, topic, b"payload", digest=right).status.code == d.Code.OK
    assert gw.max_offset(topic) == before + 1
    assert http_ok(gw.stack.gateway.url + "/healthz")  # still up


def test_invalid_and_expired_receipt_handles(gw: Gw) -> None:
    topic, group = gw.topic(queues=1), gw.group()
    stub = gw.stub()

    def ack(handle: str) -> d.Status:
        return stub.AckMessage(s.AckMessageRequest(
            group=d.Resource(name=group), topic=d.Resource(name=topic),
            entries=[s.AckMessageEntry(message_id="x", receipt_handle=handle)]),
            timeout=10).status

    for garbage in ("", "not-a-handle", "cg1.!!!", "cg1.WyJhIl0"):
        status = ack(garbage)
        assert status.code == d.Code.INVALID_RECEIPT_HANDLE, garbage
        assert "receipt handle" in status.message
    with gw.producer(topic) as producer:
        producer.send(message(topic, "once"))
    with gw.simple(group, topic, await_s=1) as consumer:
        [m] = receive_until(consumer, 1, invisible_s=1, ack=False)
        [again] = receive_until(consumer, 1, invisible_s=10)  # its time ran out: back
    status = ack(m.receipt_handle)  # the first delivery's handle has expired
    assert status.code == d.Code.INVALID_RECEIPT_HANDLE
    assert "expired" in status.message
    status = ack(again.receipt_handle)  # acked already by receive_until
    assert status.code == d.Code.INVALID_RECEIPT_HANDLE
    invisible = stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
        group=d.Resource(name=group), topic=d.Resource(name=topic),
        receipt_handle=again.receipt_handle, invisible_duration={"seconds": 100_000}),
        timeout=10)
    assert invisible.status.code == d.Code.ILLEGAL_INVISIBLE_TIME


def test_unserved_rpcs_answer_not_implemented_naming_themselves(gw: Gw) -> None:
    stub = gw.stub()
    for rpc, request in (("UpdateOffset", s.UpdateOffsetRequest()),
                         ("GetOffset", s.GetOffsetRequest()),
                         ("QueryOffset", s.QueryOffsetRequest()),
                         ("EndTransaction", s.EndTransactionRequest()),
                         ("SyncLiteSubscription", s.SyncLiteSubscriptionRequest())):
        status = getattr(stub, rpc)(request, timeout=10).status
        assert status.code == d.Code.NOT_IMPLEMENTED, rpc
        assert rpc in status.message
    [pulled] = list(stub.PullMessage(s.PullMessageRequest(), timeout=10))
    assert pulled.status.code == d.Code.NOT_IMPLEMENTED and "PullMessage" in pulled.status.message
    sql = list(stub.ReceiveMessage(s.ReceiveMessageRequest(
        group=d.Resource(name="g"), message_queue=d.MessageQueue(topic=d.Resource(name="t")),
        filter_expression=d.FilterExpression(type=d.FilterType.SQL, expression="a > 1"),
        batch_size=1), timeout=10))
    assert sql[-1].status.code == d.Code.ILLEGAL_FILTER_EXPRESSION
    assert http_ok(gw.stack.gateway.url + "/healthz")
