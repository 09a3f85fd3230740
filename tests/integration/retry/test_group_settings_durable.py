"""Consumer-group settings are durable in the store; Redis is only their cache (SPEC R3,
R5). Own processes: this test restarts Redis and the store."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import requests

from clepsydra_core import naming
from clepsydra_retry.app import create_app
from clepsydra_retry.settings import RetrySettings
from tests.integration.retry.conftest import LEVELS_1S, enc, retry_service
from tools.parts import store_service
from tools.processes import RedisServer, wait_until

pytestmark = pytest.mark.integration


def test_group_settings_survive_redis_restarted_empty_and_a_store_restart(
        tmp_path: Path) -> None:
    # SPEC R3, R5: a Redis that comes back without its data (a new pod, a lost volume) does not
    # turn groups back to defaults or into 404s
    redis_server = RedisServer(tmp_path / "redis-1").start()
    store = store_service(tmp_path / "home", env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S}).start()
    retry = retry_service(tmp_path / "home", store_url=store.url, redis_url=redis_server.url)
    retry.start()
    http = requests.Session()
    try:
        put = http.put(f"{retry.url}/v1/groups/billing",
                       json={"retryQueueNums": 3, "retryMaxTimes": 2})
        assert put.status_code == 201, put.text
        want = {"group": "billing", "retryQueueNums": 3, "retryMaxTimes": 2}

        redis_server.stop()
        redis_server = RedisServer(tmp_path / "redis-2", port=redis_server.port).start()
        assert redis.Redis(port=redis_server.port).dbsize() == 0
        wait_until(lambda: http.get(f"{retry.url}/v1/groups/billing").status_code == 200, 15,
                   what="the retry service reconnected to Redis")
        assert http.get(f"{retry.url}/v1/groups/billing").json() == want
        assert http.get(f"{retry.url}/v1/groups").json() == {"groups": ["billing"]}

        # the settings are in force: the retry topic gets the group's three queues (R3)
        http.post(f"{store.url}/v1/topics", json={"name": "orders", "queues": 1})
        sent = http.post(f"{store.url}/v1/topics/orders/messages", json={"body": "x"}).json()
        back = http.post(f"{retry.url}/v1/groups/billing/send-back",
                         json={"msgId": sent["msgId"], "delayLevel": 1})
        assert back.status_code == 200 and back.json()["outcome"] == "RETRY", back.text
        retry_topic = http.get(f"{store.url}/v1/topics/{enc(naming.retry_topic('billing'))}")
        assert len(retry_topic.json()["queues"]) == 3

        store.stop()  # the store keeps them on its disk, beside the topics
        store = store_service(tmp_path / "home", port=store.port,
                              env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S}).start()
        redis.Redis(port=redis_server.port).flushall()
        assert http.get(f"{store.url}/v1/groups/billing/settings").json() == want
        assert http.get(f"{retry.url}/v1/groups/billing").json() == want
    finally:
        http.close()
        for process in (retry, store, redis_server):
            process.stop()


def test_groups_an_earlier_version_kept_in_redis_move_to_the_store(tmp_path: Path) -> None:
    # upgrading keeps the groups that lived only in Redis
    redis_server = RedisServer(tmp_path / "redis").start()
    store = store_service(tmp_path / "home", env={"CLEPSYDRA_DELAY_LEVELS": LEVELS_1S}).start()
    client = redis.Redis(port=redis_server.port, decode_responses=True)
    try:
        client.hset(naming.group_settings_key("old"),
                    mapping={"retryQueueNums": "2", "retryMaxTimes": "5"})
        client.sadd(naming.GROUPS_SET_KEY, "old")
        app = create_app(RetrySettings.for_test(store.url, redis_server.url))
        app.extensions["clepsydra_retry"].store.close()
        app.extensions["clepsydra_retry"].redis.close()
        got = requests.get(f"{store.url}/v1/groups/old/settings", timeout=10)
        assert got.json() == {"group": "old", "retryQueueNums": 2, "retryMaxTimes": 5}
        assert not client.exists(naming.GROUPS_SET_KEY)  # moved once
    finally:
        client.close()
        store.stop()
        redis_server.stop()
