"""Timers (SPEC T1), the SDK and CLI side without services: delivery times and durations as
the SDK and `clepsydra` take them, the one-of-three delay rule checked before any request, the
request bodies of sends, cancels and reschedules, their answers and errors, and the
`clepsydra timers` text."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from clepsydra_client.cli.commands import Context
from clepsydra_client.cli.main import build_parser, hint, main
from clepsydra_client.cli.render import format_due
from clepsydra_client.cli.timer_commands import timers_text
from clepsydra_client.delivery_time import (
    delay_ms,
    instant_ms,
    parse_duration_ms,
    parse_instant_ms,
)
from clepsydra_client.message import ScheduleChange
from clepsydra_client.producer import OutgoingMessage, Producer
from clepsydra_core.errors import AlreadyDelivered, MessageNotFound, ValidationError
from clepsydra_core.runtime.http import error_from_response
from clepsydra_core.wire.timers import TimerBacklog
from tests.unit.client.fakes import FakeHttp, as_http

JAN_1_2027_9H_UTC = 1_798_794_000_000
ANSWER = {"msgId": "M1", "topic": "SCHEDULE_TOPIC_XXXX", "queueId": 0, "queueOffset": 4,
          "commitLogOffset": 100, "storeTimestamp": 1, "offsetMsgId": "O1"}


def producer_with(fake: FakeHttp) -> Producer:
    return Producer("http://fake", http=as_http(fake))


def sent_bodies(fake: FakeHttp) -> list[Any]:
    return [body for method, _, body in fake.calls if method == "POST"]


# ---- delivery_time.py: the forms ------------------------------------------------------------

@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("90s", 90_000), ("15m", 900_000), ("2h", 7_200_000),
    ("3d", 259_200_000), ("1h30m", 5_400_000), (" 90M ", 5_400_000), ("0s", 0)])
def test_durations_take_a_unit(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["90", "", "1.5h", "-5m", "5 m", "5w", "m"])
def test_durations_without_a_known_unit_are_refused_saying_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="90s, 15m, 2h, 3d"):
        parse_duration_ms(text)


@pytest.mark.parametrize("text", ["2027-01-01T09:00Z", "2027-01-01T09:00:00.000Z",
                                  "2027-01-01T10:00+01:00", "2027-01-01T04:00:00-05:00",
                                  str(JAN_1_2027_9H_UTC)])
def test_times_are_iso_with_a_zone_or_epoch_ms(text: str) -> None:
    assert parse_instant_ms(text) == JAN_1_2027_9H_UTC


def test_a_time_without_zone_is_refused_as_ambiguous() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        parse_instant_ms("2027-01-01T09:00")
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_instant_ms("tomorrow at nine")


def test_naive_datetimes_are_refused_and_aware_ones_converted_never_early() -> None:
    with pytest.raises(ValueError, match="naive datetime is ambiguous"):
        instant_ms(datetime(2027, 1, 1, 9))
    assert instant_ms(datetime(2027, 1, 1, 9, tzinfo=UTC)) == JAN_1_2027_9H_UTC
    paris = timezone(timedelta(hours=1))
    assert instant_ms(datetime(2027, 1, 1, 10, tzinfo=paris)) == JAN_1_2027_9H_UTC
    # a microsecond past a millisecond rounds up: a timer is never early (T2)
    assert instant_ms(datetime(2027, 1, 1, 9, 0, 0, 1, tzinfo=UTC)) == JAN_1_2027_9H_UTC + 1
    assert delay_ms(timedelta(microseconds=1500)) == 2
    assert delay_ms(timedelta(minutes=90)) == 5_400_000
    assert delay_ms(0) == 0


@pytest.mark.parametrize("bad", [-1, timedelta(seconds=-1), 1.5, True, "90s"])
def test_negative_or_mistyped_delays_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="delay"):
        delay_ms(bad)


@pytest.mark.parametrize("bad", [-1, 1.7e12, False, "2027-01-01T09:00Z"])
def test_negative_or_mistyped_times_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="deliver_at"):
        instant_ms(bad)


# ---- the producer: request bodies and the one-of-three rule ---------------------------------

def test_send_puts_deliver_at_or_delay_ms_in_the_request_and_reads_the_answer() -> None:
    fake = FakeHttp(lambda m, p, b: {**ANSWER, "deliverAt": JAN_1_2027_9H_UTC})
    producer = producer_with(fake)
    result = producer.send("orders", "x", deliver_at=datetime(2027, 1, 1, 9, tzinfo=UTC))
    assert result.deliver_at == JAN_1_2027_9H_UTC
    producer.send("orders", "y", deliver_at=JAN_1_2027_9H_UTC)
    producer.send("orders", "z", delay=timedelta(seconds=90))
    producer.send("orders", "w", delay=0)
    producer.send("orders", "v", delay_level=2)
    bodies = sent_bodies(fake)
    assert [b.get("deliverAt") for b in bodies] == [JAN_1_2027_9H_UTC] * 2 + [None] * 3
    assert [b.get("delayMs") for b in bodies] == [None, None, 90_000, 0, None]
    assert [b.get("delayLevel") for b in bodies] == [None] * 4 + [2]
    assert fake.calls[0][1] == "/v1/topics/orders/messages"


def test_an_answer_without_deliver_at_leaves_it_none() -> None:
    result = producer_with(FakeHttp(lambda m, p, b: ANSWER)).send("orders", "x")
    assert result.deliver_at is None


@pytest.mark.parametrize(("kw", "named"), [
    ({"delay_level": 3, "deliver_at": JAN_1_2027_9H_UTC}, "delay_level and deliver_at"),
    ({"delay_level": 3, "delay": 1000}, "delay_level and delay"),
    ({"deliver_at": JAN_1_2027_9H_UTC, "delay": timedelta(0)}, "deliver_at and delay")])
def test_two_delays_are_refused_naming_them_before_any_request(kw: dict[str, Any],
                                                                named: str) -> None:
    # SPEC T1: "giving two of them is a 400 naming the fields" -- the SDK says it first
    fake = FakeHttp(lambda m, p, b: ANSWER)
    producer = producer_with(fake)
    with pytest.raises(ValueError, match=named):
        producer.send("orders", "x", **kw)
    with pytest.raises(ValueError, match=named):
        producer.send_async("orders", "x", **kw)
    with pytest.raises(ValueError, match=named):
        producer.send_batch("orders", [OutgoingMessage("ok")] * 600
                            + [OutgoingMessage("bad", **kw)])
    producer.close()
    assert fake.calls == []


def test_a_naive_datetime_is_refused_before_any_request() -> None:
    fake = FakeHttp(lambda m, p, b: ANSWER)
    with pytest.raises(ValueError, match="ambiguous"):
        producer_with(fake).send("orders", "x", deliver_at=datetime(2027, 1, 1, 9))
    assert fake.calls == []


def test_a_negative_level_is_still_refused_by_rule_l2() -> None:
    with pytest.raises(ValidationError, match="L2"):
        producer_with(FakeHttp()).send("orders", "x", delay_level=-1)


def test_batch_sends_carry_each_message_s_own_time() -> None:
    fake = FakeHttp(lambda m, p, b: {"results": [ANSWER, {**ANSWER, "deliverAt": 7}]})
    results = producer_with(fake).send_batch("orders", [
        OutgoingMessage("a", delay=timedelta(seconds=2)), OutgoingMessage("b", deliver_at=7)])
    messages = fake.calls[0][2]["messages"]
    assert (messages[0]["delayMs"], messages[1]["deliverAt"]) == (2000, 7)
    assert [r.deliver_at for r in results] == [None, 7]


# ---- cancel and reschedule -------------------------------------------------------------------

def test_cancel_by_msg_id_and_by_key() -> None:
    answers = iter([{"status": "cancelled", "msgId": "A B"},
                    {"status": "cancelled", "msgIds": ["M1", "M2"]}])
    fake = FakeHttp(lambda m, p, b: next(answers))
    producer = producer_with(fake)
    one = producer.cancel("A B")
    assert one == ScheduleChange("cancelled", ("A B",), None) and one.msg_id == "A B"
    by_key = producer.cancel(topic="orders", key="order-7")
    assert by_key == ScheduleChange("cancelled", ("M1", "M2"), None)
    assert fake.calls == [
        ("DELETE", "/v1/messages/A%20B", {"params": None, "json": None}),
        ("DELETE", "/v1/messages", {"params": {"topic": "orders", "key": "order-7"},
                                    "json": None})]


def test_reschedule_sends_deliver_at_or_delay_ms_and_reads_the_new_time() -> None:
    answers = iter([{"status": "rescheduled", "msgId": "M1", "deliverAt": JAN_1_2027_9H_UTC},
                    {"status": "rescheduled", "msgIds": ["M1"], "deliverAt": 5}])
    fake = FakeHttp(lambda m, p, b: next(answers))
    producer = producer_with(fake)
    one = producer.reschedule("M1", deliver_at=datetime(2027, 1, 1, 9, tzinfo=UTC))
    assert one == ScheduleChange("rescheduled", ("M1",), JAN_1_2027_9H_UTC)
    by_key = producer.reschedule(topic="orders", key="k", delay=timedelta(minutes=15))
    assert by_key.deliver_at == 5 and by_key.to_json() == {
        "status": "rescheduled", "msgIds": ["M1"], "deliverAt": 5}
    assert fake.calls == [
        ("PATCH", "/v1/messages/M1", {"params": None,
                                      "json": {"deliverAt": JAN_1_2027_9H_UTC}}),
        ("PATCH", "/v1/messages", {"params": {"topic": "orders", "key": "k"},
                                   "json": {"delayMs": 900_000}})]


@pytest.mark.parametrize(("args", "kw", "says"), [
    ((), {"delay": 1}, "msg_id, or both topic and key"),
    ((), {"topic": "orders", "delay": 1}, "msg_id, or both topic and key"),
    (("M1",), {"key": "k", "delay": 1}, "not both"),
    (("",), {"delay": 1}, "empty"),
    (("M1",), {}, "exactly one of deliver_at, delay"),
    (("M1",), {"delay": 1, "deliver_at": 2}, "exactly one of deliver_at, delay"),
    (("M1",), {"deliver_at": datetime(2027, 1, 1)}, "ambiguous")])
def test_reschedule_arguments_are_checked_before_any_request(args: tuple[str, ...],
                                                             kw: dict[str, Any],
                                                             says: str) -> None:
    fake = FakeHttp()
    with pytest.raises(ValueError, match=says):
        producer_with(fake).reschedule(*args, **kw)
    assert fake.calls == []


def test_cancel_needs_a_msg_id_or_topic_and_key() -> None:
    with pytest.raises(ValueError, match="topic and key"):
        producer_with(FakeHttp()).cancel(key="k")


def test_409_already_delivered_and_404_are_typed_errors() -> None:
    delivered = error_from_response(409, {"error": "ALREADY_DELIVERED",
                                          "message": "M1 was delivered"}, "u")
    assert isinstance(delivered, AlreadyDelivered) and delivered.http_status == 409
    unknown = error_from_response(404, {"error": "MESSAGE_NOT_FOUND", "message": "no"}, "u")
    assert isinstance(unknown, MessageNotFound)

    def handler(method: str, path: str, body: Any) -> dict[str, Any]:
        raise delivered

    with pytest.raises(AlreadyDelivered):
        producer_with(FakeHttp(handler)).cancel("M1")


# ---- the command line ------------------------------------------------------------------------

def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_send_reads_at_and_in() -> None:
    args = build_parser().parse_args(["send", "orders", "x", "--at", "2027-01-01T09:00Z"])
    assert (args.deliver_at, args.delay_ms, args.delay_level) == (JAN_1_2027_9H_UTC, None, 0)
    args = build_parser().parse_args(["send", "orders", "x", "--in", "90m"])
    assert (args.deliver_at, args.delay_ms) == (None, 5_400_000)


@pytest.mark.parametrize("argv", [
    ["send", "t", "x", "--in", "90m", "--delay-level", "2"],
    ["send", "t", "x", "--in", "90m", "--at", "2027-01-01T09:00Z"],
    ["send", "t", "x", "--in", "90"],
    ["send", "t", "x", "--at", "2027-01-01T09:00"],
    ["message", "reschedule", "M1"],
    ["message", "reschedule", "M1", "--in", "1m", "--at", "2027-01-01T09:00Z"],
    ["message", "cancel"],
    ["message", "cancel", "--topic", "orders"],
    ["message", "cancel", "M1", "--topic", "orders", "--key", "k"]])
def test_bad_time_arguments_are_usage_errors_before_any_request(argv: list[str]) -> None:
    # no store runs here: a request would exit 1 ("did not answer"), a usage error exits 2
    code, out, err = run("--store-url", "http://127.0.0.1:9", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "did not answer" not in err


def test_reschedule_parses_its_target_and_time() -> None:
    args = build_parser().parse_args(["message", "reschedule", "--topic", "orders", "--key",
                                      "k", "--in", "15m"])
    assert (args.msg_id, args.topic, args.key, args.delay_ms) == (None, "orders", "k", 900_000)
    args = build_parser().parse_args(["message", "cancel", "M1"])
    assert args.msg_id == "M1"


def test_already_delivered_says_it_cannot_be_taken_back() -> None:
    ctx = Context("http://s", "http://r", json=False, timeout_s=1.0)
    assert "cannot be taken back" in hint(AlreadyDelivered("M1 was delivered"), ctx)


def test_timers_text_shows_backlog_by_hour_and_lateness() -> None:
    now = JAN_1_2027_9H_UTC
    backlog = TimerBacklog.from_json({
        "pending": 1230, "byHourAhead": [{"hour": 0, "count": 1200}, {"hour": 5, "count": 30}],
        "handedOver": 17, "nextDueAt": now + 2_500,
        "lateness": {"p50": 3, "p99": 9, "max": 1500}})
    text = timers_text(backlog, now)
    assert "pending      1230" in text and "handed over  17" in text
    assert "(in 2.5s)" in text and "p50 3ms, p99 9ms, max 1.5s" in text
    lines = text.splitlines()
    assert lines[-2:] == ["0-1h            1200", "5-6h              30"]
    empty = TimerBacklog.from_json({"pending": 0, "byHourAhead": [], "handedOver": 0,
                                    "nextDueAt": None, "lateness": None})
    text = timers_text(empty, now)
    assert "(no pending timer)" in text and "no hand-over remembered yet" in text
    assert "next due     -" in text


def test_format_due_says_in_how_long_or_due_now() -> None:
    assert format_due(None) == "-"
    assert format_due(10_000, now_ms=4_000).endswith("(in 6.0s)")
    assert format_due(1_000, now_ms=4_000).endswith("(due now)")
