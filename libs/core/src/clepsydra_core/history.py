"""A message's stored copies read as the hops of its life (DEC-message-history): pure, no I/O.
The store answers it (``GET /v1/messages/{msgId}/history``) from its look-up by msgId, the
groups' committed offsets and the state of each parked copy; the wire types are
:mod:`clepsydra_core.wire.history`.

How a copy is read (every copy keeps the message's properties, SPEC R8, so a property alone
says little; the copy's topic says where it is and a property whose list grew says what
happened):

- in the schedule topic or the timer log: parked (S1, T1); parked for ``%RETRY%<g>``: sent
  back (R7); a second parked copy of a message bound for its own topic: rescheduled;
- in ``%RETRY%<g>``: a retry copy (R3), ``%DLQ%<g>``: a dead letter (R6), ``%SCHEDULE_ERROR%``:
  parked as an error (D7);
- in any topic, a copy with more ``RESEND_HISTORY`` entries than the copies before it: resent
  (R16), the newest entry saying when, by whom and to where;
- in its own topic after a parked copy: handed over (D4, lateness D10), else stored at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.wire import history as H
from clepsydra_core.wire.history import GroupState, Hop, MessageHistory
from clepsydra_core.wire.messages import StoredMessage

Offsets = Mapping[str, Mapping[str, Mapping[int, int]]]
"""group -> topic -> queueId -> committed offset."""

REASON_MAX_CHARS = 500
"""A reason shown in a hop is cut here (a history entry may hold more)."""


def json_list(raw: str | None) -> list[Any]:
    """A list-valued property (FAILURE_HISTORY, RESEND_HISTORY) as a list ([] when absent;
    text that is not a JSON list is one ``{"unparsed": text}`` entry)."""
    if not raw:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return [{"unparsed": raw[:P.UNPARSED_MAX_CHARS]}]
    return parsed if isinstance(parsed, list) else [{"unparsed": raw[:P.UNPARSED_MAX_CHARS]}]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value[:REASON_MAX_CHARS] if isinstance(value, str) and value else None


def _last_reason(props: Mapping[str, str]) -> str | None:
    entries = json_list(props.get(P.FAILURE_HISTORY))
    last = entries[-1] if entries else None
    return _text(last.get("reason") or last.get("unparsed")) if isinstance(last, dict) \
        else None


def _is_parked(copy: StoredMessage) -> bool:
    return copy.topic == naming.SCHEDULE_TOPIC or (
        copy.topic == naming.TIMER_TOPIC and copy.queue_id == naming.TIMER_LOG_QUEUE)


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the store reads for one message: its copies oldest first, ``complete`` False when
    the look-up stopped at its cap; the groups' offsets; each parked copy's state by CommitLog
    offset (:data:`clepsydra_core.wire.history.PARKED_STATES`; absent: not known); the delay of
    a level (L1); when each cancelled parked copy was cancelled."""

    msg_id: str
    copies: Sequence[StoredMessage]
    offsets: Offsets
    parked: Mapping[int, str]
    delay_ms: Callable[[int], int]
    complete: bool = True
    cancelled_at: Mapping[int, int] = field(default_factory=dict)
    """When each cancelled parked copy was cancelled, by its CommitLog offset (its tombstone's
    store time); absent: not known (a tombstone stored before the store indexed them)."""


def _copy_fields(copy: StoredMessage) -> dict[str, Any]:
    return {"time": copy.store_timestamp, "topic": copy.topic, "queue_id": copy.queue_id,
            "queue_offset": copy.queue_offset, "commitlog_offset": copy.commitlog_offset,
            "offset_msg_id": copy.offset_msg_id, "attempt": copy.reconsume_times,
            "trace_id": P.trace_id_of(copy.properties)}


def _readers(copy: StoredMessage, offsets: Offsets) -> list[GroupState]:
    """Each group that reads the copy's queue and whether it consumed the copy (its committed
    offset is past it, SPEC C4): the groups with progress on the topic; ``%RETRY%<g>``: g."""
    retry_group = naming.group_of_retry_topic(copy.topic)
    names = [retry_group] if retry_group is not None else sorted(
        g for g, topics in offsets.items() if copy.topic in topics)
    out = []
    for group in names:
        committed = offsets.get(group, {}).get(copy.topic, {}).get(copy.queue_id)
        done = committed is not None and committed > copy.queue_offset
        out.append(GroupState(group, H.CONSUMED if done else H.NOT_YET, committed))
    return out


class _Reader:
    """Walks the copies once, oldest first, writing hops and each group's running state."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.hops: list[Hop] = []
        self.groups: dict[str, str] = {}
        self.resends = 0
        self.parked_for: dict[str, int] = {}
        """real topic -> parked copies seen bound for it, not handed over yet."""
        self.parked_hops: list[int] = []
        """Indexes of the hops that are parked copies."""

    def read(self, copy: StoredMessage) -> None:
        props = copy.properties
        resends = json_list(props.get(P.RESEND_HISTORY))
        resent = len(resends) > self.resends
        self.resends = max(self.resends, len(resends))
        if _is_parked(copy):
            self._parked(copy, resends[-1] if resent else None)
        elif copy.topic == naming.SCHEDULE_ERROR_TOPIC:
            self._hop(H.PARKED_ERROR, copy, reason=_text(props.get(P.SCHEDULE_ERROR)),
                      real_topic=props.get(P.REAL_TOPIC))
        elif copy.topic == naming.TIMER_TOPIC:
            return  # a cancel tombstone (never indexed by msgId; kept out all the same)
        elif (group := naming.group_of_dlq_topic(copy.topic)) is not None:
            self._hop(H.DEAD_LETTER, copy, group=group, reason=_text(props.get(P.DLQ_REASON))
                      or _last_reason(props))
            self.groups[group] = H.DEAD
        else:
            self._delivered(copy, resends[-1] if resent else None)

    def _parked(self, copy: StoredMessage, resend: Any) -> None:
        props = copy.properties
        real = props.get(P.REAL_TOPIC) or copy.topic
        level = _int(int(props[P.DELAY])) if props.get(P.DELAY, "").isdigit() else None
        if copy.topic == naming.TIMER_TOPIC:
            due = int(props[P.DELIVER_AT]) if props.get(P.DELIVER_AT, "").isdigit() else None
            level = None
        else:
            due = copy.store_timestamp + self.inputs.delay_ms(level) if level else None
        state = self.inputs.parked.get(copy.commitlog_offset)
        group = naming.group_of_retry_topic(real)
        if resend is not None:
            kind = H.RESENT
        elif group is not None:
            kind = H.SENT_BACK
        else:
            kind = H.RESCHEDULED if self.parked_for.get(real) else H.PARKED
        seen = self.parked_for.get(real, 0)
        self.parked_for[real] = seen + 1
        extra = _resend_fields(resend) if resend is not None else {}
        self.parked_hops.append(len(self.hops))
        reason = _last_reason(copy.properties) if kind == H.SENT_BACK else None
        self._hop(kind, copy, **{"real_topic": real, "level": level, "deliver_at": due,
                                 "state": state, "group": group, "reason": reason, **extra})
        if group is not None:
            self.groups[group] = H.RETRYING

    def _delivered(self, copy: StoredMessage, resend: Any) -> None:
        props = copy.properties
        readers = _readers(copy, self.inputs.offsets)
        retry_group = naming.group_of_retry_topic(copy.topic)
        was_parked = self.parked_for.get(copy.topic, 0) > 0
        deliver_ts = props.get(P.DELIVER_TS, "")
        lateness = copy.store_timestamp - int(deliver_ts) \
            if was_parked and deliver_ts.isdigit() else None
        if resend is not None and not was_parked:
            kind = H.RESENT
            extra = _resend_fields(resend)
        else:
            kind = H.RETRY if retry_group is not None else (
                H.HANDED_OVER if was_parked else H.STORED)
            extra = {}
        self.parked_for.pop(copy.topic, None)
        self._hop(kind, copy, **{"group": retry_group, "lateness_ms": lateness,
                                 "groups": readers, **extra})
        for reader in readers:
            still = reader.state == H.NOT_YET and retry_group is not None
            self.groups[reader.group] = H.RETRYING if still else reader.state

    def _hop(self, kind: str, copy: StoredMessage, **fields: Any) -> None:
        values = {**_copy_fields(copy), **{k: v for k, v in fields.items() if v is not None}}
        self.hops.append(Hop(kind=kind, **values))

    def cancelled(self) -> None:
        """A cancelled parked copy: a ``cancelled`` hop after it, at its tombstone's time when
        the store found it (``cancelled_at``), unless another parked copy bound for the same
        topic came after it (a reschedule is a cancel and a new parked copy, T1): then it
        reads as rescheduled."""
        last: dict[str, int] = {}
        for i in self.parked_hops:
            last[self.hops[i].real_topic or ""] = i
        out: list[Hop] = []
        for i, hop in enumerate(self.hops):
            if hop.state == H.CANCELLED and last.get(hop.real_topic or "") != i:
                hop = _replace_state(hop, H.RESCHEDULED)
            out.append(hop)
            if hop.state == H.CANCELLED:
                out.append(Hop(kind=H.CANCELLED, real_topic=hop.real_topic,
                               time=self.inputs.cancelled_at.get(hop.commitlog_offset or -1)))
        self.hops = out


def _replace_state(hop: Hop, state: str) -> Hop:
    values = {name: getattr(hop, name) for name in Hop.__dataclass_fields__}
    values["state"] = state
    return Hop(**values)


def _resend_fields(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        return {}
    return {"time": _int(entry.get("time")), "client": _text(entry.get("client")),
            "target": _text(entry.get("target")) or _text(entry.get("unparsed")),
            "group": _text(entry.get("group"))}


def build(inputs: Inputs) -> MessageHistory:
    """The timeline of the message whose copies (oldest first) ``inputs`` holds."""
    copies = list(inputs.copies)
    first = copies[0] if copies else None
    reader = _Reader(inputs)
    if first is not None:
        reader.hops.append(Hop(kind=H.PRODUCED, time=first.born_timestamp,
                               topic=first.properties.get(P.REAL_TOPIC) or first.topic,
                               host=first.born_host, trace_id=P.trace_id_of(first.properties)))
    for copy in copies:
        reader.read(copy)
    reader.cancelled()
    origin = None
    if first is not None:
        origin = (first.properties.get(P.RETRY_TOPIC) or first.properties.get(P.REAL_TOPIC)
                  or first.topic)
    groups = [GroupState(g, s) for g, s in sorted(reader.groups.items())]
    return MessageHistory(
        msg_id=first.msg_id if first is not None else inputs.msg_id, topic=origin,
        keys=first.keys if first is not None else "",
        tags=first.tags if first is not None else None, hops=reader.hops, groups=groups,
        copies=len(copies), complete=inputs.complete)
