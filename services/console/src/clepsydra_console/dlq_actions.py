"""The DLQ workspace's actions (SPEC R16): resend (to the group's retry topic or to the origin
topic) or purge the dead letters a person selected, and say what happened to **each** one
(DEC-console-per-message-outcome).

The retry service answers a resend or purge of msgIds all or nothing (404 ``NOT_IN_DLQ``,
nothing changed, when one is gone). So the console sends them in chunks; a chunk that succeeds
is each of its messages' outcome, and a chunk that fails is sent again one message at a time,
so every message gets its own outcome and a failure never hides behind a count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clepsydra_client.admin import AdminClient
from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.dlq import DlqFilter, DlqPurge, DlqResend, PurgeResult, ResendResult

CHUNK = 100
"""msgIds per resend or purge call."""
ACTION_MAX = 1000
"""The most dead letters one action of the console selects ("all that match" beyond it: the
first ACTION_MAX, and the page says so)."""
RESEND_RETRY, RESEND_ORIGIN, PURGE = "resend-retry", "resend-origin", "purge"
ACTIONS = {RESEND_RETRY: "resend to the group's retry topic",
           RESEND_ORIGIN: "resend to the original topic", PURGE: "purge"}


@dataclass(frozen=True, slots=True)
class Outcome:
    msg_id: str
    ok: bool
    text: str


@dataclass(frozen=True, slots=True)
class Selection:
    msg_ids: list[str]
    more: bool
    """True when more dead letters matched than ACTION_MAX."""
    error: str | None = None


def select_matching(admin: AdminClient, group: str, flt: DlqFilter) -> Selection:
    """The msgIds of the dead letters the filter matches (all of them with an empty one), at
    most ACTION_MAX."""
    ids: list[str] = []
    try:
        for m in admin.dlq_messages(group, flt if not flt.is_empty() else None,
                                    page_size=200, limit=ACTION_MAX + 1):
            if m.msg_id not in ids:
                ids.append(m.msg_id)
    except ClepsydraError as exc:
        return Selection(ids[:ACTION_MAX], False, exc.message)
    return Selection(ids[:ACTION_MAX], len(ids) > ACTION_MAX)


def _call(admin: AdminClient, group: str, action: str, msg_ids: list[str],
          client_id: str) -> str:
    """One resend or purge of ``msg_ids``; its text (raises the service's error)."""
    headers = {"X-Client-Id": client_id}
    retry = admin.retry
    if action == PURGE:
        raw = retry.post(retry.path("/v1/groups/{}/dlq/purge", group),
                         DlqPurge(msg_ids=msg_ids).to_json(), headers=headers)
        return f"purged ({read_answer(PurgeResult, raw).purged} copy/copies)"
    body = DlqResend(msg_ids=msg_ids, target="origin" if action == RESEND_ORIGIN else None)
    raw = retry.post(retry.path("/v1/groups/{}/dlq/resend", group), body.to_json(),
                     headers=headers)
    result = read_answer(ResendResult, raw)
    return f"resent to {'the original topic' if result.target == 'origin' else 'retry topic'}"


def act(admin: AdminClient, group: str, action: str, msg_ids: list[str], client_id: str,
        call: Callable[[AdminClient, str, str, list[str], str], str] = _call) -> list[Outcome]:
    """Every message's outcome of ``action`` on ``msg_ids``, in their order."""
    out: list[Outcome] = []
    for start in range(0, len(msg_ids), CHUNK):
        chunk = msg_ids[start:start + CHUNK]
        try:
            text = call(admin, group, action, chunk, client_id)
            out.extend(Outcome(m, True, text) for m in chunk)
            continue
        except ClepsydraError as exc:
            if len(chunk) == 1:
                out.append(Outcome(chunk[0], False, _why(exc)))
                continue
        for msg_id in chunk:  # one by one: each its own outcome
            try:
                out.append(Outcome(msg_id, True, call(admin, group, action, [msg_id],
                                                      client_id)))
            except ClepsydraError as exc:
                out.append(Outcome(msg_id, False, _why(exc)))
    return out


def _why(exc: ClepsydraError) -> str:
    return f"failed: {exc.message}" + (f" [{exc.code}]" if exc.code else "")
