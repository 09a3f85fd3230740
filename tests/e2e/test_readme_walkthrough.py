"""A newcomer's first hour, on a fresh stack started as `make run` starts
it (`python -m tools.stack`). The top README's quick start, then the client README's tour and the
commands after it, step by step, with the commands and the code taken from the READMEs' code
blocks (so the docs cannot drift from what runs), asserting what the READMEs say they show.

What differs from a reader's terminal, and why: the stack listens on free ports, so
`localhost:8081` / `localhost:8082` in the curl commands become the stack's store and retry
addresses, and the tour and the CLI get them through `CLEPSYDRA_STORE_URL` /
`CLEPSYDRA_RETRY_URL` (which the READMEs name); placeholders (`<msgId from the pull>`,
`<msgId>`) are filled with the ids the earlier steps printed; `source .venv/bin/activate` is
replaced by putting this test environment's `bin` (where `clepsydra` is installed) first on the
PATH. The analytics commands of the quick start are left to tests/e2e/test_analytics_e2e.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.markdown import REPO, code_blocks, section, shell_commands
from tests.fixtures.stack import RunningStack
from tools.processes import wait_until

pytestmark = pytest.mark.e2e

README = REPO / "README.md"
CLIENT_README = REPO / "libs" / "client" / "README.md"
DELIVERY_TIMEOUT_S = 60.0


class Shell:
    """Runs README commands as a reader would, in bash, against the test's stack."""

    def __init__(self, stack: RunningStack, cwd: Path) -> None:
        self.stack = stack
        self.cwd = cwd
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "CLEPSYDRA_STORE_URL": stack.store_url,
                    "CLEPSYDRA_RETRY_URL": stack.retry_url,
                    "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}

    def localize(self, command: str) -> str:
        store = self.stack.store_url.removeprefix("http://")
        retry = self.stack.retry_url.removeprefix("http://")
        return command.replace("localhost:8081", store).replace("localhost:8082", retry)

    def run(self, command: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", self.localize(command)], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)

    def json(self, command: str) -> Any:
        done = self.run(command)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise AssertionError(f"{command}\nanswered {done.stdout!r}") from exc


def block_with(blocks_of: Path | str, needle: str) -> str:
    """The first code block containing ``needle``."""
    for block in code_blocks(blocks_of):
        if needle in block.text:
            return block.text
    raise LookupError(f"no code block with {needle!r}")


def one(commands: list[str], needle: str) -> str:
    found = [c for c in commands if needle in c]
    assert len(found) == 1, f"{needle!r} in {found}"
    return found[0]


def test_readme_quick_start_then_the_client_tour(
        start_stack: Callable[..., RunningStack], tmp_path: Path) -> None:
    stack = start_stack()
    shell = Shell(stack, tmp_path)

    # ---- README.md "Quick start", the curl block ------------------------------------------
    quick = shell_commands(block_with(section(README, "Quick start"), "curl"))
    assert len(quick) == 9, quick

    created = shell.json(one(quick, '"name": "orders"'))
    assert created["name"] == "orders" and len(created["queues"]) == 1

    # "a message delayed by level 3 ... parked in SCHEDULE_TOPIC_XXXX queue 2 until due, and
    # the response says so"
    sent = shell.json(one(quick, '"delayLevel": 3'))
    assert (sent["topic"], sent["queueId"]) == ("SCHEDULE_TOPIC_XXXX", 2)

    # "pull: empty now, the message after 10 s (with DELIVER_TS and REAL_TOPIC ...)"
    pull = one(quick, "topics/orders/queues/0/messages")
    assert shell.json(pull)["messages"] == []
    pulled: list[dict[str, Any]] = []
    wait_until(lambda: pulled.extend(shell.json(pull)["messages"]) or bool(pulled),
               DELIVERY_TIMEOUT_S, interval_s=1.0, what="the delayed message in orders")
    [message] = pulled
    assert message["body"] == "charge order 42"
    assert {"DELIVER_TS", "REAL_TOPIC"} <= set(message["properties"])
    assert message["storeTimestamp"] >= sent["storeTimestamp"] + 10_000  # level 3, never early
    # "with the msgId the send answered; every copy of it"
    assert message["msgId"] == sent["msgId"] != message["offsetMsgId"]
    copies = shell.json(one(quick, "/v1/messages/<msgId>").replace("<msgId>", sent["msgId"]))
    assert [(c["topic"], c["msgId"]) for c in copies["messages"]] == [
        ("SCHEDULE_TOPIC_XXXX", sent["msgId"]), ("orders", sent["msgId"])]

    # "a consumer group commits its progress, and sends a message back for a retry"
    committed = shell.json(one(quick, "/v1/groups/billing/offsets"))
    assert committed["offset"] == 1
    assert shell.json(one(quick, "localhost:8082/v1/groups/billing -H"))["group"] == "billing"
    send_back = one(quick, "send-back").replace("<msgId from the pull>", message["msgId"])
    answer = shell.json(send_back)
    assert answer["outcome"] == "RETRY", answer

    # "it comes back in %RETRY%billing"
    retry_pull = one(quick, "%25RETRY%25billing")
    retried: list[dict[str, Any]] = []
    wait_until(lambda: retried.extend(shell.json(retry_pull)["messages"]) or bool(retried),
               DELIVERY_TIMEOUT_S, interval_s=0.5, what="the retry copy in %RETRY%billing")
    assert retried[0]["body"] == "charge order 42" and retried[0]["reconsumeTimes"] == 1
    assert shell.json(one(quick, "/dlq?"))["messages"] == []

    # ---- libs/client/README.md "The five-minute tour": tour.py ---------------------------
    tour = next(b.text for b in code_blocks(CLIENT_README) if b.preceded_by == "<!-- tour.py -->")
    (tmp_path / "tour.py").write_text(tour)
    started = time.monotonic()
    run = shell.run(f"{sys.executable} tour.py", timeout_s=240)
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert "sent 10 orders, due in 1 s" in out
    attempts = {int(n): int(a) for n, a in
                re.findall(r"charged order (\d+) on attempt (\d+) \(trace [0-9a-f]{32}\)", out)}
    assert attempts == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1, 6: 2, 8: 1, 9: 2, 10: 1}, out
    final = re.search(r"charged 9 orders; dead letter: (\S+) \((.*card declined.*)\)", out)
    assert final, out
    dead_id = final.group(1)
    assert time.monotonic() - started < 240
    # the tour gave the quick start's one-queue topic its four queues (SPEC A1)
    assert len(shell.json("curl -s localhost:8081/v1/topics/orders")["queues"]) == 4

    # ---- the commands after the tour -----------------------------------------------------
    after = shell_commands(block_with(CLIENT_README, "clepsydra dlq list billing"))
    assert after[0].startswith("source .venv/bin/activate")  # PATH set instead (see above)
    expectations = {
        "clepsydra dlq list billing": ["order-7", "card declined"],
        "clepsydra dlq show billing <msgId>": [dead_id, "card declined"],
        "clepsydra message show --key order-7": ["%RETRY%billing", "%DLQ%billing"],
        "clepsydra groups show billing": ["billing", "orders"],
        "clepsydra levels": ["1s", "2h"],
        "clepsydra dlq resend billing --key order-7": ["resent 1"],
    }
    ran = []
    for command in after[1:]:
        key = next(k for k in expectations if command.startswith(k))
        done = shell.run(command.replace("<msgId>", dead_id))
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        for text in expectations[key]:
            assert text in done.stdout, f"{command}: no {text!r} in\n{done.stdout}"
        ran.append(key)
    assert ran == list(expectations)
