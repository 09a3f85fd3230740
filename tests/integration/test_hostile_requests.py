"""Hostile requests against both HTTP services as real processes: numbers in
other scripts' digits, JSON nested past what a reader takes, a request line and headers over the
HTTP server's limits. Each gets a 4xx in the v1 JSON error shape, nothing is written, and the
service stays up."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from tests.integration.retry.conftest import LEVELS_1S
from tools.parts import Stack

pytestmark = pytest.mark.integration

TOPIC = "hostile"
GROUP = "hostile-group"
ARABIC_12 = "\u0661\u0662"  # twelve in Arabic-Indic digits
FULLWIDTH_12 = "\uff11\uff12"  # twelve in fullwidth digits
LIMIT_BYTES = 256 * 1024
BODY_LIMIT_BYTES = 64 * 1024
"""The store's largest message body, under its request limit: a send can break either."""


@dataclass
class Services:
    store: str
    retry: str


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    home = tmp_path_factory.mktemp("hostile")
    builder = (Stack(home).with_redis()
               .with_store(CLEPSYDRA_STORE_MAX_REQUEST_BYTES=str(LIMIT_BYTES),
                           CLEPSYDRA_STORE_MAX_BODY_BYTES=str(BODY_LIMIT_BYTES))
               .with_retry(CLEPSYDRA_DELAY_LEVELS=LEVELS_1S,
                           CLEPSYDRA_RETRY_MAX_REQUEST_BYTES=str(LIMIT_BYTES)))
    with builder.start() as stack:
        store, retry = stack.store, stack.retry
        assert requests.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 1},
                             timeout=10).status_code == 201
        assert requests.put(f"{retry.url}/v1/groups/{GROUP}", json={},
                            timeout=10).status_code == 201
        yield Services(store.url, retry.url)


def assert_json_error(resp: requests.Response, status: int, code: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json"), resp.text
    body = resp.json()
    assert set(body) >= {"error", "message"}
    if code is not None:
        assert body["error"] == code, body


def assert_up(services: Services) -> None:
    for url in (services.store, services.retry):
        assert requests.get(f"{url}/healthz", timeout=10).status_code == 200


def stored_count(services: Services) -> int:
    queues = requests.get(f"{services.store}/v1/topics/{TOPIC}", timeout=10).json()["queues"]
    return int(queues[0]["maxOffset"])


@pytest.mark.parametrize("digits", [ARABIC_12, FULLWIDTH_12, "+12", " 12", "1_2"])
def test_numbers_are_ascii_digits_only(services: Services, digits: str) -> None:
    # int() takes all of these; an offset, count or queue id must not
    store, retry = services.store, services.retry
    pull = f"{store}/v1/topics/{TOPIC}/queues/0/messages"
    assert_json_error(requests.get(pull, params={"offset": digits}, timeout=10), 400,
                      "INVALID_REQUEST")
    assert_json_error(requests.get(pull, params={"max": digits}, timeout=10), 400,
                      "INVALID_REQUEST")
    assert_json_error(requests.get(f"{store}/v1/topics/{TOPIC}/queues/{digits}/messages",
                                   timeout=10), 400, "INVALID_REQUEST")
    assert_json_error(requests.get(f"{store}/v1/commitlog/{digits}", timeout=10), 400,
                      "INVALID_REQUEST")
    assert_json_error(requests.get(f"{store}/v1/schedule/levels/{digits}/entries",
                                   timeout=10), 400, "INVALID_REQUEST")
    dlq = f"{retry}/v1/groups/{GROUP}/dlq"
    assert_json_error(requests.get(dlq, params={"offset": digits}, timeout=10), 400,
                      "INVALID_REQUEST")
    assert_json_error(requests.get(dlq, params={"fromMs": digits}, timeout=10), 400,
                      "INVALID_REQUEST")
    # the ASCII forms are taken
    assert requests.get(pull, params={"offset": "0", "max": "12"}, timeout=10).status_code == 200
    assert requests.get(dlq, params={"offset": "0"}, timeout=10).status_code == 200
    assert_up(services)


def test_deeply_nested_json_is_a_400_from_both_services(services: Services) -> None:
    # one JSON reader; the retry service answered 500 here
    before = stored_count(services)
    deep = b"[" * 100_000 + b"]" * 100_000
    deep_object = b'{"a":' * 5_000 + b"1" + b"}" * 5_000
    for raw in (deep, deep_object):
        for url in (f"{services.store}/v1/topics/{TOPIC}/messages",
                    f"{services.store}/v1/topics/{TOPIC}/messages/batch",
                    f"{services.store}/v1/groups/{GROUP}/offsets",
                    f"{services.retry}/v1/groups/{GROUP}/send-back",
                    f"{services.retry}/v1/groups/{GROUP}/send-back/batch"):
            method = requests.put if url.endswith("/offsets") else requests.post
            resp = method(url, data=raw, headers={"Content-Type": "application/json"},
                          timeout=30)
            assert_json_error(resp, 400, "INVALID_JSON")
        resp = requests.put(f"{services.retry}/v1/groups/{GROUP}", data=raw,
                            headers={"Content-Type": "application/json"}, timeout=30)
        assert_json_error(resp, 400, "INVALID_JSON")
    assert stored_count(services) == before
    assert_up(services)


def test_over_long_request_line_and_headers_answer_json(services: Services) -> None:
    # gunicorn's own 414 and 431 came as HTML pages
    for url in (services.store, services.retry):
        long_line = requests.get(f"{url}/v1/topics/{'x' * 9_000}", timeout=10)
        assert_json_error(long_line, 414, "URI_TOO_LONG")
        many = {f"X-Field-{i}": "v" for i in range(150)}
        assert_json_error(requests.get(f"{url}/healthz", headers=many, timeout=10), 431,
                          "REQUEST_HEADER_FIELDS_TOO_LARGE")
        huge = {"X-Huge": "v" * 20_000}
        assert_json_error(requests.get(f"{url}/healthz", headers=huge, timeout=10), 431,
                          "REQUEST_HEADER_FIELDS_TOO_LARGE")
    assert_up(services)


def test_the_same_bad_request_gets_the_same_answer_from_every_service(
        services: Services) -> None:
    # one error table (docs/contracts.md): the retry service had no body limit and other codes
    def answers(url: str, post_path: str) -> list[tuple[int, str]]:
        calls = [
            requests.get(f"{url}/nope", timeout=10),
            requests.delete(f"{url}/healthz", timeout=10),
            requests.post(url + post_path, data=b"{nope", timeout=10,
                          headers={"Content-Type": "application/json"}),
            requests.post(url + post_path, data=b"[" * 10 + b"1" * (LIMIT_BYTES + 10),
                          timeout=30, headers={"Content-Type": "application/json"}),
        ]
        for resp in calls:
            assert resp.headers["Content-Type"].startswith("application/json"), resp.text
        return [(r.status_code, r.json()["error"]) for r in calls]

    store = answers(services.store, f"/v1/topics/{TOPIC}/messages")
    retry = answers(services.retry, f"/v1/groups/{GROUP}/send-back")
    assert store == retry == [(404, "NOT_FOUND"), (405, "METHOD_NOT_ALLOWED"),
                              (400, "INVALID_JSON"), (413, "BODY_TOO_LARGE")]
    too_big = requests.post(f"{services.retry}/v1/groups/{GROUP}/send-back",
                            data=b"x" * (LIMIT_BYTES + 1), timeout=30).json()
    assert "CLEPSYDRA_RETRY_MAX_REQUEST_BYTES" in too_big["message"]
    assert_up(services)


def test_a_body_over_either_limit_is_413_body_too_large_everywhere(services: Services) -> None:
    # SPEC P1, DEC-too-large-413: a message body over the store's largest (the request under
    # its limit), a request over the store's limit, a request over the retry service's limit,
    # a send-back batch over it: one status, one code, nothing stored or sent back
    def parked() -> int:  # a send-back's copy is parked at a delay level (SPEC S1, R7)
        levels = requests.get(f"{services.store}/v1/schedule/levels", timeout=10).json()
        return sum(int(level["maxOffset"]) for level in levels["levels"])

    before, parked_before = stored_count(services), parked()
    calls = [
        requests.post(f"{services.store}/v1/topics/{TOPIC}/messages",
                      json={"body": "x" * (BODY_LIMIT_BYTES + 1)}, timeout=30),
        requests.post(f"{services.store}/v1/topics/{TOPIC}/messages/batch",
                      json={"messages": [{"body": "a"}, {"body": "x" * (BODY_LIMIT_BYTES + 1)}]},
                      timeout=30),
        requests.post(f"{services.store}/v1/topics/{TOPIC}/messages",
                      json={"body": "x" * (LIMIT_BYTES + 1)}, timeout=30),
        requests.post(f"{services.retry}/v1/groups/{GROUP}/send-back",
                      json={"commitLogOffset": 0, "reason": "x" * LIMIT_BYTES}, timeout=30),
        requests.post(f"{services.retry}/v1/groups/{GROUP}/send-back/batch",
                      json={"items": [{"commitLogOffset": 0, "reason": "x" * LIMIT_BYTES}]},
                      timeout=30),
    ]
    for resp in calls:
        assert_json_error(resp, 413, "BODY_TOO_LARGE")
        assert "SPEC P1" in resp.json()["message"], resp.text
    assert (stored_count(services), parked()) == (before, parked_before)
    assert_up(services)


def test_nothing_written_by_refused_requests_leaves_the_topic_usable(
        services: Services) -> None:
    resp = requests.post(f"{services.store}/v1/topics/{TOPIC}/messages",
                         json={"body": "after the storm"}, timeout=10)
    assert resp.status_code == 201
    page = requests.get(f"{services.store}/v1/topics/{TOPIC}/queues/0/messages",
                        params={"offset": "0", "max": "100"}, timeout=10).json()
    assert [m["body"] for m in page["messages"]][-1] == "after the storm"
