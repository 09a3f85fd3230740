"""What a DLQ request selects: a filter over dead letters, and the resend/purge action body.
Pure parsing and matching (no I/O); every malformed input is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import INT64_MAX
from clepsydra_core.wire.dlq import TARGETS, AuditWhat, DlqFilter, DlqPurge, DlqResend
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry import policy
from clepsydra_web.jsonio import parse_int


def _bad(message: str) -> ValidationError:
    return ValidationError(message, rule="R16", code="INVALID_REQUEST")


def _opt_int(raw: Mapping[str, Any], name: str, *, from_text: bool) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if from_text and isinstance(value, str):
        parsed = parse_int(value)
        if parsed is None:
            raise _bad(f"{name} must be a whole number (epoch ms, ASCII digits), got {value!r}")
        value = parsed
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise _bad(f"{name} must be a whole number in 0..{INT64_MAX} (epoch ms), got {value!r}")
    return value


def _opt_text(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string, got {value!r}")
    return value


def parse_query(raw: Mapping[str, str | None]) -> DlqFilter:
    """The filter of a listing's or a ``DELETE``'s query parameters (empty ones absent)."""
    return DlqFilter(topic=_opt_text(raw, "topic"), key=_opt_text(raw, "key"),
                     reason=_opt_text(raw, "reason"),
                     from_ms=_opt_int(raw, "fromMs", from_text=True),
                     to_ms=_opt_int(raw, "toMs", from_text=True))


def matches(flt: DlqFilter, message: StoredMessage) -> bool:
    """Whether the dead letter (the store's message view) is one ``flt`` selects."""
    props = message.properties
    if flt.topic is not None and props.get(P.RETRY_TOPIC) != flt.topic:
        return False
    if flt.key is not None and flt.key not in props.get(P.KEYS, "").split() \
            and props.get(P.UNIQ_KEY) != flt.key:
        return False
    stored_ms = message.store_timestamp
    if flt.from_ms is not None and stored_ms < flt.from_ms:
        return False
    if flt.to_ms is not None and stored_ms >= flt.to_ms:
        return False
    return flt.reason is None or _reason_matches(flt.reason, props)


def _reason_matches(reason: str, props: Mapping[str, str]) -> bool:
    needle = reason.lower()
    if needle in props.get(P.DLQ_REASON, "").lower():
        return True
    for entry in policy.parse_history(props.get(P.FAILURE_HISTORY)):
        text = entry.get("reason") if isinstance(entry, dict) else entry
        if isinstance(text, str) and needle in text.lower():
            return True
    return False


@dataclass(frozen=True, slots=True)
class DlqAction:
    """A resend or purge: exactly one of ``msg_ids``, ``all`` or ``filter``."""

    msg_ids: tuple[str, ...] | None = None
    all: bool = False
    filter: DlqFilter | None = None
    target: str = "retry"
    """Resend only: "retry" (the group's retry topic: the group alone receives it again; the
    default) or "origin" (the original topic: every group subscribed to it); empty for a
    purge."""
    delay_level: int = 0
    max_per_second: float | None = None

    def describe(self, max_ids: int) -> AuditWhat:
        """For the audit record."""
        return AuditWhat(
            msg_ids=None if self.msg_ids is None else list(self.msg_ids[:max_ids]),
            msg_id_count=None if self.msg_ids is None else len(self.msg_ids),
            filter=self.filter if self.msg_ids is None else None,
            all=True if self.msg_ids is None and self.filter is None else None,
            target=self.target or None,
            delay_level=self.delay_level if self.target == "retry" else None,
            max_per_second=self.max_per_second or None)


def parse_action(body: object, *, resend: bool, max_level: int) -> DlqAction:
    """A resend body (:class:`DlqResend`) or a purge body (:class:`DlqPurge`), read with its
    wire type (unknown fields refused, the error naming the field); a resend's delayLevel at
    most this service's ``max_level``."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _bad("body must be a JSON object")
    if not resend:
        purge = DlqPurge.from_json(body, what="purge", strict=True)
        return DlqAction(msg_ids=_unique(purge.msg_ids), all=bool(purge.all),
                         filter=purge.filter, target="")
    req = DlqResend.from_json(body, what="resend", strict=True)
    level = req.delay_level or 0
    if level > max_level:
        raise _bad(f"resend.delayLevel must be a whole number in 0..{max_level}, got {level}")
    return DlqAction(msg_ids=_unique(req.msg_ids), all=bool(req.all), filter=req.filter,
                     target=req.target or TARGETS[0], delay_level=level,
                     max_per_second=req.max_per_second)


def _unique(msg_ids: list[str] | None) -> tuple[str, ...] | None:
    """Each msgId once, in the order named."""
    return None if msg_ids is None else tuple(dict.fromkeys(msg_ids))
