"""The web console over three real store shards (DEC-console-shards): the console is given shard
0's address only, and its pages show each shard's data - the shards table on ``/``, the timers
by shard, a topic's queues and a group's lag as (shard, queueId) read from each queue's shard, a
message of another shard and its cancel - and, with one shard killed, name it and mark what
they show as partial rather than show its share as zero."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
import requests

from tests.integration.cluster.conftest import SHARDS, TOPIC, Cluster

pytestmark = pytest.mark.integration

GROUP = "billing"
QUEUES = 2


def _rows(html: str, table_id: str) -> dict[tuple[int, ...], dict[str, str]]:
    """The ``data-*`` attributes of each row of table ``table_id`` that names its shard, by
    (shard,) or (shard, queue)."""
    start = html.index(f'id="{table_id}"')
    body = html[start:html.index("</table>", start)]
    out: dict[tuple[int, ...], dict[str, str]] = {}
    for attrs in re.findall(r"<tr ([^>]*data-shard=[^>]*)>", body):
        data = dict(re.findall(r'data-([\w-]+)="([^"]*)"', attrs))
        key = (int(data["shard"]),) + ((int(data["queue"]),) if "queue" in data else ())
        out[key] = data
    return out


def _page(http: requests.Session, console: str, path: str) -> str:
    resp = http.get(console + path, timeout=30)
    assert resp.status_code == 200, resp.text[:500]
    return resp.text


def _setup(cluster: Cluster) -> dict[str, list[dict[str, object]]]:
    """On each shard s: s + 1 plain messages (key ``plain``), s + 1 timers two hours ahead
    and one level message (no scheduler runs: they stay pending)."""
    cluster.post(0, "/v1/topics", {"name": TOPIC, "queues": QUEUES}).raise_for_status()
    later = int(time.time() * 1000) + 2 * 3_600_000 + 60_000
    made: dict[str, list[dict[str, object]]] = {"plain": [], "timers": [], "levels": []}
    for s in range(SHARDS):
        for i in range(s + 1):
            made["plain"].append(cluster.produce(s, TOPIC, keys="plain", body=f"{s}.{i}"))
            made["timers"].append(cluster.produce(s, TOPIC, keys="remind", deliverAt=later))
        made["levels"].append(cluster.produce(s, TOPIC, keys="lvl", delayLevel=3))
    return made


def test_the_console_shows_every_shards_data_and_marks_a_shard_down(
        make_cluster: Callable[..., Cluster]) -> None:  # SPEC T1, T2, C4
    cluster = make_cluster(retry=True, console=True)
    console = cluster.stack.console.url
    made = _setup(cluster)
    http = requests.Session()

    # / : the shards table, each shard's pending delayed messages, their total
    home = _page(http, console, "/")
    shards = _rows(home, "shards")
    assert sorted(shards) == [(0,), (1,), (2,)]
    assert [shards[(s,)]["state"] for s in range(SHARDS)] == ["up"] * SHARDS
    assert [int(shards[(s,)]["pending"]) for s in range(SHARDS)] == [2, 3, 4]
    for url in cluster.urls:
        assert url in home
    total = re.search(r'id="shards-total" data-pending="(\d+)" data-queues="(\d+)"', home)
    assert total is not None and int(total.group(1)) == 9
    assert int(total.group(2)) >= SHARDS * QUEUES  # user, %RETRY% and %DLQ% queues
    assert 'id="shards-partial"' not in home
    health = http.get(console + "/healthz", timeout=30).json()
    assert health["store"] is True and health["storeShards"] == {"0": True, "1": True, "2": True}
    assert re.search(r'id="pending-delayed">9\b', home)

    # /timers : totals over every shard, each shard's own line
    timers = _page(http, console, "/timers")
    assert re.search(r'id="timers-pending">6<', timers)
    by_shard = _rows(timers, "timers-by-shard")
    assert [(int(by_shard[(s,)]["timers"]), int(by_shard[(s,)]["levels"]))
            for s in range(SHARDS)] == [(1, 1), (2, 1), (3, 1)]
    assert re.search(r'data-hour="2" data-count="6"', timers)  # every shard's, in its hour
    assert re.search(r'<tr data-level="3"><td>3</td><td>[^<]*</td><td>3</td>', timers)

    # /topics/<t> : (shard, queueId) rows with each shard's offsets; a queue of shard 2 pulled
    # from shard 2
    topic = _page(http, console, f"/topics/{TOPIC}")
    queues = _rows(topic, "queues")
    assert sorted(queues) == [(s, q) for s in range(SHARDS) for q in range(QUEUES)]
    held = [sum(int(queues[(s, q)]["max"]) for q in range(QUEUES)) for s in range(SHARDS)]
    assert held == [1, 2, 3]
    full = next(q for q in range(QUEUES) if int(queues[(2, q)]["max"]) > 0)
    recent = _page(http, console, f"/topics/{TOPIC}?shard=2&queue={full}")
    on_two = {str(m["msgId"]) for m in made["plain"][3:]}
    assert any(msg_id in recent for msg_id in on_two)
    assert not any(str(m["msgId"]) in recent for m in made["plain"][:3])

    # /groups/<g> : a commit on shard 1 shows as that queue's lag, read from shard 1
    q1 = next(q for q in range(QUEUES) if int(queues[(1, q)]["max"]) > 0)
    end = int(queues[(1, q1)]["max"])
    put = http.put(cluster.urls[1] + f"/v1/groups/{GROUP}/offsets",
                   json={"topic": TOPIC, "queueId": q1, "offset": end}, timeout=15)
    assert put.status_code == 200, put.text
    group = _page(http, console, f"/groups/{GROUP}")
    lag = {k: v for k, v in _rows(group, "lag").items()}
    assert int(lag[(1, q1)]["lag"]) == 0
    assert sum(int(v["lag"]) for v in lag.values()) == 6 - end
    assert 'id="group-partial"' not in group

    # a message of shard 2, its page and its cancel through shard 0's address (SPEC T1)
    timer = made["timers"][-1]
    msg_page = _page(http, console, f"/messages/{timer['msgId']}")
    assert 'id="msg-shard">2<' in msg_page and 'id="cancel"' in msg_page
    csrf = re.search(r'name="csrf" value="([^"]+)"', msg_page)
    assert csrf is not None
    done = http.post(console + f"/messages/{timer['msgId']}/cancel",
                     data={"csrf": csrf.group(1)}, timeout=30)
    assert done.status_code == 200 and "cancelled" in done.text, done.text[:500]
    after = _rows(_page(http, console, "/timers"), "timers-by-shard")
    assert int(after[(2,)]["timers"]) == 2

    # a key found on every shard
    found = _page(http, console, "/?q=plain&topic=" + TOPIC)
    assert all(str(m["msgId"]) in found for m in made["plain"])
    assert "Not looked everywhere" not in found

    # shard 2 killed: named on every page, the figures marked partial, never counted as zero
    cluster.kill(2)
    home = _page(http, console, "/")
    shards = _rows(home, "shards")
    assert shards[(2,)]["state"] == "unreachable"
    health = http.get(console + "/healthz", timeout=30)
    assert health.status_code == 200  # the console runs: it names the shard down
    assert health.json()["store"] is False
    assert health.json()["storeShards"] == {"0": True, "1": True, "2": False}
    assert 'id="shards-partial"' in home and "shard 2 did not answer" in home
    total = re.search(r'id="shards-total" data-pending="(\d+)"', home)
    assert total is not None and int(total.group(1)) == 5  # shards 0 and 1 only
    timers = _page(http, console, "/timers")
    assert 'id="timers-partial"' in timers
    by_shard = _rows(timers, "timers-by-shard")
    assert by_shard[(2,)]["timers"] == "" and "The look-up failed" in timers
    assert re.search(r'id="timers-pending">3<', timers)
    topic = _page(http, console, f"/topics/{TOPIC}")
    assert 'id="topic-partial"' in topic
    assert all(_rows(topic, "queues")[(2, q)]["max"] == "" for q in range(QUEUES))
    group = _page(http, console, f"/groups/{GROUP}")
    assert 'id="group-partial"' in group, group
    assert 'id="lag"' in group, re.findall(r'class="failed"[^<]*', group)
    lag = _rows(group, "lag")
    assert all(lag[(2, q)]["lag"] == "" for q in range(QUEUES))
    assert int(lag[(0, 0)]["lag"]) + int(lag[(0, 1)]["lag"]) == 1
    found = _page(http, console, "/?q=plain&topic=" + TOPIC)
    assert all(str(m["msgId"]) in found for m in made["plain"][:3])
    assert "Not looked everywhere" in found and "shard 2 did not answer" in found
    topics = _page(http, console, "/topics")
    assert 'id="topics-partial"' in topics
