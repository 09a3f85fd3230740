"""Where a message is stored: the one place that decides SPEC S1 (a delayed message parked in
the schedule topic at its level's queue), T1 (a timer parked in the timer log, its delay
capped), R10 (a plain send to ``%RETRY%<g>`` at its max reconsume times goes to ``%DLQ%<g>``),
L2 (a level above the table's highest is clamped, a negative one refused, through
``DelayLevels.clamp``) and the message's unique id (its msgId, docs/semantics.md: every
message has one, the producer's or one the store makes; a stored record's copy keeps its
record's, or its offsetMsgId when it has none). DEC-one-routing-decision.

:func:`route` takes a produce request and what the store knows of its topic (a
:class:`Target`) and answers a :data:`Placement`: topic, queue, kind, the properties the rules
add, the entry code and its completion at store time (``marks.entry_code``), the mark, the
reconsume times, the topics to create and the unique id. It writes nothing and reads nothing
but its arguments (the round-robin counter of the topic is the one thing it moves); it raises
the error naming the rule a request breaks. The produce encoder (``encoder.py``) encodes the
placement; copies and reschedules take the same parks (:func:`park_at_level`,
:func:`park_timer`) on their properties dict (:func:`apply`) and keep their record's unique id
(:func:`keep_uniq_key`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import NamedTuple

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import OffsetOutOfRange, ValidationError
from clepsydra_core.levels import DelayLevels, format_delay
from clepsydra_core.records import is_transaction_prepared_or_rollback
from clepsydra_core.retry_rules import max_reconsume_times_or
from clepsydra_core.validation import validate_topic_name
from clepsydra_store.engine.config import TIMER_MAX_DELAY_VAR
from clepsydra_store.engine.index.marks import PARKED, Mark
from clepsydra_store.engine.types import PutRequest

DLQ_REASON_MAX_RECONSUME = "max_reconsume_times"
"""``DLQ_REASON`` of a plain send dead-lettered at its max (R10)."""
TIMER_REPLACED = (P.DELAY, P.DELIVER_AT, P.DELAY_MS)
"""A message parked as a timer loses what parked it before (a reschedule, T1)."""


class Kind(StrEnum):
    PLAIN = "plain"
    """Stored in the topic asked for."""
    LEVEL = "level"
    """Parked in the schedule topic (S1)."""
    TIMER = "timer"
    """Parked in the timer log (T1)."""
    DLQ = "dlq"
    """A plain send to ``%RETRY%<g>`` at its max, stored in ``%DLQ%<g>`` (R10)."""


class RetryTarget(NamedTuple):
    """What R10 needs of a ``%RETRY%<g>`` topic (R3, R5)."""

    group: str
    max_times: int
    """The group's retryMaxTimes, else the default (16): a message asking for no max gets it."""
    create: bool
    """The topic does not exist yet: a send creates it (R9's fallback)."""


class Target(NamedTuple):
    """The topic a produce request names, as the store knows it."""

    topic: str
    queues: int
    counter: Iterator[int]
    """The topic's round robin (``next(counter) % queues``) for requests that name no queue."""
    retry: RetryTarget | None
    """Set for a ``%RETRY%`` topic (R10)."""


Placement = tuple[str, int, Kind, tuple[tuple[str, str], ...], int | None, int, Mark | None,
                  int, tuple[tuple[str, int], ...], str]
"""Where a message goes and what the rules add to it, unpacked in this order (a plain tuple:
the encoder makes one per message, and a named tuple costs several times more to make):

- ``topic``, ``queue_id``: where it is stored; ``kind``: its :class:`Kind`;
- ``properties``: set after the message's own, in this order (S1: REAL_TOPIC, REAL_QID, DELAY;
  T1: REAL_TOPIC, REAL_QID, DELIVER_AT or DELAY_MS; R10: DLQ_REASON);
- ``code``: the entry's code before its store time is known, None: the hash of its tags (S2);
  ``delay_ms``: how the code is completed at store time (``marks.entry_code``);
- ``mark``: what its dispatch does beyond its entry (``marks.py``);
- ``reconsume_times``;
- ``creates``: topics (and their queue counts) the append creates when they do not exist;
- ``uniq_key``: the message's unique id (its msgId): the one its producer gave, else a new
  one ("" from the parks, whose callers keep their record's)."""

_NONE: tuple[tuple[str, int], ...] = ()
_PLAIN = Kind.PLAIN
_UNIQ_KEY = P.UNIQ_KEY


def route(request: PutRequest, target: Target, levels: DelayLevels, now_ms: int,
          max_delay_ms: int, new_id: Callable[[], str]) -> Placement:
    """The placement of a produce request sent to ``target`` at ``now_ms`` (L2, R10, S1, T1 in
    that order; ``max_delay_ms``: T1's cap; ``new_id()``: a unique id for a message that
    brings none). Raises ValidationError (L2, R10, T1) or OffsetOutOfRange (a queue the topic
    does not have) naming what is wrong."""
    return router(target, levels, max_delay_ms, new_id)(request, now_ms)


Router = Callable[[PutRequest, int], Placement]
"""``router(...)(request, now_ms)``: :func:`route` bound to one target."""


def router(target: Target, levels: DelayLevels, max_delay_ms: int,
           new_id: Callable[[], str]) -> Router:
    """:func:`route` bound to one target: the produce encoder keeps one per target (the
    preparer's ``routers``) and calls it per message with the batch's time, the same decision
    (DEC-one-routing-decision) without passing six arguments and unpacking the target again
    for each message; a plain send to a topic that is not ``%RETRY%`` is placed in one step."""
    topic, queues, counter, retry = target
    clamp = levels.clamp

    def routed(request: PutRequest, now_ms: int) -> Placement:
        level = request.delay_level
        deliver_at, delay = request.deliver_at, request.delay_ms
        if level:
            level = clamp(level)  # L2
        reconsume = request.reconsume_times
        creates = _NONE
        if retry is not None:
            timer = deliver_at is not None or delay is not None
            reconsume, max_times = retry_counts(request.properties, reconsume, retry.max_times)
            # R10 reroutes plain sends only: a delayed copy (an R9 fallback's retry) is a
            # retry, whose count reaches the max before its last attempt
            if reconsume >= max_times and not level and not timer:
                return dead_letter(retry.group, reconsume,
                                   request.properties.get(_UNIQ_KEY) or new_id())
            if retry.create:
                creates = ((topic, queues),)
        asked = request.queue_id
        queue_id = next(counter) % queues if asked is None else pick_queue(topic, queues, asked)
        uniq = request.properties.get(_UNIQ_KEY) or new_id()  # every message has its msgId
        if (level or deliver_at is not None or delay is not None) \
                and not is_transaction_prepared_or_rollback(request.sys_flag):
            if deliver_at is not None or delay is not None:
                timer_target(deliver_at, delay, now_ms, max_delay_ms)
                placed = park_timer(topic, queue_id, deliver_at, delay, reconsume, uniq)
            else:
                placed = park_at_level(topic, queue_id, level, levels, reconsume, uniq)
            if creates:  # (a delayed first send to a %RETRY% topic creates it)
                parked, queue_out, kind, added, code, completion, mark, _, _, _ = placed
                return (parked, queue_out, kind, added, code, completion, mark, reconsume,
                        creates, uniq)
            return placed
        return topic, queue_id, _PLAIN, (), None, 0, None, reconsume, creates, uniq

    if retry is not None:
        return routed

    def place(request: PutRequest, now_ms: int) -> Placement:
        if request.delay_level or request.deliver_at is not None \
                or request.delay_ms is not None:
            return routed(request, now_ms)
        # plain: the end of routed() without its checks (nothing to clamp, park or reroute)
        asked = request.queue_id
        return (topic, next(counter) % queues if asked is None else
                pick_queue(topic, queues, asked), _PLAIN, (), None, 0, None,
                request.reconsume_times, _NONE, request.properties.get(_UNIQ_KEY) or new_id())

    return place


def pick_queue(topic: str, queues: int, queue_id: int) -> int:
    """The queue a request names, when the topic has it (else OffsetOutOfRange)."""
    if not 0 <= queue_id < queues:
        raise OffsetOutOfRange(f"topic {topic} has queues 0..{queues - 1}, "
                               f"not queue_id {queue_id}")
    return queue_id


def park_at_level(topic: str, queue_id: int, level: int, levels: DelayLevels,
                  reconsume_times: int, uniq_key: str = "") -> Placement:
    """S1: parked in the schedule topic, queue ``level - 1``, ``REAL_TOPIC``/``REAL_QID``/
    ``DELAY`` added; its entry's code is its deliver time, store time + the level's delay
    (S2). ``level`` is clamped already (L2)."""
    return (naming.SCHEDULE_TOPIC, levels.queue_id(level), Kind.LEVEL,
            ((P.REAL_TOPIC, topic), (P.REAL_QID, str(queue_id)), (P.DELAY, str(level))),
            0, levels.delay_ms(level), None, reconsume_times, _NONE, uniq_key)


def park_timer(topic: str, queue_id: int, deliver_at: int | None, delay_ms: int | None,
               reconsume_times: int, uniq_key: str = "") -> Placement:
    """T1: parked in the timer log (``TIMER_TOPIC_XXXX`` queue 0) with ``REAL_TOPIC``/
    ``REAL_QID`` as S1 and ``DELIVER_AT`` (its code that time, never before its store time)
    or ``DELAY_MS`` (store time + the delay), so the record alone gives its deliver time."""
    if deliver_at is not None:
        when, code, completion = (P.DELIVER_AT, str(deliver_at)), deliver_at, -1
    else:
        when, code, completion = (P.DELAY_MS, str(delay_ms or 0)), 0, delay_ms or -1
    return (naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE, Kind.TIMER,
            ((P.REAL_TOPIC, topic), (P.REAL_QID, str(queue_id)), when),
            code, completion, PARKED, reconsume_times, _NONE, uniq_key)


def dead_letter(group: str, reconsume_times: int, uniq_key: str) -> Placement:
    """R10: ``%DLQ%<group>`` queue 0 (created with one queue when missing), ``DLQ_REASON``
    added."""
    dlq = validate_topic_name(naming.dlq_topic(group))
    return (dlq, 0, Kind.DLQ, ((P.DLQ_REASON, DLQ_REASON_MAX_RECONSUME),), None, 0, None,
            reconsume_times, ((dlq, 1),), uniq_key)


def timer_target(deliver_at: int | None, delay_ms: int | None, now_ms: int,
                 max_delay_ms: int) -> int:
    """T1: the asked delivery time of a timer, checked against the cap (ValidationError
    naming the setting and the limit past it)."""
    target = deliver_at if deliver_at is not None else now_ms + (delay_ms or 0)
    if target - now_ms > max_delay_ms:
        asked = "deliverAt" if deliver_at is not None else "delayMs"
        raise ValidationError(f"{asked} is {target - now_ms} ms ahead, past the limit of "
                              f"{max_delay_ms} ms ({format_delay(max_delay_ms)}, "
                              f"{TIMER_MAX_DELAY_VAR})", rule="T1", code="INVALID_REQUEST")
    return target


def retry_counts(props: Mapping[str, str], reconsume: int,
                 default_max: int) -> tuple[int, int]:
    """R10: (reconsumeTimes, maxReconsumeTimes) of a plain send to a %RETRY% topic; the max
    absent or -1 is ``default_max`` (the group's retryMaxTimes, else 16)."""
    try:
        if P.RECONSUME_TIME in props:
            reconsume = int(props[P.RECONSUME_TIME])
        asked = props.get(P.MAX_RECONSUME_TIMES)
        max_times = max_reconsume_times_or(None if asked in (None, "") else int(asked),
                                           default_max)
    except ValueError as exc:
        raise ValidationError(f"{P.RECONSUME_TIME}/{P.MAX_RECONSUME_TIMES} must be whole "
                              f"numbers: {exc}", rule="R10", code="INVALID_PROPERTIES") from exc
    return reconsume, max_times


def apply(placement: Placement, props: dict[str, str]) -> dict[str, str]:
    """The placement's properties set on a message's properties dict, in place (a timer
    first loses what parked it before, :data:`TIMER_REPLACED`)."""
    _, _, kind, added, *_ = placement
    if kind is Kind.TIMER:
        for name in TIMER_REPLACED:
            props.pop(name, None)
    props.update(added)
    return props


def keep_uniq_key(props: dict[str, str], offset_msg_id: str) -> dict[str, str]:
    """A copy (a hand-over, a retry, a reschedule) of a stored record keeps its
    unique id; a record from before unique ids keeps the msgId its producer got, its
    offsetMsgId. In place."""
    if not props.get(P.UNIQ_KEY):
        props[P.UNIQ_KEY] = offset_msg_id
    return props
