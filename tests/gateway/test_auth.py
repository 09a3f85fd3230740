"""Access control through the gateway (CLEPSYDRA_AUTH=on; DEC-gateway-credentials): the
client's Credentials carry a Clepsydra token as the access key; without a valid one every RPC
answers UNAUTHORIZED; a producer token sends and cannot consume; a consumer token consumes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rocketmq import Credentials
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.v5.exception import ForbiddenException

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token
from tests.gateway.conftest import Gw, message, receive_until, start_stack

pytestmark = pytest.mark.gateway

ADMIN = "clp_gateway-suite-admin"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    home = tmp_path_factory.mktemp("gateway-auth")
    tokens = home / "tokens.json"
    _, gateway_token = create_token(tokens, "gateway", Role.CONSUMER, topics=("*",),
                                    groups=("*",))
    _, retry_token = create_token(tokens, "retry", Role.RETRY)
    _, scheduler_token = create_token(tokens, "scheduler", Role.SCHEDULER)
    clients = {name: Credentials(create_token(tokens, name, role, topics=("*",),
                                              groups=("*",))[1], name)
               for name, role in (("orders-app", Role.PRODUCER), ("billing", Role.CONSUMER))}
    # every part its own token (make run does this itself: tools/stack_auth.py)
    stack = start_stack(home, {"retry": retry_token, "scheduler": scheduler_token,
                               "gateway": gateway_token}, CLEPSYDRA_AUTH="on",
                        CLEPSYDRA_AUTH_TOKENS_FILE=str(tokens),
                        CLEPSYDRA_AUTH_ADMIN_TOKEN=ADMIN)
    gw = Gw(stack, Credentials(), admin_token=ADMIN)
    gw.clients = clients  # type: ignore[attr-defined]
    try:
        yield gw
    finally:
        stack.stop()


def _token(gw: Gw, name: str) -> Credentials:
    """A token made before the stack started (a service reads a changed tokens file within
    a second; these are there from the start)."""
    credentials: Credentials = gw.clients[name]  # type: ignore[attr-defined]
    return credentials


def test_without_valid_credentials_every_rpc_is_unauthorized(secured: Gw) -> None:
    stub = secured.stub()
    bad = [("authorization", "MQv2-HMAC-SHA1 Credential=clp_nope, SignedHeaders=x, "
                             "Signature=00")]
    topic = secured.topic()
    calls = {
        "QueryRoute": lambda md: stub.QueryRoute(s.QueryRouteRequest(
            topic=d.Resource(name=topic)), metadata=md, timeout=10).status,
        "Heartbeat": lambda md: stub.Heartbeat(s.HeartbeatRequest(), metadata=md,
                                               timeout=10).status,
        "SendMessage": lambda md: stub.SendMessage(s.SendMessageRequest(messages=[
            d.Message(topic=d.Resource(name=topic), body=b"x")]), metadata=md,
            timeout=10).status,
        "RecallMessage": lambda md: stub.RecallMessage(s.RecallMessageRequest(), metadata=md,
                                                       timeout=10).status,
        "QueryAssignment": lambda md: stub.QueryAssignment(s.QueryAssignmentRequest(),
                                                           metadata=md, timeout=10).status,
        "ReceiveMessage": lambda md: list(stub.ReceiveMessage(s.ReceiveMessageRequest(),
                                                              metadata=md,
                                                              timeout=10))[-1].status,
        "AckMessage": lambda md: stub.AckMessage(s.AckMessageRequest(), metadata=md,
                                                 timeout=10).status,
        "ChangeInvisibleDuration": lambda md: stub.ChangeInvisibleDuration(
            s.ChangeInvisibleDurationRequest(), metadata=md, timeout=10).status,
        "ForwardMessageToDeadLetterQueue": lambda md: stub.ForwardMessageToDeadLetterQueue(
            s.ForwardMessageToDeadLetterQueueRequest(), metadata=md, timeout=10).status,
        "NotifyClientTermination": lambda md: stub.NotifyClientTermination(
            s.NotifyClientTerminationRequest(), metadata=md, timeout=10).status,
        "Telemetry": lambda md: next(iter(stub.Telemetry(iter([s.TelemetryCommand(
            settings=d.Settings())]), metadata=md, timeout=10))).status,
    }
    for rpc, call in calls.items():
        for metadata in ((), bad):
            status = call(metadata)
            assert status.code == d.Code.UNAUTHORIZED, (rpc, metadata)
            assert "unauthenticated" in status.message
    assert secured.max_offset(topic) == 0


def test_a_producer_token_sends_and_cannot_consume(secured: Gw) -> None:
    topic, group = secured.topic(queues=1), secured.group()
    producer_creds = _token(secured, "orders-app")
    consumer_creds = _token(secured, "billing")
    with secured.producer(topic, credentials=producer_creds) as producer:
        msg_id = producer.send(message(topic, "secured")).message_id
    with secured.simple(group, topic, credentials=producer_creds) as consumer, \
            pytest.raises(ForbiddenException) as caught:
        consumer.receive(1, 10)
    assert "role producer may not read topic" in str(caught.value)
    with secured.simple(group, topic, credentials=consumer_creds) as consumer:
        [got] = receive_until(consumer, 1, invisible_s=1, ack=False)
        assert got.message_id == msg_id
        # not acked: the gateway's own token sends it back (the sweeper), it comes again
        [again] = receive_until(consumer, 1)
    assert again.delivery_attempt == 2
