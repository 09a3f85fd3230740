"""The store's side of a cluster of shards (DEC-store-shards), over real store processes: the
membership and each shard's share, a topic's route, topic changes applied on every shard, the
look-ups, cancels and reschedules any shard answers for all, a shard's drain, and a one-store
store that says nothing of clusters."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pytest
import requests

from clepsydra_client.cli.main import main
from clepsydra_core.msgid import shard_of_offset_msg_id
from clepsydra_core.wire.cluster import SHARDS_HEADER, ClusterAnswer, RouteAnswer
from tests.integration.cluster.conftest import SHARDS, TOPIC, Cluster
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration


def test_every_shard_answers_for_the_cluster_and_names_its_size(cluster: Cluster) -> None:
    for shard in range(SHARDS):
        answer = cluster.get(shard, "/v1/cluster")
        assert answer.headers[SHARDS_HEADER] == str(SHARDS)
        members = ClusterAnswer.from_json(answer.json())
        assert members.self_id == shard
        assert [s.id for s in members.shards] == [0, 1, 2]
        assert [s.url for s in members.shards] == cluster.urls
        assert all(s.state == "up" and s.writable and s.queues == 0 for s in members.shards)
    brief = cluster.get(1, "/v1/cluster", params={"shares": "false"}).json()["shards"][2]
    port = cluster.urls[2].rsplit(":", 1)[1]
    assert brief == {"id": 2, "url": cluster.urls[2], "state": "up", "writable": True,
                     "draining": False, "storeHost": f"127.0.0.1:{port}"}


def test_a_one_store_store_names_no_cluster(start_store: Callable[..., HttpService]) -> None:
    store = start_store()
    answer = requests.get(store.url + "/v1/cluster", timeout=10)
    assert SHARDS_HEADER not in answer.headers  # its clients read no membership
    assert [s["id"] for s in answer.json()["shards"]] == [0]
    created = requests.post(store.url + "/v1/topics", json={"name": "t", "queues": 2}, timeout=10)
    assert "shards" not in created.json() and SHARDS_HEADER not in created.headers


def test_a_topic_is_created_updated_and_deleted_on_every_shard(cluster: Cluster) -> None:
    created = cluster.post(1, "/v1/topics", {"name": TOPIC, "queues": 2})
    assert created.status_code == 201, created.text
    assert created.json()["shards"] == {"applied": [0, 1, 2], "failed": []}
    for shard in range(SHARDS):
        assert len(cluster.get(shard, f"/v1/topics/{TOPIC}").json()["queues"]) == 2
    again = cluster.post(2, "/v1/topics", {"name": TOPIC, "queues": 2})  # idempotent
    assert again.status_code == 200 and again.json()["shards"]["applied"] == [0, 1, 2]
    grown = cluster.http.put(cluster.urls[0] + f"/v1/topics/{TOPIC}", json={"queues": 4},
                             timeout=15)
    assert grown.status_code == 200 and grown.json()["shards"]["applied"] == [0, 1, 2]
    route = RouteAnswer.from_json(cluster.get(2, f"/v1/routes/{TOPIC}").json())
    assert [(q.shard, q.queue_id) for q in route.queues] == [
        (s, q) for s in range(SHARDS) for q in range(4)]
    assert all(q.url == cluster.urls[q.shard] and q.writable and q.reachable
               for q in route.queues)
    refused = cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 3})  # 409 here: nowhere
    assert refused.status_code == 409
    deleted = cluster.http.delete(cluster.urls[1] + f"/v1/topics/{TOPIC}", timeout=15)
    assert deleted.status_code == 200 and deleted.json()["shards"]["applied"] == [0, 1, 2]
    for shard in range(SHARDS):
        assert cluster.get(shard, f"/v1/topics/{TOPIC}").status_code == 404
    assert cluster.get(0, f"/v1/routes/{TOPIC}").status_code == 404


def test_a_shard_down_is_marked_never_left_out_and_takes_what_it_missed_at_start(
        cluster: Cluster) -> None:
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 2}).raise_for_status()
    cluster.kill(2)
    members = ClusterAnswer.from_json(cluster.get(0, "/v1/cluster").json())
    down = members.shards[2]
    assert (down.id, down.url, down.state) == (2, cluster.urls[2], "unreachable")
    assert down.error and "did not answer" in down.error
    route = RouteAnswer.from_json(cluster.get(1, f"/v1/routes/{TOPIC}").json())
    assert route.unreachable == [2]
    assert [(q.shard, q.queue_id, q.reachable) for q in route.queues if q.shard == 2] == [
        (2, 0, False), (2, 1, False)]
    # a create while it is down: applied on the others, the answer says where it was not
    made = cluster.post(1, "/v1/topics", {"name": "late", "queues": 3})
    assert made.status_code == 201
    assert made.json()["shards"]["applied"] == [0, 1]
    assert [f["shard"] for f in made.json()["shards"]["failed"]] == [2]
    cluster.restart(2)
    wait_until(lambda: cluster.get(2, "/v1/topics/late").status_code == 200, 20,
               what="the restarted shard to take the topic it missed")
    assert len(cluster.get(2, "/v1/topics/late").json()["queues"]) == 3
    route = RouteAnswer.from_json(cluster.get(0, "/v1/routes/late").json())
    assert route.unreachable == [] and route.missing == []
    assert len(route.queues) == 9


def test_a_topic_deleted_through_the_cluster_is_never_taken_back_from_a_stale_shard(
        cluster: Cluster) -> None:
    cluster.post(0, "/v1/topics", {"name": "gone", "queues": 1}).raise_for_status()
    cluster.kill(2)  # misses the delete: it still has the topic when it comes back
    cluster.http.delete(cluster.urls[0] + "/v1/topics/gone", timeout=15).raise_for_status()
    cluster.restart(2)
    wait_until(lambda: cluster.get(2, "/healthz").status_code == 200, 20, what="shard 2 back")
    cluster.restart(1, stop=True)  # a restart of a shard that took the delete
    wait_until(lambda: cluster.get(1, "/healthz").status_code == 200, 20, what="shard 1 back")
    time.sleep(1.5)  # its start-up sync has read the peers, the stale one included
    assert cluster.get(1, "/v1/topics/gone").status_code == 404
    assert RouteAnswer.from_json(cluster.get(0, "/v1/routes/gone").json()).missing == [0, 1]


def test_look_ups_from_any_shard_find_a_message_where_it_is(cluster: Cluster) -> None:
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 1}).raise_for_status()
    stored = [cluster.produce(s, TOPIC, keys="k7", body=f"on {s}") for s in range(SHARDS)]
    assert [shard_of_offset_msg_id(r["offsetMsgId"]) for r in stored] == [0, 1, 2]
    # by offsetMsgId: the id names its shard, any shard answers
    for asked in range(SHARDS):
        found = cluster.get(asked, f"/v1/messages/{stored[2]['offsetMsgId']}").json()
        assert [(m["shard"], m["body"]) for m in found["messages"]] == [(2, "on 2")]
    # by msgId (its unique id) and by key: every shard asked, the copies merged
    found = cluster.get(1, f"/v1/messages/{stored[0]['msgId']}").json()["messages"]
    assert [(m["shard"], m["body"]) for m in found] == [(0, "on 0")]
    for msg_id in (stored[2]["msgId"], stored[2]["offsetMsgId"]):  # its timeline, from shard 0
        timeline = cluster.get(0, f"/v1/messages/{msg_id}/history")
        assert timeline.status_code == 200, timeline.text
        assert stored[2]["offsetMsgId"] in timeline.text
    # a unique id shaped as an offsetMsgId of shard 2 (its pid field 0002), stored on shard 0:
    # found though the shard it seems to name holds nothing
    lookalike = "7F000001" + "0002" + "0" * 20
    assert shard_of_offset_msg_id(lookalike) == 2
    cluster.produce(0, TOPIC, body="pid 2", properties={"UNIQ_KEY": lookalike})
    for asked in range(SHARDS):
        found = cluster.get(asked, f"/v1/messages/{lookalike}").json()["messages"]
        assert [(m["shard"], m["body"]) for m in found] == [(0, "pid 2")]
    by_key = cluster.get(2, "/v1/messages", params={"topic": TOPIC, "key": "k7"}).json()
    assert sorted(m["shard"] for m in by_key["messages"]) == [0, 1, 2]
    assert "unreachable" not in by_key
    # a shard down: marked, never silently left out
    cluster.kill(1)
    partial = cluster.get(0, "/v1/messages", params={"topic": TOPIC, "key": "k7"}).json()
    assert sorted(m["shard"] for m in partial["messages"]) == [0, 2]
    assert partial["unreachable"] == [1]
    missing = cluster.get(0, f"/v1/messages/{stored[1]['msgId']}")
    assert missing.status_code == 503 and "1" in missing.json()["message"]


def test_cancel_and_reschedule_reach_the_shard_that_holds_the_message(cluster: Cluster) -> None:
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 1}).raise_for_status()
    later = int(time.time() * 1000) + 3_600_000
    timers = [cluster.produce(s, TOPIC, keys="remind", deliverAt=later) for s in range(SHARDS)]
    # by offsetMsgId, asked of another shard
    moved = cluster.http.patch(cluster.urls[0] + f"/v1/messages/{timers[2]['offsetMsgId']}",
                               json={"delayMs": 7_200_000}, timeout=15)
    assert moved.status_code == 200, moved.text
    # by key: every shard's pending messages of the key
    cancelled = cluster.http.delete(cluster.urls[1] + "/v1/messages",
                                    params={"topic": TOPIC, "key": "remind"}, timeout=15)
    assert cancelled.status_code == 200, cancelled.text
    assert sorted(cancelled.json()["msgIds"]) == sorted(t["msgId"] for t in timers)
    again = cluster.http.delete(cluster.urls[2] + f"/v1/messages/{timers[0]['msgId']}",
                                timeout=15)
    assert again.status_code == 200  # a cancelled message cancelled again: 200 (T1)


def test_a_drained_shard_refuses_new_messages_and_goes_on_with_its_delayed_ones(
        make_cluster: Callable[..., Cluster]) -> None:  # DEC-shard-drain
    cluster = make_cluster(scheduler=True)
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 1}).raise_for_status()
    delayed = cluster.produce(1, TOPIC, delayLevel=2)  # due in 2 s, on shard 1
    drained = cluster.post(0, "/v1/cluster/shards/1/drain")
    assert drained.status_code == 200, drained.text
    assert drained.json()["draining"] is True and drained.json()["writable"] is False
    refused = cluster.post(1, f"/v1/topics/{TOPIC}/messages", {"body": "new"})
    assert refused.status_code == 403 and refused.json()["error"] == "NO_PERMISSION"
    refused = cluster.post(1, f"/v1/topics/{TOPIC}/messages/batch",
                           {"messages": [{"body": "new"}]})
    assert refused.status_code == 403
    assert cluster.get(1, "/healthz").json()["writable"] is False  # send-backs go elsewhere
    route = RouteAnswer.from_json(cluster.get(2, f"/v1/routes/{TOPIC}").json())
    assert {q.shard: q.writable for q in route.queues} == {0: True, 1: False, 2: True}
    # its delayed message is still handed over, on the shard that stored it
    wait_until(lambda: cluster.get(1, f"/v1/topics/{TOPIC}").json()["queues"][0]
               ["maxOffset"] == 1, 20, what="the drained shard's delayed message delivered")
    status = ClusterAnswer.from_json(cluster.get(0, "/v1/cluster").json()).shards[1]
    assert status.pending_delayed == 0 and status.draining
    # a group that committed on its queue and lags: not removable until it consumed
    cluster.http.put(cluster.urls[1] + "/v1/groups/g/offsets",
                     json={"topic": TOPIC, "queueId": 0, "offset": 0}, timeout=15)
    status = ClusterAnswer.from_json(cluster.get(2, "/v1/cluster").json()).shards[1]
    assert (status.unconsumed, status.removable) == (1, False)
    cluster.http.put(cluster.urls[1] + "/v1/groups/g/offsets",
                     json={"topic": TOPIC, "queueId": 0, "offset": 1}, timeout=15)
    status = ClusterAnswer.from_json(cluster.get(2, "/v1/cluster").json()).shards[1]
    assert (status.unconsumed, status.removable) == (0, True)
    # drained survives a restart of the shard; resume takes messages again
    cluster.restart(1, stop=True)
    wait_until(lambda: cluster.get(1, "/healthz").status_code == 200, 20, what="shard 1 back")
    assert cluster.get(1, "/healthz").json()["writable"] is False
    assert cluster.post(2, "/v1/cluster/shards/1/resume").json()["draining"] is False
    assert cluster.produce(1, TOPIC)["msgId"]
    assert delayed["topic"] == "SCHEDULE_TOPIC_XXXX"
    assert cluster.post(0, "/v1/cluster/shards/9/drain").status_code == 404


def _cli(cluster: Cluster, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--store-url", cluster.url, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _rows(table: str) -> list[list[str]]:
    """The table's rows under its header and rule, split into cells."""
    return [line.split() for line in table.splitlines()[2:2 + SHARDS]]


def test_the_cli_prints_the_cluster_drains_a_shard_and_shows_a_message_of_any_shard(
        cluster: Cluster) -> None:  # DEC-store-shards, DEC-shard-drain
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": 2}).raise_for_status()
    stored = cluster.produce(2, TOPIC, body="held by shard 2", keys="k2")
    code, table, err = _cli(cluster, "cluster")
    assert code == 0, err
    assert table.split()[:5] == ["SHARD", "STATE", "URL", "TOPICS", "QUEUES"]
    assert [row[:3] for row in _rows(table)] == [[str(s), "up", cluster.urls[s]]
                                                 for s in range(SHARDS)]
    assert [row[4] for row in _rows(table)] == ["2", "2", "2"]  # each shard's queues
    shares = ClusterAnswer.from_json(cluster.get(1, "/v1/cluster").json()).shards
    assert [s.topics for s in shares] == [1, 1, 1]
    assert shares[2].commitlog_bytes and shares[2].commitlog_bytes > max(
        shares[0].commitlog_bytes or 0, shares[1].commitlog_bytes or 0)  # the message's shard
    code, line, err = _cli(cluster, "cluster", "drain", "1")
    assert code == 0, err
    assert "store shard 1 drains: removable" in line  # nothing waits on it
    code, table, _ = _cli(cluster, "cluster")
    assert _rows(table)[1][:2] == ["1", "removable"]
    assert "removable: shard(s) 1" in table
    assert cluster.post(1, f"/v1/topics/{TOPIC}/messages", {"body": "x"}).status_code == 403
    code, line, err = _cli(cluster, "cluster", "resume", "1")
    assert code == 0 and "takes messages again: up" in line, err
    # `message show`, given shard 0's address only, finds the message shard 2 holds
    for msg_id in (stored["offsetMsgId"], stored["msgId"]):
        code, shown, err = _cli(cluster, "message", "show", msg_id)
        assert code == 0, err
        assert "held by shard 2" in shown and stored["offsetMsgId"] in shown
    code, shown, err = _cli(cluster, "message", "show", "--key", "k2", "--topic", TOPIC)
    assert code == 0 and "held by shard 2" in shown, err
    cluster.kill(2)
    code, table, _ = _cli(cluster, "cluster")
    assert code == 0 and _rows(table)[2][:2] == ["2", "UNREACHABLE"]
    assert "shard 2: " in table  # why, under the table
