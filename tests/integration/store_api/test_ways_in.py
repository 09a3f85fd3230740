"""Every route of the store's table answers the same bytes whichever way the request came in
(DEC-one-envelope): a Flask view (``CLEPSYDRA_STORE_FAST_PATH=false``), the lean WSGI path in
front of Flask, and the worker's poller thread (``inline.serve`` with the worker's answer, for
the poller lane's routes; the other requests go to a thread, the lean path, as in the worker).

The same scenario (every route: allowed, refused without a token, and with bad input) runs on
three stores of its own, one per way in, with the clock frozen and moved the same way and the
tokens made the same way, so that the answers can be compared byte for byte: status line,
``Content-Type``, ``Content-Length``, ``WWW-Authenticate``, ``Retry-After`` and the body."""

from __future__ import annotations

import base64
import io
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from flask import Flask, request
from werkzeug.test import EnvironBuilder

from clepsydra_core import auth_tokens
from clepsydra_core.auth import Role
from clepsydra_store import inline
from clepsydra_store.api.contract import ROUTES
from clepsydra_store.api.envelope import Lane
from clepsydra_store.api.fastpath import LeanPath
from clepsydra_store.app import create_app
from tests.integration.store_api.helpers import context, settings_for

pytestmark = pytest.mark.integration

ADMIN = "clp_admin-token-for-the-ways-in-test-000001"
SCHEDULER, RETRY = (f"clp_{base64.urlsafe_b64encode(b'token-%d' % i).decode()}" for i in (0, 1))
"""The tokens of the roles that hand over and copy, made first in every store's tokens file
(``new_token`` made deterministic)."""
REMOTE = ("127.0.0.1", 40000)
T0 = 1_800_000_000_000
"""The frozen clock's start, epoch ms."""
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
"""A message's own trace context (not sampled): the store keeps it, so the stored properties
are the same on every way in."""
KEPT_HEADERS = ("content-type", "content-length", "www-authenticate", "retry-after", "allow")


@dataclass(frozen=True)
class Step:
    endpoint: str
    method: str
    path: str
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    token: str | None = ADMIN
    raw: bytes | None = None
    """A body sent as it is (not JSON-encoded)."""
    advance_ms: int = 0
    """Move the clock by this much before the step."""


def _message(body: str, **fields: Any) -> dict[str, Any]:
    return {"body": body, "properties": {"traceparent": TP, **fields.pop("properties", {})},
            **fields}


def scenario() -> list[Step]:
    """Every route of the table, each allowed, refused without a token, and given bad input
    where it takes any."""
    one = "/v1/topics/orders/messages"
    batch = f"{one}/batch"
    steps = [
        Step("topics.create_topic", "POST", "/v1/topics", {"name": "orders", "queues": 2}),
        Step("topics.create_topic", "POST", "/v1/topics", raw=b"{nope"),
        Step("topics.list_topics", "GET", "/v1/topics"),
        Step("topics.get_topic", "GET", "/v1/topics/orders"),
        Step("topics.get_topic", "GET", "/v1/topics/missing"),
        Step("topics.update_topic", "PUT", "/v1/topics/orders", {"queues": 3}),
        Step("topics.update_topic", "PUT", "/v1/topics/orders", {"queues": "x"}),
        Step("messages.produce_message", "POST", one,
             _message("plain", tags="t", keys="k1", properties={"UNIQ_KEY": "u-plain"})),
        Step("messages.produce_message", "POST", one, _message("made-id", queueId=1)),
        Step("messages.produce_message", "POST", one, _message("delayed", delayLevel=1)),
        Step("messages.produce_message", "POST", one,
             _message("timer", deliverAt=T0 + 60_000, properties={"UNIQ_KEY": "u-timer"})),
        Step("messages.produce_message", "POST", one,
             _message("keyed-timer", delayMs=30_000, keys="kt")),
        Step("messages.produce_message", "POST", one, _message("kept-timer", delayMs=50_000)),
        Step("messages.produce_message", "POST", one, {"body": 1}),
        Step("messages.produce_message", "POST", "/v1/topics/missing/messages",
             _message("nowhere")),
        Step("messages.produce_message", "POST", one, raw=b"x" * 5000),
        Step("messages.produce_batch", "POST", batch,
             {"messages": [_message(f"b{i}", tags="t") for i in range(3)]}),
        Step("messages.produce_batch", "POST", batch, {"messages": []}),
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"offset": "0", "max": "10"}),
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"max": "0", "body": "false"}),
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"offset": "1", "max": "1", "waitMs": "50"}),  # there: cannot wait
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"offset": "0", "waitMs": "0", "body": "false"}),
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"tags": "none", "waitMs": "1"}),  # a tag filter: may hold (it does, 1 ms)
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"offset": "99", "waitMs": "1"}),  # past the end: may hold
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"waitMs": "x"}),
        Step("queues.pull", "GET", "/v1/topics/orders/queues/0/messages",
             query={"tags": "t || u", "max": "2"}),  # percent-encoded: "t+%7C%7C+u"
        Step("messages.get_message", "GET", "/v1/messages/u-plain"),
        Step("messages.get_message", "GET", "/v1/messages/unknown-id"),
        Step("history.get_history", "GET", "/v1/messages/u-plain/history"),
        Step("history.get_history", "GET", "/v1/messages/unknown-id/history"),
        Step("messages.find_messages", "GET", "/v1/messages", query={"topic": "orders",
                                                                     "key": "k1"}),
        Step("messages.find_messages", "GET", "/v1/messages", query={"topic": "orders"}),
        Step("messages.get_commitlog", "GET", "/v1/commitlog/0", query={"body": "false"}),
        Step("messages.get_commitlog", "GET", "/v1/commitlog/x"),
        Step("timers.reschedule_message", "PATCH", "/v1/messages/u-timer", {"delayMs": 5_000}),
        Step("timers.reschedule_message", "PATCH", "/v1/messages/u-timer", {"when": 1}),
        Step("timers.cancel_message", "DELETE", "/v1/messages/u-timer"),
        Step("timers.cancel_message", "DELETE", "/v1/messages/u-plain"),
        Step("timers.reschedule_by_key", "PATCH", "/v1/messages", {"delayMs": 1_000},
             query={"topic": "orders", "key": "kt"}),
        Step("timers.cancel_by_key", "DELETE", "/v1/messages",
             query={"topic": "orders", "key": "kt"}),
        Step("timers.cancel_by_key", "DELETE", "/v1/messages",
             query={"topic": "orders", "key": "none"}),
        Step("groups.put_group_settings", "PUT", "/v1/groups/g/settings",
             {"retryQueueNums": 1}),
        Step("groups.put_group_settings", "PUT", "/v1/groups/g/settings",
             {"retryQueueNums": -1}),
        Step("groups.list_groups", "GET", "/v1/groups"),
        Step("groups.get_group_settings", "GET", "/v1/groups/g/settings"),
        Step("groups.get_group_settings", "GET", "/v1/groups/nobody/settings"),
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets",
             {"topic": "orders", "queueId": 0, "offset": 1}),
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets",
             {"topic": "orders", "queueId": 9, "offset": 1}),
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets",
             {"topic": "orders", "queueId": 0, "offset": 99}),  # past maxOffset
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets",
             {"topic": "SCHEDULE_TOPIC_XXXX", "queueId": 0, "offset": 0}),  # S3
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets",
             {"topic": "orders", "queueId": 0}),  # a field missing
        Step("groups.commit_offset", "PUT", "/v1/groups/b%20d/offsets",
             {"topic": "orders", "queueId": 0, "offset": 1}),  # not a group name
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets", raw=b"{nope"),
        Step("groups.commit_offset", "PUT", "/v1/groups/g/offsets", raw=b"x" * 5000),
        Step("groups.get_offsets", "GET", "/v1/groups/g/offsets"),
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat",
             {"clientId": "c1", "subscriptions": {"orders": "*"},
              "messageModel": "CLUSTERING"}),
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat",
             {"clientId": "c2", "subscriptions": {"orders": "a||b"}}),  # C5: not consistent
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat",
             {"clientId": "c3", "subscriptions": {"SCHEDULE_TOPIC_XXXX": "*"}}),  # S3
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat", {"subscriptions": {}}),
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat", raw=b"[1]"),
        Step("groups.heartbeat", "POST", "/v1/groups/g/heartbeat", raw=b"x" * 5000),
        Step("groups.unregister_consumer", "DELETE", "/v1/groups/g/consumers/c2"),
        Step("groups.list_consumers", "GET", "/v1/groups/g/consumers"),
        Step("groups.unregister_consumer", "DELETE", "/v1/groups/g/consumers/c1"),
        Step("locks.lock_queues", "POST", "/v1/groups/g/locks",
             {"clientId": "c1", "queues": [{"topic": "orders", "queueId": 0}]}),
        Step("locks.list_locks", "GET", "/v1/groups/g/locks"),
        Step("locks.unlock_queues", "POST", "/v1/groups/g/locks/unlock",
             {"clientId": "c1", "queues": [{"topic": "orders", "queueId": 0}]}),
        Step("schedule.levels", "GET", "/v1/schedule/levels"),
        Step("schedule.entries", "GET", "/v1/schedule/levels/1/entries",
             query={"offset": "0", "max": "10"}),
        Step("schedule.entries", "GET", "/v1/schedule/levels/99/entries"),
        Step("schedule.entries", "GET", "/v1/schedule/levels/1/entries",
             query={"offset": "1", "max": "1"}),
        Step("schedule.entries", "GET", "/v1/schedule/levels/1/entries",
             query={"offset": "x"}),
        Step("schedule.entries", "GET", "/v1/schedule/levels/1/entries", query={"max": "0"}),
        Step("schedule.entries", "GET", "/v1/schedule/levels/x/entries"),
        Step("schedule.handover", "POST", "/v1/schedule/levels/1/handover",
             {"fromOffset": 0, "max": 10}, token=SCHEDULER, advance_ms=2_000),
        Step("schedule.handover", "POST", "/v1/schedule/levels/1/handover", {"max": 10},
             token=SCHEDULER),
        Step("schedule.handover", "POST", "/v1/schedule/levels/1/handover",
             {"fromOffset": 0}),  # the admin's role does not hand over
        Step("timers.timer_backlog", "GET", "/v1/schedule/timers"),
        Step("timers.timer_handover", "POST", "/v1/schedule/timers/handover",
             {"max": 10, "waitMs": 0}, token=SCHEDULER, advance_ms=60_000),
        Step("timers.timer_handover", "POST", "/v1/schedule/timers/handover", {"max": "x"},
             token=SCHEDULER),
        Step("internal.create_system_topic", "POST", "/v1/internal/topics",
             {"name": "%RETRY%g", "queues": 1}, token=RETRY),
        Step("internal.create_system_topic", "POST", "/v1/internal/topics",
             {"name": "plain", "queues": 1}, token=RETRY),
        Step("internal.copy", "POST", "/v1/internal/copy",
             {"items": [{"commitLogOffset": 0, "topic": "%RETRY%g", "reconsumeTimes": 1}]},
             token=RETRY),
        Step("internal.copy", "POST", "/v1/internal/copy", {"items": []}, token=RETRY),
        Step("internal.copy_range", "POST", "/v1/internal/copy-range",
             {"topic": "orders", "queueId": 0, "fromOffset": 0, "target": "%RETRY%g"},
             token=RETRY),
        Step("internal.copy_range", "POST", "/v1/internal/copy-range", {"topic": "orders"},
             token=RETRY),
        Step("cluster.self_status", "GET", "/v1/cluster/self", query={"shares": "false"}),
        Step("cluster.self_status", "GET", "/v1/cluster/self", query={"shares": "maybe"}),
        Step("cluster.members", "GET", "/v1/cluster", query={"shares": "false"}),
        Step("cluster.route", "GET", "/v1/routes/orders"),
        Step("cluster.route", "GET", "/v1/routes/missing"),
        Step("cluster.drain", "POST", "/v1/cluster/shards/0/drain", {}),
        Step("messages.produce_message", "POST", one, _message("drained")),  # DEC-shard-drain
        Step("cluster.resume", "POST", "/v1/cluster/shards/0/resume", {}),
        Step("cluster.drain", "POST", "/v1/cluster/shards/7/drain", {}),
        Step("auth.list_tokens", "GET", "/v1/auth/tokens"),
        Step("auth.create", "POST", "/v1/auth/tokens", {"name": "t1", "role": "producer"}),
        Step("auth.create", "POST", "/v1/auth/tokens", {"name": "t2", "role": "nobody"}),
        Step("auth.revoke", "DELETE", "/v1/auth/tokens/t1"),
        Step("auth.revoke", "DELETE", "/v1/auth/tokens/t1"),
        Step("topics.delete_topic", "DELETE", "/v1/topics/orders"),
        Step("topics.delete_topic", "DELETE", "/v1/topics/orders"),
    ]
    refused = {step.endpoint: Step(step.endpoint, step.method, step.path, step.body,
                                   step.query, token=None, raw=step.raw)
               for step in steps}  # the first step of each route, without a token (401)
    return [*refused.values(), *steps]


class Clock:
    """The frozen clock every part of the process reads (``time.time``, ``time.time_ns``)."""

    def __init__(self) -> None:
        self.ms = T0

    def time(self) -> float:
        return self.ms / 1000

    def time_ns(self) -> int:
        return self.ms * 1_000_000


def environ_of(step: Step) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {step.token}"} if step.token else {}
    data = step.raw if step.raw is not None else (
        json.dumps(step.body).encode() if step.body is not None else None)
    builder = EnvironBuilder(path=step.path, method=step.method, headers=headers, data=data,
                             query_string=urlencode(step.query) if step.query else None,
                             content_type="application/json" if data is not None else None)
    environ: dict[str, Any] = builder.get_environ()
    environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = REMOTE[0], str(REMOTE[1])
    return environ


Answered = tuple[str, list[tuple[str, str]], bytes]


def by_wsgi(app: Flask, step: Step) -> Answered:
    out: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
        out["status"], out["headers"] = status, headers

    chunks = app(environ_of(step), start_response)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return out["status"], out["headers"], body


ON_POLLER: list[Step] = []
"""The steps the poller answered (by_poller)."""


def by_poller(app: Flask, step: Step) -> Answered:
    """The poller's answer when its reader takes the request (the worker's answer function and
    request lines), else a thread's (the WSGI app)."""
    lean = app.wsgi_app
    assert isinstance(lean, LeanPath)
    environ = environ_of(step)
    body = environ["wsgi.input"].read()
    target = f"{step.path}?{urlencode(step.query)}" if step.query else step.path
    head = [f"{step.method} {target} HTTP/1.1", "Host: store", "Connection: keep-alive"]
    if body or step.method != "GET":
        head.append(f"Content-Length: {len(body)}")
    if step.token:
        head.append(f"Authorization: Bearer {step.token}")
    raw = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    served = inline.serve(raw, lean.answer_poller, context(app).settings.max_request_bytes,
                          REMOTE, "DATE", lean.lines)
    if served.verdict == inline.Verdict.HANDOVER:
        assert served.count == 0
        environ["wsgi.input"] = io.BytesIO(body)
        return by_wsgi(app, step)
    assert served.count == 1 and served.rest == b"", step
    ON_POLLER.append(step)
    head_bytes, _, answer = served.out.partition(b"\r\n\r\n")
    status_line, *fields = head_bytes.decode("latin-1").split("\r\n")
    headers = [tuple(f.split(": ", 1)) for f in fields]
    return status_line.split(" ", 1)[1], headers, answer  # type: ignore[return-value]


def answers(make: Callable[[], Flask], way: Callable[[Flask, Step], Answered],
            clock: Clock) -> Iterator[tuple[Step, str, list[tuple[str, str]], bytes]]:
    clock.ms = T0
    app = make()
    for step in scenario():
        clock.ms += step.advance_ms
        status, headers, body = way(app, step)
        kept = sorted((name.lower(), value) for name, value in headers
                      if name.lower() in KEPT_HEADERS)
        yield step, status, kept, body


def test_every_route_answers_alike_on_every_way_in(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # DEC-one-envelope, SPEC O1 (same spans and metrics path), P1, S3, R2 (same errors)
    clock = Clock()
    monkeypatch.setattr(time, "time", clock.time)
    monkeypatch.setattr(time, "time_ns", clock.time_ns)
    made = itertools.count()

    def maker(fast_path: bool) -> Callable[[], Flask]:
        def make() -> Flask:
            tokens = itertools.count()  # each store makes the same tokens, in the same order
            monkeypatch.setattr(auth_tokens, "new_token", lambda: "clp_" + (
                base64.urlsafe_b64encode(b"token-%d" % next(tokens)).decode()))
            home = tmp_path / f"home{next(made)}"
            home.mkdir()
            tokens_file = home / "tokens.json"
            for name, role in (("scheduler", Role.SCHEDULER), ("retry", Role.RETRY)):
                auth_tokens.create_token(tokens_file, name, role)
            apps.append(create_app(settings_for(
                home, CLEPSYDRA_STORE_FAST_PATH=str(fast_path).lower(),
                CLEPSYDRA_STORE_MAX_REQUEST_BYTES="4096", CLEPSYDRA_AUTH="on",
                CLEPSYDRA_AUTH_ADMIN_TOKEN=ADMIN,
                CLEPSYDRA_AUTH_TOKENS_FILE=str(tokens_file))))
            return apps[-1]
        return make

    apps: list[Flask] = []
    ON_POLLER.clear()
    try:
        ways = {"flask": list(answers(maker(False), by_wsgi, clock)),
                "lean": list(answers(maker(True), by_wsgi, clock)),
                "poller": list(answers(maker(True), by_poller, clock))}
    finally:
        for app in apps:
            context(app).close()
    steps = scenario()
    assert {s.endpoint for s in steps} == {r.endpoint for r in ROUTES}  # every route
    for i, step in enumerate(steps):
        flask, lean, poller = (ways[w][i][1:] for w in ("flask", "lean", "poller"))
        assert flask == lean == poller, (step, flask, lean, poller)
    statuses = [answer[1] for answer in ways["flask"]]
    assert statuses[:len({s.endpoint for s in steps})] == \
        ["401 Unauthorized"] * len({s.endpoint for s in steps})
    assert {"200 OK", "201 Created", "400 Bad Request", "403 Forbidden", "404 Not Found",
            "409 Conflict", "413 Request Entity Too Large"} <= set(statuses)
    by_path = {(s.method, s.path, s.body == _message("drained")): status
               for s, status in zip(steps, statuses, strict=True)}
    assert by_path["POST", "/v1/topics/orders/messages", True] == \
        "403 Forbidden"  # a drained shard takes no new message (DEC-shard-drain)
    assert by_path["POST", "/v1/cluster/shards/7/drain", False] == "404 Not Found"
    poller_routes = {r.endpoint for r in ROUTES if r.lane is Lane.POLLER}
    assert poller_routes == {"messages.produce_message", "messages.produce_batch", "queues.pull"}
    # DEC-poller-pull: the poller answers a pull that cannot wait, a thread one that may
    pulls = [(s.query, s.token is not None, s in ON_POLLER)
             for s in steps if s.endpoint == "queues.pull"]
    assert [on_poller for *_, on_poller in pulls] == [True, True, True, True, True, False,
                                                      False, True, True], pulls
    assert ON_POLLER.count(steps[-1]) == 0  # the rest were Flask's or the lean path's


STEADY_CALLS = {"groups.commit_offset", "groups.heartbeat", "schedule.entries"}
"""The calls a running stack makes of the store all the time besides produce and pull: the
consumer's offset commit and heartbeat, the scheduler's level entries read
(DEC-lean-steady-calls)."""


def test_the_steady_calls_are_answered_below_flask(tmp_path: Path) -> None:
    # DEC-lean-steady-calls, SPEC C1 (heartbeat), D3 (entries): with the fast path on, the
    # lean path answers the consumer's commit and heartbeat and the scheduler's entries read
    # (Flask's hooks do not run for them); with it off, Flask's views do, with the same
    # answers (test_every_route_answers_alike_on_every_way_in compares them byte for byte)
    lean = {r.endpoint for r in ROUTES if r.lane is Lane.LEAN}
    assert lean >= STEADY_CALLS
    answered: dict[bool, list[tuple[int, Any]]] = {}
    for fast in (True, False):
        home = tmp_path / f"home-{fast}"
        home.mkdir()
        app = create_app(settings_for(home, CLEPSYDRA_STORE_FAST_PATH=str(fast).lower()))
        try:
            seen: list[str | None] = []
            app.before_request(lambda seen=seen: seen.append(request.endpoint))
            client = app.test_client()
            assert client.post("/v1/topics", json={"name": "orders", "queues": 1}
                               ).status_code == 201
            answers = [client.put("/v1/groups/g/offsets",
                                  json={"topic": "orders", "queueId": 0, "offset": 0}),
                       client.post("/v1/groups/g/heartbeat",
                                   json={"clientId": "c1", "subscriptions": {"orders": "*"}}),
                       client.get("/v1/schedule/levels/1/entries?offset=0&max=5"),
                       client.get("/v1/groups/g/offsets")]
            answered[fast] = [(a.status_code, a.get_json()) for a in answers]
            assert seen[0] == "topics.create_topic" and seen[-1] == "groups.get_offsets"
            assert (set(seen) & STEADY_CALLS) == (set() if fast else STEADY_CALLS), seen
        finally:
            context(app).close()
    assert answered[True] == answered[False]
    assert [status for status, _ in answered[True]] == [200, 200, 200, 200]
    assert answered[True][1][1]["consumers"] == ["c1"]
    assert answered[True][3][1]["offsets"] == {"orders": {"0": 0}}
