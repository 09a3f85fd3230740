"""What a DLQ request selects: a filter over dead letters, and the resend/purge action body.
Pure parsing and matching (no I/O); every malformed input is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.msgid import check_id
from clepsydra_core.wire.codec import INT64_MAX
from clepsydra_core.wire.dlq import DlqFilter
from clepsydra_retry import policy
from clepsydra_web.jsonio import parse_int

MAX_MSG_IDS = 10_000


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


def matches(flt: DlqFilter, message: Mapping[str, Any]) -> bool:
    """Whether the dead letter (the store's message view) is one ``flt`` selects."""
    props: Mapping[str, str] = message.get("properties") or {}
    if flt.topic is not None and props.get(P.RETRY_TOPIC) != flt.topic:
        return False
    if flt.key is not None and flt.key not in props.get(P.KEYS, "").split() \
            and props.get(P.UNIQ_KEY) != flt.key:
        return False
    stored_ms = int(message.get("storeTimestamp") or 0)
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

    def describe(self, max_ids: int) -> dict[str, Any]:
        """For the audit record."""
        out: dict[str, Any] = {}
        if self.msg_ids is not None:
            out["msgIds"] = list(self.msg_ids[:max_ids])
            out["msgIdCount"] = len(self.msg_ids)
        elif self.filter is not None:
            out["filter"] = self.filter.to_json()
        else:
            out["all"] = True
        if self.target:
            out["target"] = self.target
        if self.target == "retry":
            out["delayLevel"] = self.delay_level
        if self.max_per_second:
            out["maxPerSecond"] = self.max_per_second
        return out


_RESEND_FIELDS = frozenset({"msgIds", "all", "filter", "target", "delayLevel", "maxPerSecond"})
_PURGE_FIELDS = frozenset({"msgIds", "all", "filter"})


def _msg_ids(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _bad("msgIds must be a non-empty list of msgIds")
    if len(value) > MAX_MSG_IDS:
        raise _bad(f"at most {MAX_MSG_IDS} msgIds a request (use a filter for more)")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise _bad(f"msgIds must be strings, got {item!r}")
        check_id(item)  # INVALID_MSG_ID names it
        if item not in out:
            out.append(item)
    return tuple(out)


def parse_action(body: object, *, resend: bool, max_level: int) -> DlqAction:
    """A resend body ``{msgIds | all: true | filter: {...}, target?: "retry"|"origin",
    delayLevel?, maxPerSecond?}`` or a purge body ``{msgIds | all: true | filter}``."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _bad("body must be a JSON object")
    allowed = _RESEND_FIELDS if resend else _PURGE_FIELDS
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _bad(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    chosen = [k for k in ("msgIds", "all", "filter") if body.get(k) not in (None, False)]
    if len(chosen) != 1:
        raise _bad("give exactly one of msgIds, all: true, or filter")
    if "all" in body and not isinstance(body["all"], bool):
        raise _bad("all must be true or false")
    msg_ids = _msg_ids(body["msgIds"]) if chosen == ["msgIds"] else None
    flt = None
    if chosen == ["filter"]:
        flt = DlqFilter.from_json(body["filter"], what="filter", strict=True)
    target = body.get("target", "retry") if resend else ""
    if resend and target not in ("origin", "retry"):
        raise _bad(f"target must be 'retry' (the default) or 'origin', got {target!r}")
    level = body.get("delayLevel", 0)
    if isinstance(level, float) and level.is_integer():
        level = int(level)  # JSON Schema's integer: 2.0 is one
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= max_level:
        raise _bad(f"delayLevel must be a whole number in 0..{max_level}, got {level!r}")
    if level and target != "retry":
        raise _bad("delayLevel applies only to target 'retry'")
    rate = body.get("maxPerSecond")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not 0 < rate <= 1_000_000):
        raise _bad(f"maxPerSecond must be a number > 0, got {rate!r}")
    return DlqAction(msg_ids=msg_ids, all=chosen == ["all"], filter=flt, target=str(target),
                     delay_level=level, max_per_second=float(rate) if rate else None)
