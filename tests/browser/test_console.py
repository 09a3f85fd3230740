"""The console in Debian's headless Chromium over a real stack (DEC-console-server-rendered).

- A delayed message that fails twice (a send-back, then its retry copy is sent back again with
  retryMaxTimes 1, so it is dead-lettered: SPEC R6), is listed on the DLQ page, resent from it
  (a confirmation that says how many, then each message's outcome: R16) and consumed at last
  shows on ``/messages/<msgId>`` as its hops in order with their times; the search box finds it
  by msgId and by key.
- A pending ``deliverAt`` message shows on ``/timers`` in its hour and is cancelled from its
  page (T1).
- Every page: a screenshot, and no error in the browser's console.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clepsydra_core import naming
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.history import MessageHistory
from clepsydra_core.wire.messages import PullAnswer
from tests.browser.conftest import Browser, browser_for, stack_with_console
from tools.parts import Stack
from tools.processes import wait_until

pytestmark = pytest.mark.browser

TOPIC = "orders"
GROUP = "billing"
KEY = "order-42"
DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "console-timeline.png"
"""The README's picture of the timeline page, written by this test when
CLEPSYDRA_WRITE_DOCS_SCREENSHOT=1."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("console")
    with stack_with_console(home, CLEPSYDRA_CONSOLE_COOKIE_SECURE="false").start() as s:
        yield s


@pytest.fixture
def browser(stack: Stack, chromium_driver: Any, request: pytest.FixtureRequest) -> Browser:
    return browser_for(chromium_driver, stack.console.url, request)


def _pull_one(store: HttpClient, topic: str, offset: int) -> dict[str, Any]:
    """The message at ``offset`` of queue 0 of ``topic``, once it is there."""
    found: list[dict[str, Any]] = []

    def arrived() -> bool:
        page = PullAnswer.from_json(store.get(
            store.path("/v1/topics/{}/queues/0/messages", topic), {"offset": offset, "max": 1}))
        found[:] = [m.to_json() for m in page.messages]
        return bool(found)

    wait_until(arrived, 30, what=f"a message at {topic} offset {offset}")
    return found[0]


def _fail(retry: HttpClient, store: HttpClient, m: dict[str, Any], reason: str) -> None:
    """A consumer of GROUP fails ``m``: a send-back (SPEC R1), then its progress commit (C4)."""
    retry.post(retry.path("/v1/groups/{}/send-back", GROUP), {
        "msgId": m["offsetMsgId"], "delayLevel": 0, "reason": reason,
        "consumerId": "browser-test-consumer"})
    store.put(store.path("/v1/groups/{}/offsets", GROUP), {
        "topic": m["topic"], "queueId": 0, "offset": m["queueOffset"] + 1})


def _history(store: HttpClient, msg_id: str) -> MessageHistory:
    return MessageHistory.from_json(store.get(store.path("/v1/messages/{}/history", msg_id)))


def test_a_message_that_died_and_came_back(stack: Stack, browser: Browser) -> None:
    store = HttpClient(stack.store.url, service="store")
    retry = HttpClient(stack.retry.url, service="retry service")
    store.post("/v1/topics", {"name": TOPIC, "queues": 1})
    retry.put(retry.path("/v1/groups/{}", GROUP), {"retryQueueNums": 1, "retryMaxTimes": 1})
    sent = store.post(store.path("/v1/topics/{}/messages", TOPIC),
                      {"body": "<script>alert('x')</script> order 42", "keys": KEY,
                       "delayLevel": 2})
    msg_id = sent["msgId"]
    delivered = _pull_one(store, TOPIC, 0)  # SPEC D4: handed over by the scheduler
    _fail(retry, store, delivered, "payment service down")
    retry_copy = _pull_one(store, naming.retry_topic(GROUP), 0)  # R7: back after its level
    _fail(retry, store, retry_copy, "payment service still down")  # R6: dead-lettered
    wait_until(lambda: _history(store, msg_id).groups[0].state == "dead", 30,
               what="the dead letter")

    # the DLQ page lists it before the resend (R16)
    browser.visit(f"/dlq/{GROUP}")
    row = browser.find(f'tr[data-msg-id="{msg_id}"]')
    assert "max_reconsume_times" in row.text
    browser.shot("dlq-before-resend")
    browser.find(f'tr[data-msg-id="{msg_id}"] input.pick').click()
    browser.click("#action-resend-retry", then="#confirm-count")
    assert "1 dead letter" in browser.find("#confirm-count").text  # says how many
    browser.shot("dlq-confirm")
    browser.click("#confirm", then="#outcomes")
    outcome = browser.find(f'#outcomes tr[data-msg-id="{msg_id}"]')
    assert outcome.get_attribute("data-ok") == "yes" and "resent" in outcome.text
    assert "1 done, 0 failed, of 1" in browser.find("#summary").text
    browser.shot("dlq-resend-outcomes")
    browser.visit(f"/dlq/{GROUP}/audit")
    assert "console:" in browser.text() and "resend" in browser.text()
    browser.shot("dlq-audit")

    resent = _pull_one(store, naming.retry_topic(GROUP), 1)  # consumed at last
    store.put(store.path("/v1/groups/{}/offsets", GROUP), {
        "topic": resent["topic"], "queueId": 0, "offset": resent["queueOffset"] + 1})

    # found from the search box by msgId, then by key
    for query in (msg_id, KEY):
        browser.visit("/")
        box = browser.find("#q")
        box.clear()
        box.send_keys(query)
        browser.click("#search", then="#msg-id")
        assert browser.find("#msg-id").text == msg_id, query
    browser.visit("/")
    browser.shot("home")
    browser.visit(f"/messages/{msg_id}")
    hops = browser.find_all("#timeline li.hop")
    kinds = [h.get_attribute("data-kind") for h in hops]
    assert kinds, browser.text()
    assert kinds == ["produced", "parked", "handed_over", "sent_back", "retry", "dead_letter",
                     "resent"], kinds
    times = [int(h.get_attribute("data-time")) for h in hops]
    assert times[1:] == sorted(times[1:]) and all(t > 0 for t in times)
    assert all(h.find_element("css selector", ".when").text.startswith("20") for h in hops)
    state = browser.find(f'#group-states tr[data-group="{GROUP}"]')
    assert state.get_attribute("data-state") == "consumed"
    body = browser.find("#body")
    assert body.text.startswith("<script>")  # shown escaped, never run
    shot = browser.shot("timeline")
    if os.environ.get("CLEPSYDRA_WRITE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOCS_SHOT)


def test_a_pending_timer_on_timers_then_cancelled(stack: Stack, browser: Browser) -> None:
    store = HttpClient(stack.store.url, service="store")
    store.request("PUT", store.path("/v1/topics/{}", "reminders"), json={"queues": 1})
    at = int(time.time() * 1000) + 2 * 3_600_000 + 600_000  # SPEC T1
    sent = store.post(store.path("/v1/topics/{}/messages", "reminders"),
                      {"body": "call back", "keys": "r-1", "deliverAt": at})
    browser.visit("/timers")
    hour = (at - int(time.time() * 1000)) // 3_600_000
    row = browser.find(f'#by-hour tr[data-hour="{hour}"]')
    assert int(row.get_attribute("data-count")) >= 1
    browser.find("svg.chart")  # the chart, drawn on the server
    browser.shot("timers")
    browser.visit(f"/messages/{sent['msgId']}")
    assert browser.find_all("#timeline li.hop")[-1].get_attribute("data-kind") == "parked"
    browser.shot("timer-message")
    browser.click("#cancel", then="#outcomes")
    assert browser.find("#outcomes tbody tr").get_attribute("data-ok") == "yes"
    browser.visit(f"/messages/{sent['msgId']}")
    kinds = [h.get_attribute("data-kind") for h in browser.find_all("#timeline li.hop")]
    assert kinds == ["produced", "parked", "cancelled"]
    assert not browser.find_all("#cancel")  # nothing left to cancel
    browser.shot("timer-cancelled")


def test_the_other_pages_render(stack: Stack, browser: Browser) -> None:
    for path, name in (("/groups", "groups"), (f"/groups/{GROUP}", "group"),
                       ("/topics", "topics"), (f"/topics/{TOPIC}", "topic"), ("/dlq", "dlq")):
        browser.visit(path)
        assert "The look-up failed" not in browser.text(), path
        browser.shot(name)
    browser.visit("/?q=no-such-key-anywhere")
    assert browser.find('[data-state="nothing"]').text == "Nothing found."
    browser.shot("nothing-found")
