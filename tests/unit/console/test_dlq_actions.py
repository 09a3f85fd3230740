"""Every message's outcome of a DLQ action (clepsydra_console.dlq_actions, SPEC R16,
DEC-console-per-message-outcome): a chunk that succeeds is each message's outcome; a chunk the
retry service refuses (all or nothing) is retried one message at a time, so a failure names
its message. The retry service is a recording fake here (its HTTP is tested in the browser
suite)."""

from __future__ import annotations

from typing import Any

from clepsydra_console import dlq_actions
from clepsydra_core.errors import NotFound


class NotInDlq(NotFound):
    code = "NOT_IN_DLQ"  # as the retry service answers it


def test_each_message_gets_its_own_outcome() -> None:
    calls: list[list[str]] = []
    gone = {"m3"}

    def call(_admin: Any, group: str, action: str, ids: list[str], client: str) -> str:
        assert group == "g" and client == "console:ann"
        calls.append(list(ids))
        missing = gone.intersection(ids)
        if missing:
            raise NotInDlq(f"{sorted(missing)[0]} is not in the DLQ")
        return f"{action} ok"

    ids = [f"m{i}" for i in range(1, 5)]
    out = dlq_actions.act(None, "g", dlq_actions.PURGE, ids, "console:ann", call=call)  # type: ignore[arg-type]
    assert [(o.msg_id, o.ok) for o in out] == [("m1", True), ("m2", True), ("m3", False),
                                               ("m4", True)]
    assert "NOT_IN_DLQ" in out[2].text and out[0].text == "purge ok"
    assert calls == [ids, ["m1"], ["m2"], ["m3"], ["m4"]]


def test_chunks_bound_each_call() -> None:
    sizes: list[int] = []

    def call(_admin: Any, _g: str, _a: str, ids: list[str], _c: str) -> str:
        sizes.append(len(ids))
        return "ok"

    ids = [f"m{i}" for i in range(dlq_actions.CHUNK * 2 + 5)]
    out = dlq_actions.act(None, "g", dlq_actions.RESEND_RETRY, ids, "c", call=call)  # type: ignore[arg-type]
    assert sizes == [dlq_actions.CHUNK, dlq_actions.CHUNK, 5] and all(o.ok for o in out)
