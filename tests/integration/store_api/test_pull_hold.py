"""The pull hold (DEC-pull-hold; ``waitMs`` on the v1 pull route, C3): a held pull answers when a
message is appended to its queue, an empty one after its wait, at once past the store's bound
(``CLEPSYDRA_STORE_PULL_HOLD_MAX``), at once when the store stops; the lean path answers every
pull as Flask does. Events are ordered through the store's own count of held pulls, never
through a timed threshold."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask, request
from flask.testing import FlaskClient

from clepsydra_core import naming
from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token
from clepsydra_core.wire.messages import MAX_PULL_WAIT_MS
from tests.integration.store_api.helpers import TOPIC, assert_error, context
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration

PULL = f"/v1/topics/{TOPIC}/queues/0/messages"
PRODUCE = f"/v1/topics/{TOPIC}/messages"
LONG_MS = MAX_PULL_WAIT_MS
"""A wait no test lasts: a pull answered before it was not answered by its wait's end."""
ADMIN = "clp_admin-token-for-the-lean-pull-test-000001"


class Held(threading.Thread):
    """One pull in its own thread (a held pull blocks its caller), timed."""

    def __init__(self, client: FlaskClient, query: str) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.query = query
        self.answer: tuple[int, dict[str, Any]] | None = None
        self.seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        resp = self.client.get(f"{PULL}?{self.query}")
        self.seconds = time.monotonic() - started
        self.answer = (resp.status_code, resp.get_json())

    def result(self) -> tuple[int, dict[str, Any]]:
        self.join(LONG_MS / 1000)
        assert not self.is_alive(), "the held pull did not answer before its wait ended"
        assert self.answer is not None
        return self.answer


def _held_count(app: Flask) -> int:
    return context(app).store._arrivals.held


def _hold(app: Flask, query: str, held_before: int = 0) -> Held:
    """A pull started in a thread, returned once the store holds it."""
    pull = Held(app.test_client(), query)
    pull.start()
    wait_until(lambda: _held_count(app) == held_before + 1 or not pull.is_alive(), 10,
               what="the pull held")
    assert pull.is_alive(), pull.answer
    return pull


def _bodies(page: dict[str, Any]) -> list[str]:
    return [m["body"] for m in page["messages"]]


def test_a_held_pull_answers_when_a_message_arrives(app: Flask, client: FlaskClient) -> None:
    # nothing at the offset, so the pull waits; the append wakes it (not the wait's
    # end) and it answers the page from its offset
    pull = _hold(app, f"offset=0&waitMs={LONG_MS}")
    assert client.post(PRODUCE, json={"body": "m0", "queueId": 0}).status_code == 201
    status, page = pull.result()
    assert status == 200 and _bodies(page) == ["m0"]
    assert (page["nextOffset"], page["maxOffset"]) == (1, 1)
    assert _held_count(app) == 0


def test_an_append_to_another_queue_does_not_answer_a_held_pull(app: Flask,
                                                                client: FlaskClient) -> None:
    pull = _hold(app, f"offset=0&waitMs={LONG_MS}")
    assert client.post(PRODUCE, json={"body": "q1", "queueId": 1}).status_code == 201
    assert pull.is_alive() and _held_count(app) == 1
    assert client.post(PRODUCE, json={"body": "q0", "queueId": 0}).status_code == 201
    assert _bodies(pull.result()[1]) == ["q0"]


def test_a_held_pull_waits_past_messages_its_tags_do_not_match(app: Flask,
                                                              client: FlaskClient) -> None:
    # C3 with the hold: an append of another tag moves the read on and the wait goes on
    pull = _hold(app, f"offset=0&tags=paid&waitMs={LONG_MS}")
    client.post(PRODUCE, json={"body": "c", "tags": "created", "queueId": 0})
    wait_until(lambda: context(app).store.read_queue(TOPIC, 0, 0, 1).max_offset == 1, 10,
               what="the first append")
    assert pull.is_alive() and _held_count(app) == 1
    client.post(PRODUCE, json={"body": "p", "tags": "paid", "queueId": 0})
    status, page = pull.result()
    assert status == 200 and _bodies(page) == ["p"] and page["nextOffset"] == 2


def test_an_empty_held_pull_answers_after_its_wait(app: Flask, client: FlaskClient) -> None:
    pull = _hold(app, "offset=0&waitMs=300")
    status, page = pull.result()
    assert status == 200 and page["messages"] == [] and page["nextOffset"] == 0
    assert pull.seconds >= 0.3  # held for the whole wait (an Event's wait never ends early)
    assert _held_count(app) == 0


def test_without_wait_ms_a_pull_answers_at_once(app: Flask, client: FlaskClient) -> None:
    # every v1 client: no waitMs (or 0) is today's pull
    for query in ("offset=0", "offset=0&waitMs=0"):
        page = client.get(f"{PULL}?{query}").get_json()
        assert page["messages"] == [] and _held_count(app) == 0
    client.post(PRODUCE, json={"body": "m", "queueId": 0})
    assert _bodies(client.get(f"{PULL}?offset=0&waitMs={LONG_MS}").get_json()) == ["m"]


def test_past_the_bound_a_pull_answers_at_once(make_app: Callable[..., Flask]) -> None:
    # CLEPSYDRA_STORE_PULL_HOLD_MAX held pulls at most: the next one answers at once, while
    # the first is still held
    for fast in ("true", "false"):
        app = make_app(CLEPSYDRA_STORE_FAST_PATH=fast, CLEPSYDRA_STORE_PULL_HOLD_MAX="1")
        client = app.test_client()
        client.post("/v1/topics", json={"name": TOPIC, "queues": 2})
        first = _hold(app, f"offset=0&waitMs={LONG_MS}")
        page = client.get(f"/v1/topics/{TOPIC}/queues/1/messages?waitMs={LONG_MS}").get_json()
        assert page["messages"] == [] and first.is_alive() and _held_count(app) == 1
        client.post(PRODUCE, json={"body": "m", "queueId": 0})
        assert _bodies(first.result()[1]) == ["m"]
        off = make_app(CLEPSYDRA_STORE_FAST_PATH=fast, CLEPSYDRA_STORE_PULL_HOLD_MAX="0")
        off.test_client().post("/v1/topics", json={"name": TOPIC, "queues": 1})
        assert off.test_client().get(f"{PULL}?waitMs={LONG_MS}").get_json()["messages"] == []


def test_stopping_the_store_answers_held_pulls_at_once(app: Flask) -> None:
    # graceful stop: the held pulls answer now (an empty page), and no pull is held any more
    app.test_client().post("/v1/topics", json={"name": TOPIC, "queues": 1})
    pulls = [_hold(app, f"offset=0&waitMs={LONG_MS}", held) for held in range(2)]
    context(app).store._arrivals.close()
    for pull in pulls:
        status, page = pull.result()
        assert status == 200 and page["messages"] == []
    assert app.test_client().get(f"{PULL}?waitMs={LONG_MS}").get_json()["messages"] == []


def test_wait_ms_is_checked(client: FlaskClient) -> None:
    for bad in (str(MAX_PULL_WAIT_MS + 1), "-1", "soon"):
        assert_error(client.get(f"{PULL}?waitMs={bad}"), 400, "INVALID_REQUEST")


def test_sigterm_answers_a_held_pull_at_once(tmp_path: Path,
                                             start_store: Callable[..., HttpService]) -> None:
    # the store's worker releases held pulls when SIGTERM starts its graceful stop, instead
    # of waiting for the pulls' waits to end before it exits
    store = start_store()
    url = store.url
    requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 1}, timeout=10)
    answer: list[requests.Response] = []
    pull = threading.Thread(target=lambda: answer.append(requests.get(
        f"{url}{PULL}", params={"waitMs": LONG_MS}, timeout=2 * LONG_MS / 1000)), daemon=True)
    pull.start()

    def held() -> bool:
        metrics = requests.get(f"{url}/metrics", timeout=10).text
        return "clepsydra_store_engine_held_pulls 1.0" in metrics

    wait_until(held, 10, what="the pull held")
    stopped = threading.Thread(target=store.stop, daemon=True)
    stopped.start()
    pull.join(LONG_MS / 1000)
    assert answer and answer[0].status_code == 200 and answer[0].json()["messages"] == []
    stopped.join(LONG_MS / 1000)
    assert store.exit_code() == 0


# ---- the lean path answers as Flask does ---------------------------------------------------

def _answers(app: Flask, seen: list[str | None]) -> list[tuple[int, Any]]:
    """A pull's answers of one app: pages (with body or not, tags, a held one woken by an
    append), bad input, S3, metrics counted."""
    client = app.test_client()
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    for i, tag in enumerate(("a", "b", "a")):
        client.post(PRODUCE, json={"body": f"m{i}", "tags": tag, "queueId": 0,
                                   "properties": {"k": "v"}})
    seen.clear()
    out: list[tuple[int, Any]] = []
    for path in (f"{PULL}", f"{PULL}?offset=1&max=1", f"{PULL}?tags=a%20||%20c&body=false",
                 f"{PULL}?offset=9", f"{PULL}?max=0", f"{PULL}?max=1&max=x",
                 f"{PULL}?body=maybe", f"{PULL}?waitMs=x",
                 f"/v1/topics/{TOPIC}/queues/7/messages", f"/v1/topics/{TOPIC}/queues/x/messages",
                 "/v1/topics/nope/queues/0/messages", "/v1/topics/b%20d/queues/0/messages",
                 f"/v1/topics/{naming.SCHEDULE_TOPIC}/queues/0/messages",
                 f"/v1/topics/{TOPIC}/queues/1/messages?offset=0&waitMs=1"):
        resp = client.get(path)
        body = resp.get_json()
        for m in body.get("messages", []) if isinstance(body, dict) else []:
            m.pop("storeTimestamp"), m.pop("bornTimestamp"), m.pop("bornHost")
            m.pop("msgId"), m.pop("offsetMsgId"), m.pop("properties")
        out.append((resp.status_code, (resp.mimetype, body)))
    pull = _hold(app, f"offset=3&waitMs={LONG_MS}")
    client.post(PRODUCE, json={"body": "late", "queueId": 0})
    out.append((pull.result()[0], _bodies(pull.result()[1])))
    metrics = client.get("/metrics").get_data(as_text=True)
    counted = sorted(line.split("{")[1] for line in metrics.splitlines() if line.startswith(
        'clepsydra_store_requests_total{operation="pull",status='))
    out.append((0, counted))
    return out


def test_the_lean_path_answers_pulls_as_flask_does(make_app: Callable[..., Flask],
                                                   tmp_path: Path) -> None:
    # the pull is answered below Flask by the store's lean path (Flask's hooks do
    # not run for it) with the answers Flask's view gives: pages, C3 tags, body=false, 400
    # for bad input, OFFSET_OUT_OF_RANGE, 404, S3, a held pull, the request metrics; access
    # control (401, 403 without PULL on the topic)
    results = {}
    for fast in ("true", "false"):
        app = make_app(CLEPSYDRA_STORE_FAST_PATH=fast)
        seen: list[str | None] = []
        app.before_request(lambda seen=seen: seen.append(request.endpoint))
        results[fast] = _answers(app, seen)
        assert ("queues.pull" in seen) == (fast == "false"), seen
    assert results["true"] == results["false"]
    statuses = [status for status, _ in results["true"]]
    assert statuses == [200, 200, 200, 404, 400, 200, 400, 400, 404, 400, 404, 400, 403, 200,
                        200, 0]  # a repeated parameter: its first value, as Flask reads it
    assert results["true"][-2] == (200, ["late"])
    tokens_file = tmp_path / "tokens.json"
    _, consumer = create_token(tokens_file, "consumer", Role.CONSUMER, topics=("other-*",),
                               groups=("g",))
    refusals = {}
    for fast in ("true", "false"):
        app = make_app(CLEPSYDRA_STORE_FAST_PATH=fast, CLEPSYDRA_AUTH="on",
                       CLEPSYDRA_AUTH_ADMIN_TOKEN=ADMIN,
                       CLEPSYDRA_AUTH_TOKENS_FILE=str(tokens_file))
        client = app.test_client()
        client.post("/v1/topics", json={"name": TOPIC, "queues": 1},
                    headers={"Authorization": f"Bearer {ADMIN}"})
        none = client.get(PULL)
        other = client.get(PULL, headers={"Authorization": f"Bearer {consumer}"})
        ok = client.get(PULL, headers={"Authorization": f"Bearer {ADMIN}"})
        refusals[fast] = [(r.status_code, r.get_json(), r.headers.get("WWW-Authenticate"))
                          for r in (none, other, ok)]
    assert refusals["true"] == refusals["false"]
    assert [status for status, _, _ in refusals["true"]] == [401, 403, 200]
