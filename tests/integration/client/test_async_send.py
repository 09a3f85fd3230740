"""``Producer.send_async`` against a real store: futures with their own results,
batches cut by count and flushed without waiting out the linger, a message the store refuses
failing alone, nothing accepted lost on ``close()``, and a store that cannot be reached failing
the futures instead of hanging them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future

import pytest
import requests

from clepsydra_client.admin import AdminClient
from clepsydra_client.message import SendResult
from clepsydra_client.producer import Producer
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError
from tests.integration.client.conftest import ClientStack
from tools.processes import free_port

pytestmark = pytest.mark.integration


def _stored(stack: ClientStack, topic: str) -> Counter[str]:
    """Each body in the topic, counted."""
    bodies: Counter[str] = Counter()
    for queue in requests.get(f"{stack.store.url}/v1/topics/{topic}", timeout=10).json()["queues"]:
        page = requests.get(f"{stack.store.url}/v1/topics/{topic}/queues/{queue['queueId']}"
                            "/messages", params={"offset": 0, "max": 1000}, timeout=10).json()
        bodies.update(m["body"] for m in page["messages"])
    return bodies


def test_every_future_gets_the_result_of_its_own_message(
        stack: ClientStack, admin: AdminClient, names: Callable[[str], str]) -> None:
    topic = names("async")
    admin.create_topic(topic, 2)
    # a linger far longer than the test: batches go out because they are full, and the
    # last, short one because of flush()
    with Producer(stack.store.url, linger_ms=60_000, batch_messages=50) as producer:
        futures = [producer.send_async(topic, f"m{i}", keys=[f"k{i}"]) for i in range(1234)]
        assert producer.flush(30)
        results = [f.result(0) for f in futures]
    assert len({r.msg_id for r in results}) == 1234
    assert _stored(stack, topic) == Counter(f"m{i}" for i in range(1234))
    by_key = admin.messages_by_key(topic, "k7")
    assert [m.text for m in by_key] == ["m7"]
    assert results[7].msg_id in {m.msg_id for m in by_key}


def test_a_message_the_store_refuses_fails_alone(
        stack: ClientStack, admin: AdminClient, names: Callable[[str], str]) -> None:
    topic = names("async-bad")
    admin.create_topic(topic, 1)
    with Producer(stack.store.url, linger_ms=60_000, batch_messages=10) as producer:
        futures: list[Future[SendResult]] = []
        for i in range(10):
            # a reserved property passes the client and fails the store's check (SPEC P1)
            props = {P.REAL_TOPIC: "elsewhere"} if i == 4 else {}
            futures.append(producer.send_async(topic, f"m{i}", properties=props))
        assert producer.flush(30)
    error = futures[4].exception(0)
    assert isinstance(error, ClepsydraError) and error.http_status == 400
    assert "P1" in str(error)
    assert all(f.exception(0) is None for i, f in enumerate(futures) if i != 4)
    assert _stored(stack, topic) == Counter(f"m{i}" for i in range(10) if i != 4)


def test_close_sends_what_was_accepted_and_then_refuses(
        stack: ClientStack, admin: AdminClient, names: Callable[[str], str]) -> None:
    topic = names("async-close")
    admin.create_topic(topic, 1)
    producer = Producer(stack.store.url, linger_ms=60_000)
    futures = [producer.send_async(topic, f"m{i}") for i in range(300)]
    producer.close()  # no flush first: close() must not drop them
    assert all(f.done() and f.exception() is None for f in futures)
    assert sum(_stored(stack, topic).values()) == 300
    with pytest.raises(ClepsydraError, match="closed"):
        producer.send_async(topic, "late")


def test_an_unreachable_store_fails_the_futures(names: Callable[[str], str]) -> None:
    producer = Producer(f"http://127.0.0.1:{free_port()}", timeout_s=2, linger_ms=1)
    futures = [producer.send_async(names("nowhere"), f"m{i}") for i in range(20)]
    assert producer.flush(30)
    assert all(f.exception(0) is not None for f in futures)
    producer.close()


def test_a_bad_message_is_refused_before_it_is_accepted(stack: ClientStack) -> None:
    with Producer(stack.store.url) as producer:
        with pytest.raises(ClepsydraError):
            producer.send_async("any", "x", delay_level=-1)
        with pytest.raises(ClepsydraError):
            producer.send_async("any", "x", keys=["has space"])
        assert producer.flush(5)
