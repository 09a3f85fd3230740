"""A message's copies read as hops (clepsydra_core.history, DEC-message-history): each kind of
copy, the order, each group's state from its committed offsets, cancel and reschedule."""

from __future__ import annotations

import json
from typing import Any

from clepsydra_core import history, naming
from clepsydra_core import properties as P
from clepsydra_core.wire import history as H
from clepsydra_core.wire.messages import StoredMessage

MSG = "7F000001000000000000000000000001"
TRACE = "0af7651916cd43dd8448eb211c80319c"


def copy(topic: str, offset: int, at: int, props: dict[str, str] | None = None, *,
         queue_offset: int = 0, reconsume: int = 0) -> StoredMessage:
    return StoredMessage(
        msg_id=MSG, offset_msg_id=f"OFF{offset}", topic=topic, queue_id=0,
        queue_offset=queue_offset, commitlog_offset=offset, tags=None, keys="k1",
        flag=0, properties={P.UNIQ_KEY: MSG, P.KEYS: "k1",
                            P.TRACEPARENT: f"00-{TRACE}-b7ad6b7169203331-01",
                            **(props or {})},
        store_timestamp=at, born_timestamp=1000, born_host="10.0.0.7:4000",
        store_host="127.0.0.1:8081", reconsume_times=reconsume, sys_flag=0, body_size=3)


def build(copies: list[StoredMessage], offsets: Any = None,
          parked: dict[int, str] | None = None) -> H.MessageHistory:
    return history.build(history.Inputs(MSG, copies, offsets or {}, parked or {},
                                        lambda level: level * 1000))


def test_a_delayed_message_that_died_and_was_resent_reads_in_order() -> None:
    # SPEC S1, D4, D10, R6, R7, R16
    failures = json.dumps([{"time": 3500, "reason": "boom"}])
    resends = json.dumps([{"time": 9000, "client": "console:ann", "group": "g",
                           "target": "retry"}])
    copies = [
        copy(naming.SCHEDULE_TOPIC, 0, 1000, {P.REAL_TOPIC: "orders", P.DELAY: "2"}),
        copy("orders", 100, 3010, {P.DELIVER_TS: "3000"}),
        copy(naming.SCHEDULE_TOPIC, 200, 3600, {P.REAL_TOPIC: naming.retry_topic("g"),
                                                P.DELAY: "3", P.FAILURE_HISTORY: failures},
             reconsume=1),
        copy(naming.retry_topic("g"), 300, 6700, {P.DELIVER_TS: "6600"}, reconsume=1),
        copy(naming.dlq_topic("g"), 400, 7000, {P.DLQ_REASON: "max_reconsume_times"},
             reconsume=2),
        copy(naming.retry_topic("g"), 500, 9001, {P.RESEND_HISTORY: resends},
             queue_offset=1),
    ]
    offsets = {"g": {"orders": {0: 1}, naming.retry_topic("g"): {0: 2}},
               "h": {"orders": {0: 0}}}
    hist = build(copies, offsets, {0: H.DELIVERED, 200: H.DELIVERED})
    assert [h.kind for h in hist.hops] == [
        H.PRODUCED, H.PARKED, H.HANDED_OVER, H.SENT_BACK, H.RETRY, H.DEAD_LETTER, H.RESENT]
    produced, parked, handed, sent, retry, dead, resent = hist.hops
    assert produced.time == 1000 and produced.host == "10.0.0.7:4000"
    assert produced.trace_id == TRACE and produced.topic == "orders"
    assert parked.level == 2 and parked.deliver_at == 3000 and parked.state == H.DELIVERED
    assert handed.lateness_ms == 10 and handed.topic == "orders"
    assert [(g.group, g.state) for g in handed.groups or []] == [
        ("g", H.CONSUMED), ("h", H.NOT_YET)]
    assert sent.group == "g" and sent.attempt == 1 and sent.reason == "boom"
    assert sent.deliver_at == 6600 and sent.real_topic == naming.retry_topic("g")
    assert retry.lateness_ms == 100 and retry.group == "g"
    assert dead.reason == "max_reconsume_times" and dead.group == "g"
    assert resent.time == 9000 and resent.client == "console:ann" and resent.target == "retry"
    assert [(g.group, g.state) for g in hist.groups] == [("g", H.CONSUMED), ("h", H.NOT_YET)]
    assert hist.topic == "orders" and hist.copies == 6 and hist.complete


def test_group_states_retrying_and_dead() -> None:
    # R6: a dead letter not resent is dead; a retry copy not consumed is retrying
    dead = build([copy("orders", 0, 10), copy(naming.dlq_topic("g"), 50, 20)],
                 {"g": {"orders": {0: 1}}})
    assert [(g.group, g.state) for g in dead.groups] == [("g", H.DEAD)]
    waiting = build([copy("orders", 0, 10),
                     copy(naming.retry_topic("g"), 50, 20, reconsume=1)],
                    {"g": {"orders": {0: 1}}})
    assert [(g.group, g.state) for g in waiting.groups] == [("g", H.RETRYING)]
    assert waiting.hops[1].kind == H.STORED and waiting.hops[2].kind == H.RETRY


def test_a_reschedule_then_a_cancel() -> None:
    # T1: a reschedule is a cancelled parked copy and a new one; a cancel ends the timeline
    copies = [copy(naming.TIMER_TOPIC, 0, 10, {P.REAL_TOPIC: "orders", P.DELIVER_AT: "500"}),
              copy(naming.TIMER_TOPIC, 60, 20, {P.REAL_TOPIC: "orders", P.DELIVER_AT: "900"},
                   queue_offset=1)]
    hist = build(copies, parked={0: H.CANCELLED, 60: H.CANCELLED})
    assert [h.kind for h in hist.hops] == [H.PRODUCED, H.PARKED, H.RESCHEDULED, H.CANCELLED]
    assert [h.state for h in hist.hops[1:3]] == [H.RESCHEDULED, H.CANCELLED]
    assert hist.hops[2].deliver_at == 900 and hist.hops[3].time is None
    known = history.build(history.Inputs(MSG, copies, {}, {0: H.CANCELLED, 60: H.CANCELLED},
                                         lambda level: 0, cancelled_at={60: 777, 0: 555}))
    assert known.hops[3].kind == H.CANCELLED and known.hops[3].time == 777  # the last cancel's
    pending = build(copies[:1], parked={0: H.PENDING})
    assert [h.kind for h in pending.hops] == [H.PRODUCED, H.PARKED]
    assert pending.hops[1].state == H.PENDING


def test_unreadable_lists_and_an_incomplete_look_up() -> None:
    # a client may set FAILURE_HISTORY to anything (R9): it reads, it does not fail
    c = copy(naming.SCHEDULE_TOPIC, 0, 10, {P.REAL_TOPIC: naming.retry_topic("g"),
                                            P.DELAY: "3", P.FAILURE_HISTORY: "not json"})
    hist = history.build(history.Inputs(MSG, [c], {}, {}, lambda level: 0, complete=False))
    assert hist.hops[1].kind == H.SENT_BACK and hist.hops[1].reason == "not json"
    assert not hist.complete
    assert history.json_list('{"a": 1}') == [{"unparsed": '{"a": 1}'}]
    assert history.json_list(None) == []


def test_the_answer_round_trips_its_wire_type() -> None:
    hist = build([copy("orders", 0, 10)], {"g": {"orders": {0: 0}}})
    assert H.MessageHistory.from_json(hist.to_json(), strict=True) == hist
