"""Every `clepsydra` command on a real stack (in-process main() with captured output), plus
the console script itself once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from clepsydra_client.consumer.listener import ConsumeResult
from clepsydra_client.producer import OutgoingMessage
from clepsydra_core import naming
from clepsydra_core import properties as P
from tools.processes import wait_until

if TYPE_CHECKING:
    from clepsydra_client.admin import AdminClient
    from clepsydra_client.message import Message
    from clepsydra_client.producer import Producer
    from tests.integration.client.conftest import (
        Cli,
        ClientStack,
        Consumers,
        Names,
        Recorders,
    )

pytestmark = pytest.mark.integration


def test_topics_create_list_show(cli: Cli, names: Names) -> None:
    topic = names("t")
    created = cli("topics", "create", topic, "--queues", "3")
    assert created.code == 0 and f"topic {topic} has 3 queues" in created.out
    listed = cli("topics", "list")
    assert listed.code == 0 and topic in listed.out and "QUEUES" in listed.out
    assert topic in [t["name"] for t in cli("--json", "topics", "list").json()]
    shown = cli("topics", "show", topic)
    assert shown.code == 0 and "MIN OFFSET" in shown.out
    assert [q["queueId"] for q in cli("--json", "topics", "show", topic).json()["queues"]] == [
        0, 1, 2]
    again = cli("topics", "create", topic, "--queues", "5")
    assert again.code == 1 and "TOPIC_CONFLICT" in again.err and "Traceback" not in again.err


def test_send_and_consume_tail(cli: Cli, admin: AdminClient, names: Names, tmp_path: Path) -> None:
    topic = names("t")
    admin.create_topic(topic, 2)
    one = cli("--json", "send", topic, "hello", "--tags", "a", "--keys", "k1", "k2",
              "--prop", "tenant=acme")
    assert one.code == 0 and one.json()["msgId"]
    many = cli("send", topic, "n{n}", "--count", "4", "--tags", "b")
    assert many.code == 0 and "sent 4 messages" in many.out
    lines = tmp_path / "lines.txt"
    lines.write_text("from-file-1\nfrom-file-2\n\n")
    assert cli("send", topic, "--file", str(lines)).code == 0
    delayed = cli("send", topic, "later", "--delay-level", "1")
    assert delayed.code == 0 and "SCHEDULE_TOPIC_XXXX" in delayed.out
    tail = cli("consume", topic, "--from-beginning", "--count", "8", "--idle-exit", "10")
    assert tail.code == 0, tail.err
    bodies = [line.rsplit("  ", 1)[-1] for line in tail.out.splitlines()]
    assert sorted(bodies) == sorted(["hello", "n0", "n1", "n2", "n3", "from-file-1",
                                     "from-file-2", "later"])
    tagged = cli("--json", "consume", topic, "--from-beginning", "--tags", "a",
                 "--idle-exit", "0.5")
    assert tagged.code == 0
    assert [m["body"] for m in map(_json, tagged.out.splitlines())] == ["hello"]
    bad = cli("send", topic, "x", "--delay-level", "-1")
    assert bad.code == 1 and "delay level" in bad.err


def test_message_show_by_id_key_and_its_retries(
        cli: Cli, admin: AdminClient, producer: Producer, consumers: Consumers,
        recorder: Recorders, names: Names,
) -> None:
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group, retry_max_times=1)
    rec = recorder(lambda m, ctx: ConsumeResult.RECONSUME_LATER)
    consumers(group, topic, rec)
    sent = producer.send(topic, "order-body", keys=["order-42"])
    wait_until(lambda: len(list(admin.dlq_messages(group))) == 1, 30, 0.1, what="dead letter")
    by_id = cli("message", "show", sent.msg_id)
    assert by_id.code == 0
    assert sent.msg_id in by_id.out and "trace id" in by_id.out and "order-body" in by_id.out
    data = cli("--json", "message", "show", sent.msg_id).json()
    assert data["traceId"] and data["keys"] == "order-42"
    life = cli("message", "show", "--key", "order-42", "--topic", topic, "--group", group)
    assert life.code == 0
    assert naming.retry_topic(group) in life.out and naming.dlq_topic(group) in life.out
    assert "attempts (latest copy)" in life.out and "RECONSUME_LATER" in life.out
    life_json = cli("--json", "message", "show", "--key", "order-42", "--topic", topic,
                    "--group", group).json()[0]
    assert [a["reconsumeTimes"] for a in life_json["attempts"]] == [0, 1]
    missing = cli("message", "show", "7F0000010000000000000000FFFFFFFF")
    assert missing.code == 1 and "what to do" in missing.err and "Traceback" not in missing.err
    # DEC-message-history: the timeline as a table and as the store's JSON
    hist = cli("message", "history", sent.msg_id)
    assert hist.code == 0, hist.err
    for label in ("stored", "sent back", "retry copy", "dead letter"):
        assert label in hist.out, label
    assert hist.out.rstrip().endswith(f"{group}  dead")
    hops = cli("--json", "message", "history", sent.msg_id).json()["hops"]
    assert [h["kind"] for h in hops] == ["produced", "stored", "sent_back", "retry",
                                         "dead_letter"]
    assert hops[-1]["reason"] == "max_reconsume_times" and hops[2]["attempt"] == 1
    gone = cli("message", "history", "7F0000010000000000000000FFFFFFFF")
    assert gone.code == 1 and "Traceback" not in gone.err


def test_groups_commands(
        cli: Cli, admin: AdminClient, producer: Producer, consumers: Consumers, names: Names,
) -> None:
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 4)
    settings = cli("groups", "settings", group, "--retry-queues", "2", "--max-retries", "5")
    assert settings.code == 0 and "retryMaxTimes" in settings.out
    assert cli("--json", "groups", "settings", group).json()["retryMaxTimes"] == 5
    assert group in cli("--json", "groups", "list").json()
    c = consumers(group, topic, lambda ms, ctx: None)
    producer.send_batch(topic, [_msg(f"m{i}") for i in range(8)])
    wait_until(lambda: sum(admin.offsets(group, topic).values()) == 8, 20,
               what="progress committed")
    listed = cli("groups", "consumers", group)
    assert listed.code == 0 and c.client_id in listed.out and f"{topic} [*]" in listed.out
    progress = cli("--json", "groups", "progress", group).json()
    mine = [r for r in progress if r["topic"] == topic]
    assert len(mine) == 4 and all(r["owner"] == c.client_id and r["lag"] == 0 for r in mine)
    shown = cli("groups", "show", group)
    assert shown.code == 0
    for part in ("settings", "consumers", "queue ownership and progress", "total lag 0"):
        assert part in shown.out


def test_dlq_commands(cli: Cli, admin: AdminClient, producer: Producer, consumers: Consumers,
                      recorder: Recorders, names: Names) -> None:
    topic, group = names("t"), names("g")
    admin.create_topic(topic, 1)
    admin.set_group_settings(group)

    rejected: set[str] = set()

    def decide(m: Message, ctx: Any) -> ConsumeResult:
        if m.text not in rejected:  # only the first delivery fails, straight to the DLQ
            rejected.add(m.text)
            ctx.delay_level_when_next_consume = -1
            raise ValueError(f"rejected {m.text}")
        return ConsumeResult.SUCCESS

    rec = recorder(decide)
    consumers(group, topic, rec)
    bystander = recorder()  # another group on the same topic, consuming everything fine
    consumers(names("other"), topic, bystander)
    producer.send_batch(topic, [_msg(b, keys=[f"key-{b}"]) for b in ("bad1", "bad2", "bad3")])
    wait_until(lambda: len(list(admin.dlq_messages(group))) == 3, 30, 0.1, what="3 dead")
    bystander.wait_for(lambda seen: len(seen) == 3, what="the other group's three")
    listed = cli("dlq", "list", group)
    assert listed.code == 0 and "ValueError: rejected bad1" in listed.out
    dead = {m["body"]: m["msgId"] for m in cli("--json", "dlq", "list", group).json()}
    assert sorted(dead) == ["bad1", "bad2", "bad3"]
    ids = [dead["bad1"]]
    assert len(cli("--json", "dlq", "list", group, "--key", "key-bad2").json()) == 1
    shown = cli("dlq", "show", group, ids[0])
    assert shown.code == 0 and "level_negative" in shown.out and "attempts" in shown.out
    one = cli("dlq", "resend", group, ids[0])
    assert one.code == 0 and "resent 1 messages" in one.out
    rec.wait_for(lambda seen: [m.text for m in seen].count("bad1") == 2, what="bad1 resent")
    # the resend reached this group alone (through its retry topic), counted from
    # 0 again, with the resend in its history; the topic itself got nothing new
    again = [m for m in rec.seen if m.text == "bad1"][-1]
    assert again.is_retry and again.topic == topic and again.reconsume_times == 0
    assert [e["target"] for e in json.loads(again.properties[P.RESEND_HISTORY])] == ["retry"]
    assert admin.topic(topic).queues[0].max_offset == 3
    assert sorted(bystander.bodies()) == ["bad1", "bad2", "bad3"]
    assert len(cli("--json", "dlq", "list", group).json()) == 2
    no_confirm = cli("dlq", "purge", group, "--key", "key-bad2")
    assert no_confirm.code == 1 and "--yes" in no_confirm.err
    no_selection = cli("dlq", "purge", group, "--yes")
    assert no_selection.code == 2 and "--all" in no_selection.err
    purged = cli("dlq", "purge", group, "--key", "key-bad2", "--yes")
    assert purged.code == 0 and "purged 1" in purged.out
    rest = cli("--json", "dlq", "resend", group, "--all").json()
    assert rest["resent"] == 1
    audit = cli("dlq", "audit", group)
    assert audit.code == 0 and "resend" in audit.out and "purge" in audit.out
    assert len(cli("--json", "dlq", "audit", group).json()) == 3
    assert cli("dlq", "list", group).out.startswith("(no dead letter")


def test_levels_shows_the_table_with_backlog(cli: Cli, admin: AdminClient, producer: Producer,
                                             names: Names) -> None:
    topic = names("t")
    admin.create_topic(topic, 1)
    producer.send(topic, "wait", delay_level=18)
    table = cli("levels")
    assert table.code == 0
    assert table.out.splitlines()[0].split() == ["LEVEL", "DELAY", "QUEUE", "BACKLOG",
                                                 "DELIVERED", "STORED", "NEXT", "DUE", "LAG"]
    rows = cli("--json", "levels").json()
    assert [r["level"] for r in rows] == list(range(1, 19))
    assert all(r["delayMs"] == 1000 for r in rows)
    assert all(r["backlog"] >= 0 and r["lagMs"] >= 0 for r in rows)
    time.sleep(0.1)


def test_console_script_runs_and_reports_errors_without_traceback(stack: ClientStack,
                                                                  names: Names) -> None:
    exe = Path(sys.executable).parent / "clepsydra"
    env = {**os.environ, "CLEPSYDRA_STORE_URL": stack.store.url,
           "CLEPSYDRA_RETRY_URL": stack.retry.url}
    ok = subprocess.run([str(exe), "topics", "list"], env=env, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and "TOPIC" in ok.stdout
    bad = subprocess.run([str(exe), "topics", "show", names("missing")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "TOPIC_NOT_EXIST" in bad.stderr
    assert "clepsydra topics create" in bad.stderr and "Traceback" not in bad.stderr


def _json(line: str) -> Any:
    import json

    return json.loads(line)


def _msg(body: str, **kw: Any) -> OutgoingMessage:
    return OutgoingMessage(body, **kw)


def test_readme_tour_runs_as_written(stack: ClientStack, cli: Cli, tmp_path: Path) -> None:
    # the five-minute tour of libs/client/README.md, run as a user would
    readme = (Path(__file__).resolve().parents[3] / "libs" / "client" / "README.md").read_text()
    code = readme.split("<!-- tour.py -->\n```python\n", 1)[1].split("\n```", 1)[0]
    script = tmp_path / "tour.py"
    script.write_text(code)
    env = {**os.environ, "CLEPSYDRA_STORE_URL": stack.store.url,
           "CLEPSYDRA_RETRY_URL": stack.retry.url}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "charged 9 orders; dead letter:" in run.stdout and "card declined" in run.stdout
    assert "charged order 3 on attempt 2" in run.stdout
    dead = cli("dlq", "list", "billing", "--key", "order-7")
    assert dead.code == 0 and "ValueError: card declined" in dead.out
    life = cli("message", "show", "--key", "order-7", "--topic", "orders", "--group", "billing")
    assert life.code == 0 and "%DLQ%billing" in life.out
