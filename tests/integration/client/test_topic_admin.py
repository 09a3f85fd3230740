"""Topics can be changed (SPEC A1): the admin client's update_topic / delete_topic and
`clepsydra topic update|delete` on a real stack, and push consumers rebalancing onto the new
queues through their ordinary heartbeat path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from clepsydra_core import naming
from clepsydra_core.errors import Forbidden, TopicNotFound, ValidationError
from tools.processes import wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import Cli, Consumers, Names, Recorders

pytestmark = pytest.mark.integration


def test_admin_update_grows_and_consumers_rebalance_onto_the_new_queues(
        admin: AdminClient, producer: Producer, consumers: Consumers, recorder: Recorders,
        names: Names) -> None:
    # SPEC A1: the quick start's one-queue topic becomes the tour's four-queue topic
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    seen = recorder()
    first = consumers(group, topic, seen)
    second = consumers(group, topic, seen)

    def owned() -> list[set[int]]:
        return [{q.queue_id for q in c.owned_queues() if q.topic == topic}
                for c in (first, second)]

    wait_until(lambda: sorted(map(len, owned())) == [0, 1], 10, what="one queue owned")
    assert [len(q.queues) for q in (admin.update_topic(topic, 4), admin.topic(topic))] == [4, 4]
    wait_until(lambda: sorted(map(len, owned())) == [2, 2], 10, what="two queues each")
    assert set().union(*owned()) == {0, 1, 2, 3}
    for n in range(8):
        producer.send(topic, f"m{n}")
    seen.wait_for(lambda ms: len(ms) >= 8, what="every message")
    assert sorted(seen.bodies()) == [f"m{n}" for n in range(8)]


def test_admin_refuses_shrinking_past_unconsumed_messages_and_system_topics(
        admin: AdminClient, producer: Producer, names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 2)
    producer.send(topic, "in queue 1", queue_id=1)
    with pytest.raises(ValidationError, match="SPEC A1") as exc:
        admin.update_topic(topic, 1)
    assert exc.value.code == "TOPIC_NOT_DRAINED"
    for system in (naming.SCHEDULE_TOPIC, naming.retry_topic("g"), naming.dlq_topic("g")):
        with pytest.raises(Forbidden, match="SPEC S3"):
            admin.delete_topic(system)
    admin.delete_topic(topic)
    with pytest.raises(TopicNotFound):
        admin.topic(topic)


def test_cli_topic_update_and_delete(cli: Cli, names: Names) -> None:
    topic = names("t")
    assert cli("topic", "create", topic, "--queues", "1").code == 0
    grown = cli("topic", "update", topic, "--queues", "4")
    assert grown.code == 0 and f"topic {topic} has 4 queues" in grown.out, grown.err
    assert len(cli("--json", "topics", "show", topic).json()["queues"]) == 4
    assert cli("topic", "update", topic).code == 2  # --queues is required

    unconfirmed = cli("topic", "delete", topic)
    assert unconfirmed.code == 2 and "--yes" in unconfirmed.err
    assert cli("topics", "show", topic).code == 0  # nothing deleted
    deleted = cli("topic", "delete", topic, "--yes")
    assert deleted.code == 0 and f"topic {topic} deleted" in deleted.out
    missing = cli("topic", "delete", topic, "--yes")
    assert missing.code == 1 and "TOPIC_NOT_EXIST" in missing.err

    system = cli("topic", "delete", naming.SCHEDULE_TOPIC, "--yes")
    assert system.code == 1 and "SPEC S3" in system.err and "Traceback" not in system.err
