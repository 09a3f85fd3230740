"""Old and new gateways side by side over the same Redis state and store shards: a rolling
upgrade (DEC-gateway-pop-over-pull: the deliveries under way are in Redis, shared by every
gateway process; DEC-store-shards; DEC-route-refresh).

What "old" and "new" are here, concretely: gateway A is started while the cluster has two
store shards, and hands out messages then (its shard membership, routes and topic caches, and
the receipt handles it gives, are of a two-shard cluster); a third shard is then added the way
docs/shards.md says (``tests.helpers.grow``: the new shard started, each old one restarted with
``CLEPSYDRA_STORE_SHARDS=3``, shard 0 last) while A keeps running; gateway B is started after
that, on the three-shard cluster, with another configuration (long poll 1 s and renewal every
5 s where A has 2 s and 3 s). Both then serve one consumer group at the same time, as old and
new gateway pods behind one Service do while a rollout is under way.

Checked, with the official RocketMQ 5 client and the protocol's own calls:
- nothing is handed out twice within its invisible time, whichever gateway is asked (each
  message is received once while its time runs, the new shard's included);
- a message received through one gateway and acked through the other is acked once: the ack
  answers OK, a second ack through either gateway is refused (INVALID_RECEIPT_HANDLE), the
  group's offsets reach the end on every shard, and it never comes back (nothing in
  ``%RETRY%<group>`` but the one message let run out, below);
- an invisible time changed through the other gateway holds: the message comes back only
  after the new time, through either gateway, and the old handle no longer acks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, SimpleConsumer
from rocketmq.grpc_protocol import MessagingServiceStub
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from clepsydra_core import naming
from clepsydra_core.errors import NotFound
from clepsydra_core.runtime.http import HttpClient
from tests.gateway.conftest import GATEWAY_ENV, message
from tests.helpers import grow, now_ms, unique_name
from tools import parts
from tools.processes import free_port, wait_until

pytestmark = pytest.mark.gateway

INVISIBLE_S = 20
"""Long enough for the whole exchange below: a second receipt of a message before this long
after the first was asked for is a message handed out twice."""
SHORT_S = 2
"""The invisible time one message is given through the other gateway."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[parts.Stack]:
    """Redis, two store shards, the retry service, the scheduler and gateway A."""
    stack = (parts.Stack(tmp_path_factory.mktemp("gateway-rolling"), env=dict(GATEWAY_ENV))
             .with_redis().with_store(shards=2).with_retry().with_scheduler().with_gateway()
             .start())
    try:
        yield stack
    finally:
        stack.stop()


class Side:
    """One gateway: its endpoint, a SimpleConsumer of the group through it, its raw stub."""

    def __init__(self, endpoint: str, group: str, topic: str) -> None:
        self.endpoint, self.group, self.topic = endpoint, group, topic
        self.consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                                       {topic: FilterExpression()}, await_duration=1)
        self.consumer.startup()
        self.stub = MessagingServiceStub(grpc.insecure_channel(endpoint))

    def receive(self, invisible_s: int = INVISIBLE_S) -> list[tuple[int, Message]]:
        """(when the receive was asked, in epoch ms: no handout is earlier) of each message."""
        asked = now_ms()
        return [(asked, m) for m in self.consumer.receive(16, invisible_s)]

    def ack(self, m: Message) -> d.Status:
        return self.stub.AckMessage(s.AckMessageRequest(
            group=d.Resource(name=self.group), topic=d.Resource(name=self.topic),
            entries=[s.AckMessageEntry(message_id=m.message_id,
                                       receipt_handle=m.receipt_handle)]), timeout=10).status

    def change_invisible(self, m: Message, seconds: int) -> s.ChangeInvisibleDurationResponse:
        return self.stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
            group=d.Resource(name=self.group), topic=d.Resource(name=self.topic),
            receipt_handle=m.receipt_handle, message_id=m.message_id,
            invisible_duration={"seconds": seconds}), timeout=10)

    def close(self) -> None:
        self.consumer.shutdown()


def _send(endpoint: str, topic: str, bodies: list[str]) -> list[str]:
    from rocketmq import Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        return [producer.send(message(topic, b)).message_id for b in bodies]
    finally:
        producer.shutdown()


def _stored(urls: list[str], topic: str) -> list[int]:
    """Messages stored on ``topic`` by each shard (0 where it does not exist)."""
    out = []
    for url in urls:
        http = HttpClient(url)
        try:
            doc = http.get(http.path("/v1/topics/{}", topic))
            out.append(sum(q["maxOffset"] - q["minOffset"] for q in doc["queues"]))
        except NotFound:
            out.append(0)
        finally:
            http.close()
    return out


def _committed(urls: list[str], group: str, topic: str) -> int:
    total = 0
    for url in urls:
        http = HttpClient(url)
        doc = http.get(http.path("/v1/groups/{}/offsets", group), {"topic": topic})
        total += sum(doc["offsets"].get(topic, {}).values())
        http.close()
    return total


def test_old_and_new_gateways_share_deliveries_acks_and_invisible_times(
        stack: parts.Stack) -> None:
    topic, group = unique_name("roll"), unique_name("roll-g")
    store = HttpClient(stack.shard_urls[0])
    store.post("/v1/topics", {"name": topic, "queues": 2})
    a = Side(stack.gateway_endpoint, group, topic)
    sides = [a]
    try:
        # the old world: two shards, gateway A hands out half of what was sent (not acked)
        before = _send(a.endpoint, topic, [f"before-{i}" for i in range(8)])
        received: list[tuple[int, Message, Side]] = []
        give_up = time.monotonic() + 30
        while len(received) < 4 and time.monotonic() < give_up:
            received += [(t, m, a) for t, m in a.receive()]
        assert len(received) >= 4, "gateway A handed nothing out"
        urls = grow(stack, 3)
        assert stack.gateway.proc is not None and stack.gateway.proc.poll() is None  # A ran on
        port, health = free_port(), free_port()
        stack.add(parts.GATEWAY, name="gateway-b", CLEPSYDRA_GATEWAY_PORT=str(port),
                  CLEPSYDRA_GATEWAY_HEALTH_PORT=str(health), CLEPSYDRA_GATEWAY_LONG_POLL_S="1",
                  CLEPSYDRA_GATEWAY_RENEW_S="5")
        b = Side(f"127.0.0.1:{port}", group, topic)
        sides.append(b)
        after = _send(b.endpoint, topic, [f"after-{i}" for i in range(18)])
        after += _send(a.endpoint, topic, [f"after-a-{i}" for i in range(6)])
        sent = before + after
        assert _stored(urls, topic)[2] > 0  # the new shard took a share
        # both gateways receive for the group at once, until everything was handed out
        give_up = time.monotonic() + 60
        while {m.message_id for _, m, _ in received} != set(sent) and \
                time.monotonic() < give_up:
            for side in (a, b):
                received += [(t, m, side) for t, m in side.receive()]
        ids = Counter(m.message_id for _, m, _ in received)
        assert set(ids) == set(sent), "not every message was handed out"
        first = {m.message_id: t for t, m, _ in reversed(received)}
        twice = [(m.message_id, t - first[m.message_id]) for t, m, _ in received
                 if ids[m.message_id] > 1 and t < first[m.message_id] + INVISIBLE_S * 1000
                 and t != first[m.message_id]]
        assert twice == [], "handed out twice within its invisible time"
        assert {side.endpoint for _, _, side in received} == {a.endpoint, b.endpoint}
        # one message A handed out in the two-shard days: its invisible time changed through
        # B; it comes back after the new time only, and its old handle no longer acks
        late_t, late, _ = next(x for x in received if x[2] is a)
        changed_at = now_ms()
        answer = b.change_invisible(late, SHORT_S)
        assert answer.status.code == d.Code.OK, answer.status
        assert a.ack(late).code == d.Code.INVALID_RECEIPT_HANDLE  # the old handle
        # every other message acked through the gateway that did not hand it out, once
        acked = 0
        for _, m, side in received:
            if m.message_id == late.message_id:
                continue
            other = b if side is a else a
            assert other.ack(m).code == d.Code.OK, m.message_id
            assert side.ack(m).code == d.Code.INVALID_RECEIPT_HANDLE  # acked already
            acked += 1
        assert acked == len(sent) - 1
        back: list[tuple[int, Message, Side]] = []
        give_up = time.monotonic() + 40
        while not back and time.monotonic() < give_up:
            for side in (a, b):
                back += [(t, m, side) for t, m in side.receive()]
                got_back = now_ms()
                if back:
                    break
        assert [m.message_id for _, m, _ in back] == [late.message_id]  # nothing else came
        [(back_t, again, via)] = back
        assert again.delivery_attempt == 2
        # not before the new time (the receive that got it returned after it ran out), and
        # not kept to the first one either (INVISIBLE_S after A handed it out)
        assert got_back >= changed_at + SHORT_S * 1000
        assert back_t < late_t + INVISIBLE_S * 1000
        other = b if via is a else a
        assert other.ack(again).code == d.Code.OK
        # acked once each: offsets at the end on every shard, and only the one message that
        # was let run out was sent back (%RETRY%<group>)
        wait_until(lambda: _committed(urls, group, topic) == sum(_stored(urls, topic)), 30,
                   what="the group's offsets at the end of every shard "
                        "(DEC-gateway-shared-commits)")
        retry = naming.retry_topic(group)
        assert sum(_stored(urls, retry)) == 1
        wait_until(lambda: _committed(urls, group, retry) == 1, 30,
                   what="the group's offset past the message sent back")
        # and nothing comes back once the invisible time of the first receipts has run out
        earliest = min(t for t, _, _ in received)
        time.sleep(max(0.0, earliest / 1000 + INVISIBLE_S + 2 - time.time()))
        late_receipts = [m.message_id for side in (a, b) for _, m in side.receive()]
        assert late_receipts == []
    finally:
        for side in sides:
            side.close()
        store.close()
