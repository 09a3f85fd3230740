"""Access control with real processes: redis-server, the store,
the retry service, the scheduler (worker + beat) and the analytics API on loopback, all with
``CLEPSYDRA_AUTH=on`` and one tokens file; each service calls the others with its own token
(``CLEPSYDRA_TOKEN``).

- a missing or wrong token is a 401 with ``WWW-Authenticate: Bearer`` on every service, the
  produce fast path included; probes stay open;
- a producer sends to its topics, and gets a 403 naming what is missing on another topic, on
  ``%DLQ%x`` and on ``SCHEDULE_TOPIC_XXXX`` (even with a ``*`` pattern);
- a consumer pulls and commits, and gets a 403 on topic creation and on a DLQ purge; an admin
  does both;
- a delayed message is delivered and a send-back reaches ``%RETRY%`` (the scheduler's and the
  retry service's own calls authenticate);
- a token added to the file is accepted without a restart; ``clepsydra auth create`` works on
  the file and through the store.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from clepsydra_client.cli.main import main as cli_main
from clepsydra_core import naming
from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import create_token
from clepsydra_core.wire.auth import TokenCreated, TokenInfo, TokenList, TokenRevoked
from tools.parts import ANALYTICS_API, Stack
from tools.processes import HttpService, wait_until

pytestmark = pytest.mark.integration

LEVELS = " ".join(["1s"] * 18)
TOPIC = "orders-eu"
OTHER = "payments"
GROUP = "billing"


def enc(name: str) -> str:
    return quote(name, safe="")


@dataclass
class AuthStack:
    tokens_file: Path
    tokens: dict[str, str]
    store: HttpService
    retry: HttpService
    analytics: HttpService
    http: requests.Session

    def call(self, method: str, url: str, token: str | None, **kw: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.request(method, url, headers=headers, timeout=30, **kw)

    def as_(self, who: str, method: str, path: str, **kw: Any) -> requests.Response:
        base = self.retry.url if path.startswith("retry:") else self.store.url
        return self.call(method, base + path.removeprefix("retry:"), self.tokens[who], **kw)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    root = tmp_path_factory.mktemp("auth")
    tokens_file = root / "secret" / "tokens.json"
    grants = {"producer": (Role.PRODUCER, ("orders-*",), ()),
              "any-producer": (Role.PRODUCER, ("*",), ()),
              "consumer": (Role.CONSUMER, ("orders-*",), (GROUP,)),
              "admin": (Role.ADMIN, (), ()), "retry": (Role.RETRY, (), ()),
              "scheduler": (Role.SCHEDULER, (), ()), "analytics": (Role.ANALYTICS, (), ())}
    tokens = {name: create_token(tokens_file, name, role, topics=topics, groups=groups)[1]
              for name, (role, topics, groups) in grants.items()}
    auth_env = {"CLEPSYDRA_AUTH": "on", "CLEPSYDRA_AUTH_TOKENS_FILE": str(tokens_file),
                "CLEPSYDRA_DELAY_LEVELS": LEVELS}
    builder = (Stack(root, env=auth_env).with_redis().with_store()
               .with_retry(CLEPSYDRA_TOKEN=tokens["retry"])
               .with_analytics(ANALYTICS_API, CLEPSYDRA_TOKEN=tokens["analytics"])
               .with_scheduler(CLEPSYDRA_TOKEN=tokens["scheduler"],
                               CLEPSYDRA_SCHEDULER_KEEPALIVE_S="1",
                               CLEPSYDRA_SCHEDULER_POLL_MS="100",
                               CLEPSYDRA_SCHEDULER_BACKOFF_S="1"))
    with builder.start():
        s = AuthStack(tokens_file, tokens, builder.store, builder.retry, builder.analytics,
                      requests.Session())
        for topic in (TOPIC, OTHER):
            resp = s.as_("admin", "POST", "/v1/topics", json={"name": topic, "queues": 1})
            assert resp.status_code in (200, 201), resp.text
        yield s
        s.http.close()


def _unauthorized(resp: requests.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.json()["error"] == "UNAUTHORIZED"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


def test_missing_or_wrong_token_is_401_on_every_service(stack: AuthStack) -> None:
    calls = [("GET", stack.store.url + "/v1/topics"),
             ("POST", f"{stack.store.url}/v1/topics/{TOPIC}/messages"),  # the fast path
             ("POST", f"{stack.store.url}/v1/topics/{TOPIC}/messages/batch"),
             ("GET", stack.store.url + "/v1/schedule/levels"),
             ("GET", stack.store.url + "/v1/no-such-route"),  # nothing revealed
             ("GET", stack.retry.url + "/v1/groups"),
             ("POST", f"{stack.retry.url}/v1/groups/{GROUP}/dlq/purge"),
             ("GET", stack.analytics.url + "/v1/reports")]
    for method, url in calls:
        for token in (None, "clp_not-a-token"):
            _unauthorized(stack.call(method, url, token, json={"body": "x"}))
    for service in (stack.store, stack.retry, stack.analytics):  # probes stay open
        assert stack.http.get(service.url + "/healthz", timeout=10).status_code == 200
        assert stack.http.get(service.url + "/metrics", timeout=10).status_code == 200
        assert stack.http.get(service.url + "/openapi.json", timeout=10).status_code == 200


def test_producer_sends_to_its_topics_only(stack: AuthStack) -> None:
    for path in (f"/v1/topics/{TOPIC}/messages",):
        resp = stack.as_("producer", "POST", path, json={"body": "ok"})
        assert resp.status_code == 201, resp.text
    resp = stack.as_("producer", "POST", f"/v1/topics/{TOPIC}/messages/batch",
                     json={"messages": [{"body": "a"}, {"body": "b"}]})
    assert resp.status_code == 201, resp.text
    resp = stack.as_("producer", "POST", f"/v1/topics/{OTHER}/messages", json={"body": "no"})
    assert resp.status_code == 403 and resp.json()["error"] == "FORBIDDEN"
    assert "role producer may not write topic payments" in resp.json()["message"]
    for who in ("producer", "any-producer"):
        for topic in (naming.dlq_topic("x"), naming.SCHEDULE_TOPIC):
            for suffix in ("/messages", "/messages/batch"):
                resp = stack.as_(who, "POST", f"/v1/topics/{enc(topic)}{suffix}",
                                 json={"body": "no", "messages": [{"body": "no"}]})
                assert resp.status_code == 403, (who, topic, resp.text)
                assert f"may not write topic {topic}: " in resp.json()["message"]
    assert stack.as_("producer", "GET", f"/v1/topics/{TOPIC}/queues/0/messages"
                     ).status_code == 403


def test_consumer_pulls_and_commits_but_does_not_administer(stack: AuthStack) -> None:
    stack.as_("producer", "POST", f"/v1/topics/{TOPIC}/messages", json={"body": "for-c"})
    resp = stack.as_("consumer", "GET", f"/v1/topics/{TOPIC}/queues/0/messages",
                     params={"offset": 0, "max": 10})
    assert resp.status_code == 200 and resp.json()["messages"], resp.text
    resp = stack.as_("consumer", "PUT", f"/v1/groups/{GROUP}/offsets",
                     json={"topic": TOPIC, "queueId": 0, "offset": 1})
    assert resp.status_code in (200, 204), resp.text
    resp = stack.as_("consumer", "PUT", "/v1/groups/other-group/offsets",
                     json={"topic": TOPIC, "queueId": 0, "offset": 1})
    assert resp.status_code == 403 and "group other-group" in resp.json()["message"]
    resp = stack.as_("consumer", "POST", "/v1/topics", json={"name": "new", "queues": 1})
    assert resp.status_code == 403
    assert resp.json()["message"] == "role consumer may not manage topic"
    resp = stack.as_("consumer", "POST", f"retry:/v1/groups/{GROUP}/dlq/purge",
                     json={"all": True})
    assert resp.status_code == 403 and "role consumer may not resend or purge the DLQ of " \
        f"group {GROUP}" == resp.json()["message"]
    # an admin does both
    resp = stack.as_("admin", "POST", "/v1/topics", json={"name": "orders-new", "queues": 1})
    assert resp.status_code == 201, resp.text
    resp = stack.as_("admin", "PUT", f"retry:/v1/groups/{GROUP}", json={"retryMaxTimes": 3})
    assert resp.status_code in (200, 201), resp.text
    resp = stack.as_("admin", "POST", f"retry:/v1/groups/{GROUP}/dlq/purge", json={"all": True})
    assert resp.status_code == 200, resp.text
    # with a valid token, an unknown route is the usual 404
    assert stack.as_("producer", "GET", "/v1/no-such-route").status_code == 404
    assert stack.call("GET", stack.analytics.url + "/v1/export/status",
                      stack.tokens["producer"]).status_code == 403
    assert stack.call("GET", stack.analytics.url + "/v1/reports",
                      stack.tokens["admin"]).status_code == 200


def test_delayed_message_and_send_back_with_service_tokens(stack: AuthStack) -> None:
    resp = stack.as_("producer", "POST", f"/v1/topics/{TOPIC}/messages",
                     json={"body": "later", "delayLevel": 1})
    assert resp.status_code == 201 and resp.json()["topic"] == naming.SCHEDULE_TOPIC, resp.text

    def delivered() -> bool:
        page = stack.as_("consumer", "GET", f"/v1/topics/{TOPIC}/queues/0/messages",
                         params={"offset": 0, "max": 100}).json()
        return any(m["body"] == "later" for m in page["messages"])

    wait_until(delivered, 30, 0.1, what="the delayed message handed over by the scheduler")
    sent = stack.as_("producer", "POST", f"/v1/topics/{TOPIC}/messages",
                     json={"body": "again"}).json()
    resp = stack.as_("consumer", "POST", f"retry:/v1/groups/{GROUP}/send-back",
                     json={"commitLogOffset": sent["commitLogOffset"], "delayLevel": 1})
    assert resp.status_code == 200 and resp.json()["outcome"] == "RETRY", resp.text
    retry_topic = enc(naming.retry_topic(GROUP))

    def retried() -> bool:
        resp = stack.as_("consumer", "GET", f"/v1/topics/{retry_topic}/queues/0/messages",
                         params={"offset": 0, "max": 100})
        return resp.status_code == 200 and any(m["body"] == "again"
                                               for m in resp.json()["messages"])

    wait_until(retried, 30, 0.1, what="the send-back's copy in %RETRY%billing")
    resp = stack.as_("consumer", "POST", f"retry:/v1/groups/{OTHER}/send-back",
                     json={"commitLogOffset": sent["commitLogOffset"]})
    assert resp.status_code == 403


def test_a_token_added_to_the_file_is_accepted_without_a_restart(stack: AuthStack) -> None:
    _, token = create_token(stack.tokens_file, "late-producer", Role.PRODUCER,
                            topics=(TOPIC,))

    def accepted() -> bool:
        return stack.call("POST", f"{stack.store.url}/v1/topics/{TOPIC}/messages", token,
                          json={"body": "late"}).status_code == 201

    wait_until(accepted, 10, 0.2, what="the new token accepted by the running store")
    wait_until(lambda: stack.call("GET", f"{stack.retry.url}/v1/groups/{GROUP}/dlq", token
                                  ).status_code == 403, 10, 0.2, what="the retry service too")


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_auth_create_on_the_file_and_through_the_store(stack: AuthStack, tmp_path: Path) -> None:
    own = tmp_path / "tokens.json"
    code, out, err = _cli("--json", "auth", "create", "cli-file", "--role", "producer",
                          "--topics", "orders-*", "--file", str(own))
    assert code == 0, err
    shown = json.loads(out)
    assert set(shown) == {"name", "role", "token"} and shown["role"] == "producer"
    assert shown["token"] not in own.read_text()
    code, out, err = _cli("--json", "auth", "list", "--file", str(own))
    assert code == 0 and shown["token"] not in out and "sha256" not in out

    store = ["--store-url", stack.store.url]
    code, out, err = _cli(*store, "--token", stack.tokens["consumer"], "--json", "auth",
                          "create", "x", "--role", "admin")
    assert code == 1 and "role consumer may not manage tokens" in err
    assert stack.tokens["consumer"] not in err
    code, out, err = _cli(*store, "--token", stack.tokens["admin"], "--json", "auth", "create",
                          "cli-store", "--role", "consumer", "--topics", "orders-*",
                          "--groups", "audit")
    assert code == 0, err
    token = json.loads(out)["token"]
    wait_until(lambda: stack.call("GET", f"{stack.store.url}/v1/topics/{TOPIC}/queues/0/"
                                  "messages", token).status_code == 200, 10, 0.2,
               what="the token made through the store accepted")
    code, out, err = _cli(*store, "--token", stack.tokens["admin"], "--json", "auth", "list")
    assert code == 0 and "cli-store" in out and token not in out
    code, out, err = _cli(*store, "--token", stack.tokens["admin"], "auth", "revoke",
                          "cli-store")
    assert code == 0, err
    wait_until(lambda: stack.call("GET", f"{stack.store.url}/v1/topics", token
                                  ).status_code == 401, 10, 0.2, what="the revoked token refused")


def test_token_routes_speak_their_wire_types(stack: AuthStack) -> None:
    # the store reads TokenCreate (a bad field named, nothing written) and answers
    # TokenCreated, TokenList and TokenRevoked
    admin, url = stack.tokens["admin"], f"{stack.store.url}/v1/auth/tokens"
    before = stack.tokens_file.read_text()
    for body, words in [({"name": "n", "role": "root"}, "token.role: unknown role 'root'"),
                        ({"name": "n", "role": "consumer", "topics": 3},
                         "token.topics must be a string or an array of strings"),
                        ({"name": "n", "role": "consumer", "topics": [""]},
                         "token.topics must be a pattern or a list of patterns"),
                        ({"name": "n", "role": "admin", "ratePerS": -1},
                         "token.ratePerS must be a number of requests a second >= 0"),
                        ({"name": "n", "role": "admin", "token": "mine"},
                         "token: unknown field 'token'")]:
        resp = stack.call("POST", url, admin, json=body)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"] == "INVALID_REQUEST" and words in resp.json()["message"]
    assert stack.tokens_file.read_text() == before
    resp = stack.call("POST", url, admin, json={"name": "typed", "role": "consumer",
                                                "topics": "orders-*", "groups": ["audit"],
                                                "ratePerS": 5})
    assert resp.status_code == 201, resp.text
    created = TokenCreated.from_json(resp.json())
    assert (created.topics, created.groups, created.rate_per_s) == (["orders-*"], ["audit"], 5)
    listed = TokenList.from_json(stack.call("GET", url, admin).json()).tokens
    assert [t for t in listed if t.name == "typed"] == [
        TokenInfo("typed", "consumer", ["orders-*"], ["audit"], created.created_ms, 5)]
    resp = stack.call("DELETE", f"{url}/typed", admin)
    assert TokenRevoked.from_json(resp.json()) == TokenRevoked("typed", True)


def test_sdk_with_tokens_produces_consumes_and_retries(stack: AuthStack) -> None:
    """The SDK with ``token=``: a producer sends, a push consumer of its group pulls, fails once
    (send-back through the retry service, redelivered from ``%RETRY%billing`` after the
    scheduler's hand-over), then succeeds and commits; every call authenticated."""
    import threading

    from clepsydra_client import ConsumeResult, Producer, PushConsumer
    from clepsydra_core.errors import Forbidden, Unauthorized

    topic = "orders-sdk"
    stack.as_("admin", "POST", "/v1/topics", json={"name": topic, "queues": 1})
    with Producer(stack.store.url, token=stack.tokens["producer"]) as producer:
        producer.send(topic, "sdk-1")
        with pytest.raises(Forbidden, match="may not write topic payments"):
            producer.send(OTHER, "no")
    with Producer(stack.store.url, token="clp_wrong") as stranger, \
            pytest.raises(Unauthorized):
        stranger.send(topic, "no")

    seen: list[int] = []
    done = threading.Event()
    consumer = PushConsumer(GROUP, stack.store.url, stack.retry.url,
                            token=stack.tokens["consumer"], heartbeat_interval_s=0.5,
                            persist_interval_s=0.2)
    consumer.subscribe(topic, "*")

    @consumer.register_concurrent
    def on_messages(messages: list[Any], context: Any) -> ConsumeResult:
        for m in messages:
            if m.body == b"sdk-1" or m.body == "sdk-1":
                seen.append(m.reconsume_times)
                if m.reconsume_times == 0:
                    context.delay_level_when_next_consume = 1
                    return ConsumeResult.RECONSUME_LATER
                done.set()
        return ConsumeResult.SUCCESS

    consumer.start()
    try:
        assert done.wait(45), f"redelivery not seen: {seen}"
    finally:
        consumer.shutdown()
    assert seen[:2] == [0, 1]
    offsets = stack.as_("consumer", "GET", f"/v1/groups/{GROUP}/offsets",
                        params={"topic": topic}).json()
    assert offsets["offsets"][topic]["0"] == 1


def test_a_token_over_its_rate_gets_429_and_others_go_on(stack: AuthStack) -> None:
    # a token's ratePerS, written to the file, taken without a restart
    token = create_token(stack.tokens_file, "slow-producer", Role.PRODUCER, topics=("orders-*",),
                         rate_per_s=1)[1]
    url = f"{stack.store.url}/v1/topics/{enc(TOPIC)}/messages"

    def send() -> requests.Response:
        return stack.call("POST", url, token, json={"body": "x"})

    wait_until(lambda: send().status_code == 201, 10, what="the new token accepted")
    answers = [send() for _ in range(5)]  # one a second at most: some of these are refused
    refused = [r for r in answers if r.status_code == 429]
    assert refused, [r.status_code for r in answers]
    assert refused[0].json()["error"] == "RATE_LIMITED"
    assert "ratePerS" in refused[0].json()["message"]
    assert int(refused[0].headers["Retry-After"]) >= 1
    assert stack.as_("producer", "POST", f"/v1/topics/{enc(TOPIC)}/messages",
                     json={"body": "y"}).status_code == 201  # another token goes on


def test_cancel_and_reschedule_need_the_producer_right_on_the_message_topic(
        stack: AuthStack) -> None:
    # SPEC T1 under access control: SEND on the message's own topic, by msgId and by key; the timer
    # backlog like the level table (the scheduler's and the admin's)
    mine = stack.as_("producer", "POST", f"/v1/topics/{TOPIC}/messages",
                     json={"body": "t", "delayMs": 3_600_000, "keys": "k-auth"}).json()["msgId"]
    theirs = stack.as_("any-producer", "POST", f"/v1/topics/{OTHER}/messages",
                       json={"body": "t", "delayMs": 3_600_000, "keys": "k-auth"}
                       ).json()["msgId"]
    resp = stack.as_("producer", "DELETE", f"/v1/messages/{theirs}")
    assert resp.status_code == 403 and "write topic payments" in resp.json()["message"]
    resp = stack.as_("producer", "PATCH", f"/v1/messages?topic={OTHER}&key=k-auth",
                     json={"delayMs": 60_000})
    assert resp.status_code == 403, resp.text
    assert stack.as_("consumer", "DELETE", f"/v1/messages/{mine}").status_code == 403
    resp = stack.as_("producer", "PATCH", f"/v1/messages/{mine}", json={"delayMs": 60_000})
    assert resp.status_code == 200 and resp.json()["status"] == "rescheduled", resp.text
    resp = stack.as_("producer", "DELETE", f"/v1/messages?topic={TOPIC}&key=k-auth")
    assert resp.json() == {"status": "cancelled", "msgIds": [mine]}, resp.text
    assert stack.as_("any-producer", "DELETE", f"/v1/messages/{theirs}").status_code == 200
    assert stack.as_("scheduler", "GET", "/v1/schedule/timers").status_code == 200
    assert stack.as_("producer", "GET", "/v1/schedule/timers").status_code == 403


def test_tokens_made_through_the_store_work_at_once_everywhere_and_revoked_stop(
        stack: AuthStack) -> None:
    """DEC-tokens-at-once. Tokens created through the store one after another, at every phase
    of the services' once-a-second reading of the file (seeded random pauses of 0 to 1.2 s),
    each used at once, with no wait, on every route family of every service: never a 401.
    Then each one revoked through the store: refused by the store at once, by the others
    within the file's reading interval, and never accepted again."""
    import random

    from clepsydra_core.auth_tokens import RELOAD_CHECK_S

    admin = stack.tokens["admin"]
    rng = random.Random(35)
    store, retry, analytics = stack.store.url, stack.retry.url, stack.analytics.url
    roles = ("producer", "consumer", "admin")
    # (method, url, json body, the answer this role gets: allowed or refused, never 401)
    uses = {
        "producer": [("POST", f"{store}/v1/topics/{TOPIC}/messages", {"body": "now"}, 201),
                     ("POST", f"{store}/v1/topics/{TOPIC}/messages/batch",
                      {"messages": [{"body": "now"}]}, 201),
                     ("POST", f"{store}/v1/topics/{enc(naming.SCHEDULE_TOPIC)}/messages",
                      {"body": "no"}, 403),
                     ("POST", f"{store}/v1/topics/{enc(naming.dlq_topic(GROUP))}/messages",
                      {"body": "no"}, 403),
                     ("POST", f"{store}/v1/internal/copy", {}, 403),
                     ("POST", f"{retry}/v1/groups/{GROUP}/dlq/purge", {"all": True}, 403),
                     ("GET", f"{analytics}/v1/export/status", None, 403)],
        "consumer": [("GET", f"{store}/v1/topics/{TOPIC}/queues/0/messages", None, 200),
                     ("GET", f"{store}/v1/schedule/levels", None, 403),
                     ("POST", f"{retry}/v1/groups/{GROUP}/dlq/purge", {"all": True}, 403),
                     ("GET", f"{analytics}/v1/reports", None, 403)],
        "admin": [("GET", f"{store}/v1/topics", None, 200),
                  ("POST", f"{store}/v1/internal/copy", {}, 403),
                  ("GET", f"{retry}/v1/groups/{GROUP}", None, 200),
                  ("GET", f"{analytics}/v1/reports", None, 200)],
    }
    made: list[tuple[str, str]] = []
    for i in range(24):
        time.sleep(rng.uniform(0.0, 1.2))
        role = roles[i % len(roles)]
        resp = stack.call("POST", f"{store}/v1/auth/tokens", admin,
                          json={"name": f"at-once-{i}", "role": role, "topics": "orders-*",
                                "groups": [GROUP]})
        assert resp.status_code == 201, resp.text
        token = resp.json()["token"]
        made.append((f"at-once-{i}", token))
        answers = [(url, stack.call(method, url, token, json=body).status_code, want)
                   for method, url, body, want in uses[role]]
        assert all(got == want for _, got, want in answers), (i, role, answers)

    probes = [f"{store}/v1/topics", f"{retry}/v1/groups/{GROUP}", f"{analytics}/v1/reports"]
    for name, token in made:
        resp = stack.call("DELETE", f"{store}/v1/auth/tokens/{name}", admin)
        assert resp.status_code == 200, resp.text
        _unauthorized(stack.call("GET", probes[0], token))  # the store: at once

    def refused_everywhere() -> bool:
        return all(stack.call("GET", url, t).status_code == 401 for url in probes[1:]
                   for _, t in made)

    # the others: within the interval (with a margin for a busy machine)
    wait_until(refused_everywhere, RELOAD_CHECK_S + 5, 0.1, what="the revoked tokens refused")
    for _ in range(3):  # and never accepted again
        for url in probes:
            for _, token in made:
                _unauthorized(stack.call("GET", url, token))
