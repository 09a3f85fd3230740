"""Parsing and validation of what clients send (groups, send-back, DLQ actions and filters), the
OpenAPI document against the app's routes, and the in-memory twins. No network."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest

from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.groups import GroupSettings, validate_settings
from clepsydra_core.msgid import encode_msg_id, pack_host
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry.app import create_app
from clepsydra_retry.dlq_filter import matches, parse_action, parse_query
from clepsydra_retry.dlq_state import Floor, MemoryDlqState
from clepsydra_retry.groups import MemoryGroupStore
from clepsydra_retry.sendback import parse_request
from clepsydra_retry.settings import RetrySettings

HOST = pack_host("127.0.0.1:8081")


def msg_id(offset: int) -> str:
    return encode_msg_id(HOST, offset)


# ---- group settings ------------------------------------------------------------------------
def test_empty_settings_mean_defaults() -> None:  # SPEC R3, R5
    assert validate_settings({}, None) == GroupSettings(1, 16)


def test_settings_merge_over_current() -> None:
    current = GroupSettings(4, 5)
    assert validate_settings({"retryMaxTimes": 9}, current) == GroupSettings(4, 9)


def test_zero_queues_is_allowed() -> None:  # SPEC R2
    assert validate_settings({"retryQueueNums": 0}, None).retry_queue_nums == 0


@pytest.mark.parametrize("body", [
    {"retryQueueNums": -1}, {"retryMaxTimes": -5}, {"retryQueueNums": 65},
    {"retryMaxTimes": 2**31}, {"retryQueueNums": "2"}, {"retryQueueNums": True},
    {"retryQueueNums": 1.5}, {"retryQueueNum": 2}, [], "x",
])
def test_bad_settings_are_refused(body: Any) -> None:
    with pytest.raises(ValidationError) as err:
        validate_settings(body, None)
    assert err.value.http_status == 400


# ---- send-back bodies ----------------------------------------------------------------------
def test_send_back_by_offset_or_msg_id() -> None:  # SPEC R1
    locator, request = parse_request({"commitLogOffset": 42})
    assert locator.commitlog_offset == 42 and locator.msg_id is None
    assert request.delay_level == 0 and request.max_reconsume_times is None
    locator, _ = parse_request({"msgId": msg_id(42).lower(), "commitLogOffset": 42})
    assert locator.commitlog_offset == 42 and locator.msg_id == msg_id(42).lower()
    # a msgId alone (the unique id, or an offsetMsgId) is found by the store's
    # look-up by msgId; any id a producer may give
    locator, _ = parse_request({"msgId": "ORDER-1-UNIQ", "topic": "T", "queueId": 0,
                                "queueOffset": 3})
    assert locator.commitlog_offset is None and locator.msg_id == "ORDER-1-UNIQ"
    assert locator.hint == ("T", 0, 3)


def test_send_back_full_body() -> None:
    _, request = parse_request({"commitLogOffset": 1, "delayLevel": -1, "maxReconsumeTimes": 3,
                                "originTopic": "T", "reason": "E: x", "consumerId": "c"})
    assert (request.delay_level, request.max_reconsume_times, request.origin_topic,
            request.reason, request.consumer_id) == (-1, 3, "T", "E: x", "c")


def test_any_negative_level_and_a_max_of_minus_one_are_taken() -> None:
    # SPEC R5, R6: RocketMQ's rules; -2 was a 400, -1 as max too
    _, request = parse_request({"commitLogOffset": 1, "delayLevel": -2, "maxReconsumeTimes": -1})
    assert (request.delay_level, request.max_reconsume_times) == (-2, -1)


@pytest.mark.parametrize("body", [
    None, [], {}, {"delayLevel": 1}, {"commitLogOffset": -1}, {"commitLogOffset": "12"},
    {"commitLogOffset": 1.5}, {"msgId": "not an id"}, {"msgId": 12}, {"msgId": "x" * 256},
    {"commitLogOffset": 1, "delayLevel": -2**31 - 1},
    {"commitLogOffset": 1, "delayLevel": "3"}, {"commitLogOffset": 1, "maxReconsumeTimes": -2},
    {"commitLogOffset": 1, "maxReconsumeTimes": 2**31}, {"commitLogOffset": 1, "reason": 5},
    {"commitLogOffset": 1, "delayLevel": True}, {"commitLogOffset": 1, "surprise": 1},
])
def test_malformed_send_back_is_refused(body: Any) -> None:
    with pytest.raises(ValidationError) as err:
        parse_request(body)
    assert err.value.http_status == 400


def test_integral_numbers_are_integers() -> None:
    # JSON Schema's integer, which the document says, takes 1.0
    assert parse_request({"commitLogOffset": 1.0})[1].commitlog_offset == 1


# ---- DLQ actions and filters ---------------------------------------------------------------
def test_resend_action_shapes() -> None:  # SPEC R16
    one = parse_action({"msgIds": [msg_id(1), msg_id(1)]}, resend=True, max_level=18)
    # deduplicated: by default into the group's own retry topic
    assert one.msg_ids == (msg_id(1),) and one.target == "retry"
    every = parse_action({"all": True, "target": "retry", "delayLevel": 2,
                          "maxPerSecond": 50}, resend=True, max_level=18)
    assert every.all and every.delay_level == 2 and every.max_per_second == 50.0
    some = parse_action({"filter": {"topic": "T", "fromMs": 5}}, resend=True, max_level=18)
    assert some.filter == DlqFilter(topic="T", from_ms=5)
    assert some.describe(10).to_json() == {"filter": {"topic": "T", "fromMs": 5},
                                           "target": "retry", "delayLevel": 0}
    home = parse_action({"all": True, "target": "origin"}, resend=True, max_level=18)
    assert home.target == "origin"


@pytest.mark.parametrize("body", [
    {}, {"all": True, "msgIds": ["x"]}, {"msgIds": []}, {"msgIds": ["z z"]}, {"msgIds": "x"},
    {"all": "yes"}, {"filter": {}}, {"filter": {"bogus": 1}}, {"filter": {"fromMs": -1}},
    {"filter": {"topic": None}}, {"all": True, "target": "elsewhere"},
    {"all": True, "target": "origin", "delayLevel": 2},
    {"all": True, "target": "retry", "delayLevel": 19},
    {"all": True, "target": "retry", "delayLevel": -1}, {"all": True, "maxPerSecond": 0},
    {"all": True, "maxPerSecond": "fast"}, {"all": True, "extra": 1}, [1],
])
def test_malformed_resend_is_refused(body: Any) -> None:
    with pytest.raises(ValidationError) as err:
        parse_action(body, resend=True, max_level=18)
    assert err.value.http_status == 400


def test_purge_takes_no_target() -> None:
    with pytest.raises(ValidationError):
        parse_action({"all": True, "target": "retry"}, resend=False, max_level=18)
    assert parse_action({"all": True}, resend=False, max_level=18).all


def dead(topic: str = "T", keys: str = "", uniq: str | None = None, reason: str = "",
         history: list[dict[str, Any]] | None = None, stored_ms: int = 100) -> StoredMessage:
    props = {P.RETRY_TOPIC: topic, P.DLQ_REASON: reason, P.KEYS: keys,
             P.FAILURE_HISTORY: json.dumps(history or [])}
    if uniq:
        props[P.UNIQ_KEY] = uniq
    return StoredMessage("0A", "0A", "%DLQ%g", 0, 0, 0, None, keys, 0, props, stored_ms,
                         stored_ms, "h:1", "h:2", 0, 0, 0)


def test_filter_matches_each_field() -> None:  # SPEC R16
    assert matches(DlqFilter(topic="T"), dead("T"))
    assert not matches(DlqFilter(topic="T"), dead("U"))
    assert matches(DlqFilter(key="k2"), dead(keys="k1 k2"))
    assert matches(DlqFilter(key="u"), dead(uniq="u"))
    assert not matches(DlqFilter(key="k"), dead(keys="k1 k2"))
    assert matches(DlqFilter(reason="max_reconsume"), dead(reason="max_reconsume_times"))
    assert matches(DlqFilter(reason="timeout"), dead(history=[{"reason": "TimeoutError: 3s"}]))
    assert not matches(DlqFilter(reason="timeout"), dead(history=[{"reason": "KeyError"}]))
    assert matches(DlqFilter(from_ms=100, to_ms=101), dead(stored_ms=100))
    assert not matches(DlqFilter(to_ms=100), dead(stored_ms=100))
    assert not matches(DlqFilter(from_ms=101), dead(stored_ms=100))


def test_empty_window_selects_none() -> None:
    # toMs at or before fromMs is a window with nothing in it, not a 400 (the
    # document cannot say "after fromMs"; one shared DlqFilter)
    flt = parse_action({"filter": {"fromMs": 5, "toMs": 5}}, resend=True, max_level=18).filter
    assert flt == DlqFilter(from_ms=5, to_ms=5)
    assert not matches(flt, dead(stored_ms=5))


def test_query_filter_parses_text() -> None:
    flt = parse_query({"fromMs": "10", "toMs": None, "key": None})
    assert flt == DlqFilter(from_ms=10)
    for bad in ("ten", "", str(2**63)):  # the document says int64
        with pytest.raises(ValidationError):
            parse_query({"fromMs": bad})


# ---- in-memory twins -----------------------------------------------------------------------
def test_memory_dlq_state_floor_and_compaction() -> None:
    state = MemoryDlqState()
    state.remove("g", [msg_id(10), msg_id(50)])
    assert state.removed_flags("g", [msg_id(10), msg_id(11)]) == [True, False]
    state.raise_floor("g", Floor(3, 20), compact=True)
    assert state.floor("g") == Floor(3, 20)
    assert state.removed_flags("g", [msg_id(10), msg_id(50)]) == [False, True]
    state.raise_floor("g", Floor(1, 5), compact=False)  # never down
    assert state.floor("g") == Floor(3, 20)
    for n in range(5):
        state.append_audit("g", {"n": n}, keep=3)
    assert state.audit("g", 2) == [{"n": 3}, {"n": 4}]


def test_memory_group_store_counts() -> None:
    groups = MemoryGroupStore()
    assert groups.put("g", GroupSettings()) and not groups.put("g", GroupSettings(2, 3))
    groups.count_send_back("g", "RETRY", 2)
    assert groups.send_back_counts("g") == {"RETRY": 2} and groups.names() == ["g"]


# ---- the OpenAPI document is true to the routes --------------------------------------------
def test_openapi_lists_every_route_and_method() -> None:
    settings = RetrySettings.for_test("http://127.0.0.1:9", "redis://127.0.0.1:9/0")
    app = create_app(settings, groups=MemoryGroupStore(), dlq_state=MemoryDlqState())
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?msg_id>", "{msgId}", rule.rule.replace("<group>", "{group}"))
        routes.setdefault(path, set()).update(m.lower() for m in rule.methods or ()
                                              if m not in ("HEAD", "OPTIONS"))
    doc = json.loads(resources.files("clepsydra_retry").joinpath("openapi.json").read_text())
    documented = {path: {m for m in ops if m in ("get", "put", "post", "delete", "patch")}
                  for path, ops in doc["paths"].items()}
    assert documented == routes
    served = app.test_client().get("/openapi.json")
    assert served.status_code == 200 and served.get_json() == doc


# ---- pull windows for hinted batches -------------------------------------------------------
def test_pull_windows_cover_dense_runs_only() -> None:
    from clepsydra_retry.headers import PULL_MAX, _runs

    assert _runs([5]) == [(5, 1)]
    assert _runs([0, 1, 2, 3]) == [(0, 4)]
    assert _runs([0, 2, 4, 6]) == [(0, 7)]  # sparse but cheap: one pull
    assert _runs([0, 1, 500]) == [(0, 2), (500, 1)]  # a far outlier gets its own pull
    assert _runs(list(range(2500))) == [(0, PULL_MAX), (PULL_MAX, PULL_MAX), (2000, 500)]


def test_hints_come_in_threes() -> None:
    _, _ = parse_request({"commitLogOffset": 1, "topic": "T", "queueId": 0, "queueOffset": 3})
    with pytest.raises(ValidationError):
        parse_request({"commitLogOffset": 1, "topic": "T", "queueId": 0})
