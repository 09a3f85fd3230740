"""Send-back through the retry service and the R9 fallback; R10/R12 dead-lettering."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from clepsydra_client.consumer.sendback import SendBack, failure_reason, fallback_properties
from clepsydra_client.message import Message
from clepsydra_client.settings import ensure_tracing
from clepsydra_core import properties as P
from clepsydra_core.errors import Unavailable
from clepsydra_core.runtime import telemetry
from tests.unit.client.fakes import FakeHttp, FakeRetry, as_http, failing, sent_back, stored

if TYPE_CHECKING:
    from collections.abc import Callable

    pass

MSG = Message(msg_id="M1", topic="orders", body=b"payload", queue_offset=3,
              commitlog_offset=4096, tags="paid", keys=("o-1", "o-2"), reconsume_times=2,
              properties={P.TAGS: "paid", P.KEYS: "o-1 o-2", P.UNIQ_KEY: "U1",
                          P.TRACEPARENT: "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
                          P.REAL_TOPIC: "orders", P.DELIVER_TS: "1", "user": "v"},
              store_topic="orders")


def store_answer(topic: str = "%RETRY%g", retry_max_times: int = 16
                 ) -> Callable[[str, str, Any], dict[str, Any]]:
    """The store's answers: the group's settings (read by the fallback, R5), or a produce."""
    def handler(method: str, path: str, body: Any) -> dict[str, Any]:
        if method == "GET" and path.endswith("/settings"):
            return {"group": "g", "retryQueueNums": 1, "retryMaxTimes": retry_max_times}
        if body is not None and body.get("delayLevel") is None and \
                int(body["properties"][P.RECONSUME_TIME]) >= \
                int(body["properties"][P.MAX_RECONSUME_TIMES]):
            return stored("%DLQ%g")  # R10
        return stored(topic)
    return handler


def posts(store: FakeHttp) -> list[tuple[str, str, Any]]:
    """The produce calls the fallback made (the settings read left out)."""
    return [call for call in store.calls if call[0] == "POST"]


def test_send_back_calls_the_retry_service_with_reason_and_consumer() -> None:  # SPEC R1, R11
    retry = FakeRetry(lambda item: sent_back("RETRY", "%RETRY%g", 5, "X"))
    store = FakeHttp()
    ensure_tracing("none")  # what a consumer does: spans have ids even when not exported
    sb = SendBack("g", "10.0.0.1@1", store=as_http(store), retry=as_http(retry))
    outcome = sb.send_back(MSG, 0, None, "ValueError: bad")
    assert outcome.outcome == "RETRY" and not outcome.fallback
    assert retry.calls[0][:2] == ("POST", "/v1/groups/g/send-back/batch")
    item = dict(retry.items[0])
    # the item names the attempt's own context (a batch gathers several threads' send-backs)
    traceparent = item.pop(P.TRACEPARENT)
    assert traceparent.startswith("00-") and traceparent.split("-")[1] != "0" * 32
    assert item == {"commitLogOffset": 4096, "delayLevel": 0, "originTopic": "orders",
                    "reason": "ValueError: bad", "consumerId": "10.0.0.1@1",
                    "topic": "orders", "queueId": 0, "queueOffset": 3}
    assert len(retry.items) == 1
    assert store.calls == []


def test_without_the_batch_route_send_back_is_one_call_each_without_hints() -> None:  # SPEC R1
    retry = FakeRetry(lambda item: sent_back("RETRY"), batch_route=False)
    sb = SendBack("g", "c", store=as_http(FakeHttp()), retry=as_http(retry))
    sb.send_back(MSG, 2, None, "r")
    sb.send_back(MSG, 2, None, "r")
    assert [c[1] for c in retry.calls] == ["/v1/groups/g/send-back/batch",
                                           "/v1/groups/g/send-back", "/v1/groups/g/send-back"]
    assert "queueOffset" not in retry.items[-1]


def test_concurrent_send_backs_share_batches() -> None:  # SPEC R1
    import threading

    retry = FakeRetry(lambda item: sent_back("RETRY"))
    sb = SendBack("g", "c", store=as_http(FakeHttp()), retry=as_http(retry))
    assert sb.batcher is not None
    sb.batcher.linger_s = 0.05
    threads = [threading.Thread(target=sb.send_back, args=(MSG, 0, None, f"r{i}"))
               for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(i["reason"] for i in retry.items) == sorted(f"r{i}" for i in range(20))
    assert len(retry.batches) < 20


def test_a_failed_item_takes_the_fallback() -> None:  # SPEC R9
    retry = FakeRetry(lambda item: {"error": "SYSTEM_ERROR", "message": "no message"})
    store = FakeHttp(store_answer())
    sb = SendBack("g", "c", store=as_http(store), retry=as_http(retry))
    assert sb.send_back(MSG, 0, None, "r").fallback
    assert posts(store)[0][1] == "/v1/topics/%25RETRY%25g/messages"


def test_max_reconsume_times_is_sent_only_when_configured() -> None:  # SPEC R5
    retry = FakeRetry(lambda item: sent_back("DLQ"))
    sb = SendBack("g", "c", store=as_http(FakeHttp()), retry=as_http(retry))
    sb.send_back(MSG, -1, 4, "r")
    sb.send_back(MSG, 0, None, "r")
    assert retry.items[0]["maxReconsumeTimes"] == 4 and retry.items[0]["delayLevel"] == -1
    assert "maxReconsumeTimes" not in retry.items[1]


def test_fallback_sends_a_new_message_to_the_retry_topic() -> None:  # SPEC R9
    store = FakeHttp(store_answer())
    sb = SendBack("g", "c1", store=as_http(store),
                  retry=as_http(FakeHttp(failing(Unavailable("down")))))
    ensure_tracing("none")
    with telemetry.tracer("test").start_as_current_span(
            "client.consume", context=telemetry.extract(MSG.properties)):
        outcome = sb.send_back(MSG, 0, None, "boom")
    assert outcome.fallback and outcome.outcome == "RETRY"
    method, path, body = posts(store)[0]
    assert (method, path) == ("POST", "/v1/topics/%25RETRY%25g/messages")
    assert body["delayLevel"] == 3 + 2  # 3 + reconsumeTimes
    assert body["body"] == "payload" and body["tags"] == "paid" and body["keys"] == "o-1 o-2"
    props = body["properties"]
    assert props[P.RETRY_TOPIC] == "orders"
    assert props[P.RECONSUME_TIME] == "3"
    assert props[P.MAX_RECONSUME_TIMES] == "16"
    assert props[P.ORIGIN_MESSAGE_ID] == "M1"
    assert props[P.UNIQ_KEY] == "U1" and props["user"] == "v"
    # the copy continues from this attempt (its client.send_back span), in the message's trace
    _, trace_id, span_id, _ = props[P.TRACEPARENT].split("-")
    assert trace_id == "a" * 32 and span_id != "b" * 16
    for reserved in (P.TAGS, P.KEYS, P.REAL_TOPIC, P.DELIVER_TS):
        assert reserved not in props  # the store refuses reserved names from clients
    history = json.loads(props[P.FAILURE_HISTORY])
    assert history[-1]["consumer"] == "c1" and history[-1]["reason"] == "boom"
    assert history[-1]["reconsumeTimes"] == 2


def test_fallback_keeps_the_first_origin_and_the_listener_level() -> None:  # SPEC R4, R8, R11
    retried = Message(**{**{f: getattr(MSG, f) for f in Message.__dataclass_fields__},
                         "properties": {P.RETRY_TOPIC: "first", P.ORIGIN_MESSAGE_ID: "M0"}})
    store = FakeHttp(store_answer())
    sb = SendBack("g", "c", store=as_http(store), retry=None)
    sb.send_back(retried, 7, 5, "r")
    body = posts(store)[0][2]
    assert body["delayLevel"] == 7
    assert body["properties"][P.RETRY_TOPIC] == "first"
    assert body["properties"][P.ORIGIN_MESSAGE_ID] == "M0"
    assert body["properties"][P.MAX_RECONSUME_TIMES] == "5"


def test_fallback_dead_letters_level_minus_one_through_r10() -> None:  # SPEC R9, R10, R11
    store = FakeHttp(store_answer("%DLQ%g"))
    sb = SendBack("g", "c", store=as_http(store), retry=None)
    outcome = sb.send_back(MSG, -1, 6, "r")
    body = posts(store)[0][2]
    assert "delayLevel" not in body
    assert body["properties"][P.RECONSUME_TIME] == "6"
    assert outcome.outcome == "DLQ"


def test_orderly_dead_letter_sends_reconsume_time_equal_to_max() -> None:  # SPEC R12, R10
    store = FakeHttp(store_answer("%DLQ%g"))
    sb = SendBack("g", "c", store=as_http(store), retry=as_http(FakeHttp()))
    outcome = sb.dead_letter(MSG, 3, "still failing")
    body = posts(store)[0][2]
    assert body["properties"][P.RECONSUME_TIME] == "3"
    assert body["properties"][P.MAX_RECONSUME_TIMES] == "3"
    assert outcome.outcome == "DLQ"


def test_failure_reason_names_type_and_text() -> None:
    assert failure_reason(ValueError("bad order")) == "ValueError: bad order"
    assert failure_reason(KeyError()) == "KeyError"
    assert failure_reason(None) == "listener returned RECONSUME_LATER"


def test_fallback_properties_trim_history() -> None:
    props = fallback_properties(MSG, reconsume_times=1, max_reconsume_times=2, reason="x",
                                consumer_id="c")
    assert json.loads(props[P.FAILURE_HISTORY])[0]["reason"] == "x"


def test_fallback_keeps_a_max_of_zero_and_reads_minus_one_as_the_default() -> None:
    # SPEC R5, R9: 0 stayed 16 before, -1 went out as -1 (dead-letter at once)
    store = FakeHttp(store_answer())
    sb = SendBack("g", "c", store=as_http(store), retry=None)
    sb.send_back(MSG, 0, 0, "r")
    sb.send_back(MSG, 0, -1, "r")
    assert posts(store)[0][2]["properties"][P.MAX_RECONSUME_TIMES] == "0"
    assert posts(store)[1][2]["properties"][P.MAX_RECONSUME_TIMES] == "16"


def test_fallback_gives_the_services_ladder() -> None:
    # SPEC R5, R6, R9, R10: the service dead-letters when reconsumeTimes >= max
    # (the group's retryMaxTimes, read from the store); the fallback did one retry less
    def at(reconsume: int) -> Message:
        return Message(**{**{f: getattr(MSG, f) for f in Message.__dataclass_fields__},
                          "reconsume_times": reconsume})

    store = FakeHttp(store_answer(retry_max_times=5))
    sb = SendBack("g", "c", store=as_http(store), retry=None)
    last_retry = sb.send_back(at(4), 0, None, "r")
    assert last_retry.outcome == "RETRY"
    body = posts(store)[0][2]
    assert body["delayLevel"] == 3 + 4  # delayed: R10 leaves it alone
    assert body["properties"][P.RECONSUME_TIME] == "5"
    assert body["properties"][P.MAX_RECONSUME_TIMES] == "5"
    dead = sb.send_back(at(5), 0, None, "r")
    assert dead.outcome == "DLQ"
    assert "delayLevel" not in posts(store)[1][2]  # a plain send: R10 reroutes it
    assert sum(1 for c in store.calls if c[0] == "GET") == 1  # the settings read is cached
