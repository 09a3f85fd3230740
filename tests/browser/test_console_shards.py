"""The console over two store shards in Debian's headless Chromium (DEC-console-shards): the
front page shows the shards table with each shard's address and pending delayed messages and
their total, ``/timers`` a line per shard; a screenshot of each, no error in the browser's
console."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.browser.conftest import LEVELS, Browser, browser_for
from tools.parts import Stack

pytestmark = pytest.mark.browser

SHARDS = 2
TOPIC = "orders"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, two store shards and the console (given shard 0's address only)."""
    home = tmp_path_factory.mktemp("console-shards")
    parts = (Stack(home, env={"CLEPSYDRA_DELAY_LEVELS": LEVELS}).with_redis()
             .with_store(shards=SHARDS).with_console(CLEPSYDRA_CONSOLE_COOKIE_SECURE="false"))
    with parts.start() as s:
        yield s


@pytest.fixture
def browser(stack: Stack, chromium_driver: Any, request: pytest.FixtureRequest) -> Browser:
    return browser_for(chromium_driver, stack.console.url, request)


def test_the_front_page_shows_the_shards_table(stack: Stack, browser: Browser) -> None:  # T1
    http = requests.Session()
    urls = stack.shard_urls
    assert len(urls) == SHARDS
    http.post(urls[0] + "/v1/topics", json={"name": TOPIC, "queues": 1},
              timeout=15).raise_for_status()
    later = int(time.time() * 1000) + 3 * 3_600_000
    for shard in range(SHARDS):  # shard s: s + 1 timers pending
        for _ in range(shard + 1):
            http.post(urls[shard] + f"/v1/topics/{TOPIC}/messages",
                      json={"body": "x", "deliverAt": later}, timeout=15).raise_for_status()
    browser.visit("/")
    rows = browser.find_all("#shards tbody tr")
    assert [r.get_attribute("data-shard") for r in rows] == ["0", "1"]
    assert [r.get_attribute("data-state") for r in rows] == ["up", "up"]
    assert [r.get_attribute("data-pending") for r in rows] == ["1", "2"]
    assert browser.find("#shards-total").get_attribute("data-pending") == "3"
    text = browser.text()
    assert all(url in text for url in urls)
    assert not browser.find_all("#shards-partial")
    browser.shot("shards")
    browser.visit("/timers")
    lines = browser.find_all("#timers-by-shard tbody tr")
    assert [r.get_attribute("data-timers") for r in lines] == ["1", "2"]
    assert browser.find("#timers-pending").text == "3"
    browser.shot("timers-by-shard")
