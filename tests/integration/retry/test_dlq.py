"""The DLQ toolkit against the real store and Redis (SPEC R16 Beyond): list, filter, show,
resend (one, filter, all, into the retry topic, rate-limited), purge, audit; bad input changes
nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import redis
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core import properties as P
from tools.processes import Process

if TYPE_CHECKING:
    from tests.integration.retry.conftest import RetryStack

pytestmark = pytest.mark.integration

Names = Callable[[str], str]


class Dlq:
    """A group with dead letters made through the retry service (send-back with level -1)."""

    def __init__(self, stack: RetryStack, names: Names) -> None:
        self.stack = stack
        self.group = names("G")
        self.topic = names("T")
        self.other = names("U")
        stack.put_group(self.group)
        stack.create_topic(self.topic)
        stack.create_topic(self.other)
        self.base = f"{stack.retry.url}/v1/groups/{self.group}/dlq"

    def kill(self, topic: str | None = None, body: str = "b", reason: str = "Boom",
             **fields: Any) -> dict[str, Any]:
        """Produce a message and dead-letter it; the DLQ message's store view."""
        sent = self.stack.produce(topic or self.topic, body, **fields)
        result = self.stack.ok_send_back(self.group, commitLogOffset=sent["commitLogOffset"],
                                         delayLevel=-1, reason=reason, consumerId="c1")
        return self.stack.by_msg_id(result["msgId"])

    def ids(self, **params: Any) -> list[str]:
        return self.stack.dlq_ids(self.group, **params)

    def post(self, action: str, body: Any, client: str = "tester") -> Any:
        return self.stack.http.post(f"{self.base}/{action}", json=body,
                                    headers={"X-Client-Id": client})

    def audit(self) -> list[dict[str, Any]]:
        resp = self.stack.http.get(f"{self.base}/audit")
        assert resp.status_code == 200, resp.text
        records: list[dict[str, Any]] = resp.json()["records"]
        return records


@pytest.fixture
def dlq(stack: RetryStack, names: Names) -> Dlq:
    return Dlq(stack, names)


def test_list_is_paged_by_queue_offset(dlq: Dlq) -> None:  # SPEC R16
    dead = [dlq.kill(body=f"m{n}")["msgId"] for n in range(5)]
    page = dlq.stack.dlq(dlq.group, max=2)
    assert [m["msgId"] for m in page["messages"]] == dead[:2]
    assert page["nextOffset"] == 2 and page["maxOffset"] == 5
    page = dlq.stack.dlq(dlq.group, max=2, offset=page["nextOffset"])
    assert [m["msgId"] for m in page["messages"]] == dead[2:4]
    page = dlq.stack.dlq(dlq.group, max=2, offset=page["nextOffset"])
    assert [m["msgId"] for m in page["messages"]] == dead[4:]
    assert dlq.stack.dlq(dlq.group, offset=5)["messages"] == []
    first = dlq.stack.dlq(dlq.group, max=1)["messages"][0]
    assert first["body"] == "m0" and first["originTopic"] == dlq.topic
    assert first["dlqReason"] == "level_negative" and first["attempts"] == 1


def test_empty_dlq_lists_nothing(dlq: Dlq) -> None:
    assert dlq.stack.dlq(dlq.group) == {"messages": [], "nextOffset": 0, "maxOffset": 0}


def test_filters(dlq: Dlq) -> None:  # SPEC R16: original topic, key, reason, time range
    a = dlq.kill(keys="alpha common", reason="TimeoutError: slow")["msgId"]
    b = dlq.kill(topic=dlq.other, keys="beta common", reason="KeyError: 'x'")["msgId"]
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    c = dlq.kill(properties={P.UNIQ_KEY: "uniq-c"}, reason="ValueError")["msgId"]
    assert dlq.ids(topic=dlq.topic) == [a, c]
    assert dlq.ids(topic=dlq.other) == [b]
    assert dlq.ids(key="common") == [a, b] and dlq.ids(key="uniq-c") == [c]
    assert dlq.ids(reason="timeout") == [a] and dlq.ids(reason="keyerror") == [b]
    assert dlq.ids(reason="level_negative") == [a, b, c]  # DLQ_REASON matches too
    assert dlq.ids(fromMs=middle) == [c] and dlq.ids(toMs=middle) == [a, b]
    assert dlq.ids(topic=dlq.topic, key="common") == [a]
    resp = dlq.stack.http.get(dlq.base, params={"fromMs": "yesterday"})
    assert resp.status_code == 400 and "fromMs" in resp.json()["message"]
    assert dlq.stack.http.get(dlq.base, params={"max": 0}).status_code == 400


def test_show_one_with_history(dlq: Dlq) -> None:  # SPEC R16
    dead = dlq.kill(body="show me", reason="IOError: disk")
    resp = dlq.stack.http.get(f"{dlq.base}/{dead['msgId']}")
    assert resp.status_code == 200
    shown = resp.json()
    assert shown["body"] == "show me" and shown["msgId"] == dead["msgId"]
    assert shown["failureHistory"][0]["reason"] == "IOError: disk"
    assert shown["failureHistory"][0]["consumer"] == "c1"
    sent = dlq.stack.produce(dlq.topic)  # a message that is not a dead letter
    resp = dlq.stack.http.get(f"{dlq.base}/{sent['msgId']}")
    assert resp.status_code == 404 and resp.json()["error"] == "NOT_IN_DLQ"
    assert sent["msgId"] in resp.json()["message"]
    assert dlq.stack.http.get(f"{dlq.base}/not a msgid").status_code == 400
    # any id a producer gave is a msgId; one nobody has is just not there
    assert dlq.stack.http.get(f"{dlq.base}/not-a-msgid").status_code == 404


def test_resend_one_to_the_original_topic(dlq: Dlq) -> None:  # SPEC R16
    keep = dlq.kill(body="stays")["msgId"]
    dead = dlq.kill(body="comes back", tags="TG", properties={"app": "v"})
    before = dlq.stack.pull_all(dlq.topic)
    resp = dlq.post("resend", {"msgIds": [dead["msgId"]], "target": "origin"})
    assert resp.status_code == 200 and resp.json()["resent"] == 1
    after = dlq.stack.pull_all(dlq.topic)
    assert len(after) == len(before) + 1
    back = next(m for m in after if m["body"] == "comes back" and m not in before)
    assert back["reconsumeTimes"] == 0 and back["tags"] == "TG"
    assert back["properties"]["app"] == "v" and P.DLQ_REASON not in back["properties"]
    assert back["properties"][P.FAILURE_HISTORY] == dead["properties"][P.FAILURE_HISTORY]
    assert dlq.ids() == [keep]  # hidden from listings
    shown = dlq.stack.http.get(f"{dlq.base}/{dead['msgId']}")
    assert shown.status_code == 404 and shown.json()["error"] == "NOT_IN_DLQ"


def test_resend_of_a_message_not_in_the_dlq_changes_nothing(dlq: Dlq) -> None:
    dead = dlq.kill()["msgId"]
    other = dlq.stack.produce(dlq.topic)["msgId"]
    missing = "7F00000100001F9100000000075BCD15"
    before = dlq.stack.written(dlq.group, dlq.topic)
    for ids in ([other], [dead, other], [dead, missing]):
        resp = dlq.post("resend", {"msgIds": ids})
        assert resp.status_code == 404, ids
        assert resp.json()["error"] == "NOT_IN_DLQ" and ids[-1] in resp.json()["message"]
    resp = dlq.post("resend", {"msgIds": ["z z"]})
    assert resp.status_code == 400 and resp.json()["error"] == "INVALID_MSG_ID"
    for bad in ({}, {"all": True, "msgIds": [dead]}, {"filter": {}}, {"all": True, "x": 1},
                {"all": True, "target": "retry", "delayLevel": 99}, [dead]):
        assert dlq.post("resend", bad).status_code == 400, bad
    assert dlq.stack.written(dlq.group, dlq.topic) == before
    assert dlq.ids() == [dead] and dlq.audit() == []
    assert dlq.post("resend", {"msgIds": [dead]}).json()["resent"] == 1
    again = dlq.post("resend", {"msgIds": [dead]})  # a second time: no longer in the DLQ
    assert again.status_code == 404 and "already resent" in again.json()["message"]
    assert len(dlq.audit()) == 1


def test_resend_by_filter_and_all(dlq: Dlq) -> None:  # SPEC R16
    a = dlq.kill(body="a", keys="x")["msgId"]
    dlq.kill(topic=dlq.other, body="b", keys="y")
    dlq.kill(body="c", keys="x")
    resp = dlq.post("resend", {"filter": {"key": "x"}, "target": "origin"})
    assert resp.json() == {"resent": 2, "skipped": 0, "target": "origin"}
    assert sorted(m["body"] for m in dlq.stack.pull_all(dlq.topic)) == ["a", "a", "c", "c"]
    remaining = dlq.ids()
    assert len(remaining) == 1 and a not in remaining
    dlq.kill(body="d")
    assert dlq.post("resend", {"all": True, "target": "origin"}).json()["resent"] == 2
    assert dlq.ids() == []
    assert [m["body"] for m in dlq.stack.pull_all(dlq.other)] == ["b", "b"]
    assert dlq.post("resend", {"all": True}).json()["resent"] == 0  # nothing twice


def level_queue_end(stack: RetryStack, level: int) -> int:
    info = stack.topic(naming.SCHEDULE_TOPIC)
    assert info is not None
    return int(info["queues"][level - 1]["maxOffset"])


def test_resend_into_the_retry_topic_at_a_level(dlq: Dlq, scheduler: list[Process]) -> None:
    # SPEC R16: into %RETRY%<group> at the chosen level (parked, then delivered), fresh count
    dead = dlq.kill(body="again")
    parked_before = level_queue_end(dlq.stack, 2)
    resp = dlq.post("resend", {"msgIds": [dead["msgId"]], "target": "retry", "delayLevel": 2})
    assert resp.status_code == 200 and resp.json()["target"] == "retry"
    assert level_queue_end(dlq.stack, 2) == parked_before + 1  # schedule queue of level 2
    back = dlq.stack.wait_message(naming.retry_topic(dlq.group), 0, 0)
    assert back["body"] == "again" and back["reconsumeTimes"] == 0
    assert P.DLQ_REASON not in back["properties"]
    assert back["properties"][P.RETRY_TOPIC] == dlq.topic
    now = dlq.kill(body="now")
    dlq.post("resend", {"msgIds": [now["msgId"]], "target": "retry"})
    assert [m["body"] for m in dlq.stack.pull(naming.retry_topic(dlq.group))] == ["again", "now"]


def test_resend_rate_limit_paces(dlq: Dlq) -> None:  # SPEC R16
    for n in range(12):
        dlq.kill(body=f"r{n}")
    started = time.monotonic()
    resp = dlq.post("resend", {"all": True, "maxPerSecond": 20})
    elapsed = time.monotonic() - started
    assert resp.json()["resent"] == 12
    assert elapsed >= 0.45  # 12 at 20/s: the last batch may start at 10/20 s
    assert dlq.audit()[-1]["what"]["maxPerSecond"] == 20


def test_purge_by_ids_filter_and_all(dlq: Dlq, stack: RetryStack) -> None:  # SPEC R16
    a = dlq.kill(body="a")["msgId"]
    b = dlq.kill(body="b", keys="purge-me")["msgId"]
    c = dlq.kill(body="c")["msgId"]
    resp = dlq.post("purge", {"msgIds": [a]})
    assert resp.json() == {"purged": 1} and dlq.ids() == [b, c]
    resp = stack.http.delete(dlq.base, params={"key": "purge-me"})
    assert resp.json() == {"purged": 1} and dlq.ids() == [c]
    d = dlq.kill(body="d")["msgId"]
    assert dlq.post("purge", {"msgIds": [a]}).status_code == 404  # already gone
    resp = stack.http.delete(dlq.base, headers={"X-Client-Id": "ops"})
    assert resp.json() == {"purged": 2} and dlq.ids() == []
    assert dlq.post("resend", {"msgIds": [d]}).status_code == 404  # purged: not resendable
    e = dlq.kill(body="e")["msgId"]
    assert dlq.ids() == [e]  # new dead letters show again after a purge of all
    client = redis.Redis.from_url(stack.redis.url, decode_responses=True)
    floor = client.hgetall(naming.dlq_state_key(dlq.group))
    assert int(floor["floorQueueOffset"]) == 4
    assert client.scard(naming.dlq_removed_key(dlq.group)) == 0  # compacted under the floor
    metrics = stack.http.get(f"{stack.retry.url}/metrics").text
    assert f'clepsydra_retry_dlq_depth{{group="{dlq.group}"}} 1.0' in metrics


def test_audit_records_every_resend_and_purge(dlq: Dlq, stack: RetryStack,
                                              app_client: FlaskClient) -> None:  # SPEC R16
    a = dlq.kill()["msgId"]
    dlq.kill(keys="k")
    dlq.post("resend", {"msgIds": [a]}, client="alice")
    dlq.post("purge", {"filter": {"key": "k"}}, client="bob")
    stack.http.delete(dlq.base)  # no X-Client-Id: the remote address
    records = dlq.audit()
    assert [(r["action"], r["count"], r["client"]) for r in records] == [
        ("resend", 1, "alice"), ("purge", 1, "bob"), ("purge", 0, "127.0.0.1")]
    assert records[0]["what"] == {"msgIds": [a], "msgIdCount": 1, "target": "retry",
                                  "delayLevel": 0}
    assert records[1]["what"] == {"filter": {"key": "k"}}
    assert records[2]["what"] == {"all": True}
    assert all(isinstance(r["time"], int) and r["time"] > 0 for r in records)
    last = stack.http.get(f"{dlq.base}/audit", params={"max": 1}).json()["records"]
    assert last == records[-1:]
    client = redis.Redis.from_url(stack.redis.url, decode_responses=True)
    assert client.llen(naming.dlq_audit_key(dlq.group)) == 3
    resp = app_client.get(f"/v1/groups/{dlq.group}-absent/dlq/audit")
    assert resp.status_code == 404 and resp.get_json()["error"] == "SUBSCRIPTION_GROUP_NOT_EXIST"


def test_dlq_routes_need_a_known_group(app_client: FlaskClient) -> None:
    for method, path, body in (("get", "dlq", None), ("post", "dlq/resend", {"all": True}),
                               ("post", "dlq/purge", {"all": True}), ("delete", "dlq", None)):
        resp = getattr(app_client, method)(f"/v1/groups/nobody-here/{path}", json=body)
        assert resp.status_code == 404, path
        assert resp.get_json()["error"] == "SUBSCRIPTION_GROUP_NOT_EXIST"


def test_resend_skips_dead_letters_without_an_origin(dlq: Dlq) -> None:  # SPEC R10, R16
    orphan = dlq.stack.produce(naming.retry_topic(dlq.group), "orphan",
                               properties={P.RECONSUME_TIME: "16"})  # R10, no RETRY_TOPIC
    assert orphan["topic"] == naming.dlq_topic(dlq.group)
    dlq.kill(body="fine")
    resp = dlq.post("resend", {"msgIds": [orphan["msgId"]], "target": "origin"})
    assert resp.status_code == 400 and "RETRY_TOPIC" in resp.json()["message"]
    assert dlq.post("resend", {"all": True, "target": "origin"}).json() == {
        "resent": 1, "skipped": 1, "target": "origin"}
    assert dlq.ids() == [orphan["msgId"]]
    resp = dlq.post("resend", {"msgIds": [orphan["msgId"]], "target": "retry"})
    assert resp.json()["resent"] == 1 and dlq.ids() == []


def test_resend_all_is_done_by_the_store_a_range_at_a_time(dlq: Dlq) -> None:  # SPEC R16
    # nothing hidden one by one, no rate limit: POST /v1/internal/copy-range, not pull + copy
    def copy_range_calls() -> float:
        text = dlq.stack.http.get(f"{dlq.stack.store.url}/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("clepsydra_store_requests_total{")
                   and 'operation="copy_range"' in line)

    for n in range(3):
        dlq.kill(body=f"all{n}", keys=f"k{n}")
    before = copy_range_calls()
    assert dlq.post("resend", {"all": True, "target": "origin"}).json() == {
        "resent": 3, "skipped": 0, "target": "origin"}
    assert copy_range_calls() > before
    assert dlq.ids() == []
    resent = [m for m in dlq.stack.pull_all(dlq.topic) if m["reconsumeTimes"] == 0
              and P.DLQ_REASON not in m["properties"]]
    assert sorted(m["body"] for m in resent).count("all1") == 2  # the original + the resend
    dlq.kill(body="later")
    assert dlq.post("resend", {"all": True}).json()["resent"] == 1  # the floor followed
    assert dlq.ids() == []
    [later] = dlq.stack.pull_all(naming.retry_topic(dlq.group))  # the default: into %RETRY%G
    assert later["body"] == "later" and later["reconsumeTimes"] == 0
    assert [e["target"] for e in json.loads(later["properties"][P.RESEND_HISTORY])] == ["retry"]


def test_a_resend_reaches_only_its_group(dlq: Dlq, names: Names) -> None:
    # two groups on one topic; G's dead letter resent reaches G alone (through
    # %RETRY%G, as RocketMQ redelivers), counted from 0 again, the resend in its history
    other_group = names("H")
    dlq.stack.put_group(other_group)
    dead = dlq.kill(body="only-g", keys="k-only")
    topic_before = dlq.stack.pull_all(dlq.topic)
    resp = dlq.post("resend", {"msgIds": [dead["msgId"]]}, client="ops-1")
    assert resp.status_code == 200 and resp.json()["target"] == "retry"
    assert dlq.stack.pull_all(dlq.topic) == topic_before  # nothing new for other groups
    assert dlq.stack.pull_all(naming.retry_topic(other_group)) == []
    [back] = dlq.stack.pull_all(naming.retry_topic(dlq.group))
    assert back["body"] == "only-g" and back["reconsumeTimes"] == 0
    props = back["properties"]
    assert P.RECONSUME_TIME not in props and P.DLQ_REASON not in props
    assert props[P.RETRY_TOPIC] == dlq.topic  # the consumer still sees its original topic
    [entry] = json.loads(props[P.RESEND_HISTORY])
    assert entry["client"] == "ops-1" and entry["group"] == dlq.group
    assert entry["target"] == "retry" and entry["time"] > 0
    assert len(json.loads(props[P.FAILURE_HISTORY])) == 1  # the failures are kept too
    # dead-lettered again and resent again (all, by the store's range copy): two resends
    again = dlq.stack.ok_send_back(dlq.group, commitLogOffset=back["commitLogOffset"],
                                   delayLevel=-1, reason="still", consumerId="c1")
    shown = dlq.stack.http.get(f"{dlq.base}/{again['msgId']}").json()
    assert len(shown["resendHistory"]) == 1 and shown["resends"] == 1
    assert dlq.post("resend", {"all": True}).json()["resent"] == 1
    retried = dlq.stack.pull_all(naming.retry_topic(dlq.group))
    assert len(retried) == 2 and retried[-1]["reconsumeTimes"] == 0
    assert len(json.loads(retried[-1]["properties"][P.RESEND_HISTORY])) == 2
    assert dlq.stack.pull_all(dlq.topic) == topic_before
