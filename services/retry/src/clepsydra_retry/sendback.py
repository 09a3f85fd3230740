"""Send-back (SPEC R1, R2 in order, then R3-R8 through :mod:`policy`).

For each request: the group exists (404 SUBSCRIPTION_GROUP_NOT_EXIST) -> the store accepts
writes (403 NO_PERMISSION) -> the group has retry queues (0: 200 DROPPED, nothing written) ->
the retry topic exists or is created with retryQueueNums queues (R3) -> the message exists
(404 SYSTEM_ERROR naming the offset or msgId). Then one ``/v1/internal/copy`` call writes the
new message; the body never leaves the store.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from opentelemetry import trace

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError, MessageNotFound, NoPermission, ValidationError
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import check_id, shard_of_offset_msg_id
from clepsydra_core.runtime import telemetry
from clepsydra_core.wire.copy import CopyItem
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.retry import SendBackAnswer, SendBackRequest
from clepsydra_retry import policy
from clepsydra_retry.groups import GroupStore
from clepsydra_retry.headers import HeaderReader, Locator, pick
from clepsydra_retry.policy import Decision, Outcome, StoredHeaders
from clepsydra_retry.ports import ShardStore, Stores

logger = logging.getLogger(__name__)
_tracer = trace.get_tracer("clepsydra_retry")

class SendBackMessageNotFound(MessageNotFound):
    """R2's last check: no message at the offset or msgId of a send-back. SPEC R2 names the
    code SYSTEM_ERROR; DESIGN makes an unknown message a 404."""

    code = "SYSTEM_ERROR"
    http_status = 404


def _text(value: str | None, name: str, max_chars: int) -> str | None:
    """Valid Unicode text, cut at ``max_chars``; empty is None."""
    if not value:
        return None
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{name} is not valid Unicode text",
                              code="INVALID_REQUEST") from exc
    return value[:max_chars]


def parse_request(body: object) -> tuple[Locator, SendBackRequest]:
    """A send-back body as its wire type (400 naming the field on anything malformed), with
    where to read the message and the texts checked and bounded."""
    request = SendBackRequest.from_json(body, what="send-back", strict=True)
    offset, msg_id = request.commitlog_offset, request.msg_id
    if offset is None and msg_id is None:
        raise ValidationError("send-back needs msgId or commitLogOffset", rule="R1",
                              code="INVALID_REQUEST")
    if msg_id is not None:
        # the message's msgId (its unique id) or one copy's offsetMsgId; without
        # commitLogOffset the copy is found by the store's look-up by msgId (headers.pick)
        msg_id = check_id(msg_id)
    hint = (_text(request.topic, "topic", 127), request.queue_id, request.queue_offset)
    if any(h is not None for h in hint) and not all(h is not None for h in hint):
        raise ValidationError("topic, queueId and queueOffset (where the message was pulled "
                              "from) go together", code="INVALID_REQUEST")
    request = replace(request, commitlog_offset=offset, msg_id=msg_id,
                      origin_topic=_text(request.origin_topic, "originTopic", 127),
                      reason=_text(request.reason, "reason", 100_000),
                      consumer_id=_text(request.consumer_id, "consumerId", 256),
                      traceparent=_text(request.traceparent, "traceparent", 55))
    return Locator(offset, msg_id, hint[0], hint[1], hint[2]), request


def _start_span(headers: StoredHeaders, group: str, request: SendBackRequest, decision: Decision,
                caller: str | None) -> trace.Span:
    """``retry.send_back``: a child of the consume attempt that failed - the item's
    ``traceparent`` (a batch gathers several consumers' send-backs), else the request's
    (``caller``), else the message's own context - linked to the message's own trace when
    that is another one (SPEC O1). Runs per message: properties parsed once."""
    message = telemetry.extract(headers.properties)
    carried = trace.get_current_span(message).get_span_context()
    attempt = request.traceparent or caller
    parent = telemetry.extract({P.TRACEPARENT: attempt}) if attempt else None
    caller_ctx = trace.get_current_span(parent).get_span_context() if parent else None
    if caller_ctx is None or not caller_ctx.is_valid:
        parent, caller_ctx = (message if carried.is_valid else None), carried
    links = ([trace.Link(carried)]
             if carried.is_valid and carried.trace_id != caller_ctx.trace_id else None)
    attributes: dict[str, str | int] = {
        telemetry.MESSAGING_SYSTEM: telemetry.SYSTEM, telemetry.OPERATION_TYPE: telemetry.SETTLE,
        telemetry.OPERATION_NAME: "send_back", telemetry.CONSUMER_GROUP: group,
        telemetry.MESSAGE_ID: headers.msg_id, telemetry.DESTINATION: decision.topic or "",
        telemetry.OUTCOME: str(decision.outcome), telemetry.DELAY_LEVEL: decision.delay_level,
        telemetry.RECONSUME_TIMES: decision.reconsume_times}
    if decision.dlq_reason:
        attributes[telemetry.DLQ_REASON] = decision.dlq_reason
    return _tracer.start_span("retry.send_back", context=parent, links=links,
                              kind=trace.SpanKind.PRODUCER, attributes=attributes)


class SendBackService:
    def __init__(self, groups: GroupStore, stores: Stores, levels: DelayLevels,
                 *, history_max: int = policy.HISTORY_MAX_ENTRIES,
                 rng: random.Random | None = None,
                 clock_ms: Callable[[], int] | None = None,
                 auto_create_groups: bool = True) -> None:
        self._groups = groups
        self._auto_create = auto_create_groups
        self._stores = stores
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="retry-headers")
        self._readers: dict[int, tuple[ShardStore, HeaderReader]] = {}
        self._levels = levels
        self._history_max = history_max
        self._rng = rng or random.Random()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def _reader(self, store: ShardStore) -> HeaderReader:
        """The header reader of one shard's store (one thread pool for all of them)."""
        known = self._readers.get(id(store))
        if known is None or known[0] is not store:
            known = self._readers[id(store)] = (store, HeaderReader(store, pool=self._pool))
        return known[1]

    def _group_settings(self, group: str) -> GroupSettings:
        """R2 (1): the group's settings; a group seen for the first time is created with the
        defaults unless CLEPSYDRA_AUTO_CREATE_GROUPS is off (then 404, as R2 says)."""
        found = self._groups.find(group)
        if found is not None:
            return found
        if not self._auto_create:
            return self._groups.get(group)  # raises GroupNotFound
        settings = GroupSettings()
        self._groups.put(group, settings)
        logger.info("consumer group created on its first send-back group=%s", group)
        return settings

    def send_back(self, group: str, body: object, *,
                  traceparent: str | None = None) -> SendBackAnswer:
        """One send-back; raises the R2 error of the first check that fails. ``traceparent``:
        the request's W3C header (the consume attempt that failed)."""
        result = self.send_back_many(group, [body], single=True, traceparent=traceparent)[0]
        assert isinstance(result, SendBackAnswer)  # single: an item's error is raised
        return result

    def send_back_many(self, group: str, bodies: list[object], *, single: bool = False,
                       traceparent: str | None = None) -> list[SendBackAnswer | ErrorAnswer]:
        """Several send-backs of one group with one copy call per store shard. The group-level
        checks (R2's first four) apply to all (the writable check and the retry topic per
        shard); a malformed item or a missing message fails only that item (its result is
        ``{error, message}``), unless ``single``, when it raises. ``traceparent``: the
        request's header, for items that carry none of their own."""
        parsed: list[tuple[Locator, SendBackRequest] | ClepsydraError] = []
        for body in bodies:
            try:
                parsed.append(parse_request(body))
            except ClepsydraError as exc:
                if single:
                    raise
                parsed.append(exc)
        settings = self._group_settings(group)  # R2 (1)
        if not self._stores.clustered:
            return self._on_shard(self._stores.of(0), group, settings, parsed, single,
                                  traceparent)
        results: list[SendBackAnswer | ErrorAnswer | None] = [None] * len(parsed)
        by_shard: dict[int, list[int]] = {}
        for i, item in enumerate(parsed):
            if isinstance(item, ClepsydraError):
                results[i] = ErrorAnswer.of(item)
                continue
            try:
                shard, parsed[i] = self._placed(group, item)
            except ClepsydraError as exc:
                if single:
                    raise
                results[i] = ErrorAnswer.of(exc)
                continue
            by_shard.setdefault(shard, []).append(i)
        for shard, indexes in sorted(by_shard.items()):
            try:
                store = self._stores.of(shard)
                answers = self._on_shard(store, group, settings, [parsed[i] for i in indexes],
                                         single, traceparent)
            except ClepsydraError as exc:  # this shard refused them all (R2) or is down
                if single:
                    raise
                answers = [ErrorAnswer.of(exc)] * len(indexes)
            for i, answer in zip(indexes, answers, strict=True):
                results[i] = answer
        done = [r for r in results if r is not None]
        assert len(done) == len(results)
        return done

    def _placed(self, group: str, item: tuple[Locator, SendBackRequest]
                ) -> tuple[int, tuple[Locator, SendBackRequest]]:
        """The store shard an item's message is on (DEC-store-shards): the one it names; with
        a commitLogOffset, the shard its offsetMsgId names (DEC-shard-in-msgid), else 0; a
        msgId alone is looked up (the store sends an offsetMsgId's look-up straight to its
        shard, a unique id's to every shard) and the copy the group consumed chosen
        (headers.pick), its offset then named. A unique id is 32 hex digits too, its pid where
        an offsetMsgId has the shard: read as an offsetMsgId it would name a shard at random
        (a producer that is pid 1 in its container names shard 1)."""
        locator, request = item
        if request.shard is not None:
            return request.shard, item
        if locator.commitlog_offset is not None:
            named = shard_of_offset_msg_id(locator.msg_id or "")
            return (named if named in self._stores.ids() else 0), item
        copies = self._stores.bootstrap.copies(locator.msg_id or "")
        chosen = pick(copies, locator, group)
        if chosen is None:
            raise SendBackMessageNotFound(f"no message at {locator.describe()}", rule="R2")
        located = replace(locator, commitlog_offset=chosen.commitlog_offset)
        return chosen.shard or 0, (located, request)

    def _on_shard(self, store: ShardStore, group: str, settings: GroupSettings,
                  parsed: list[tuple[Locator, SendBackRequest] | ClepsydraError], single: bool,
                  traceparent: str | None) -> list[SendBackAnswer | ErrorAnswer]:
        """R2 (2) on, for the items of one store shard, written there."""
        if not store.is_writable():  # R2 (2)
            raise NoPermission("the store does not accept writes now", rule="R2")
        if policy.drops_retries(settings):  # R2 (3)
            ok = sum(1 for p in parsed if not isinstance(p, ClepsydraError))
            if ok:
                self._groups.count_send_back(group, Outcome.DROPPED, ok)
            logger.info("send-back dropped group=%s count=%d (retryQueueNums=0)", group, ok)
            return [ErrorAnswer.of(p) if isinstance(p, ClepsydraError)
                    else policy.DROPPED.answer(None) for p in parsed]
        queue_count = store.ensure_topic(  # R2 (4), R3
            naming.retry_topic(group), settings.retry_queue_nums)

        results: list[SendBackAnswer | ErrorAnswer | None] = [None] * len(parsed)
        wanted = [(i, p) for i, p in enumerate(parsed) if not isinstance(p, ClepsydraError)]
        for i, p in enumerate(parsed):
            if isinstance(p, ClepsydraError):
                results[i] = ErrorAnswer.of(p)
        found = self._reader(store).read_many([item[0] for _, item in wanted], group)
        pending: list[tuple[int, StoredHeaders, SendBackRequest, Decision]] = []
        for (i, (locator, request)), headers in zip(wanted, found, strict=True):
            if isinstance(headers, MessageNotFound):  # R2 (5)
                error = SendBackMessageNotFound(f"no message at {locator.describe()}",
                                                rule="R2")
                if single:
                    raise error from headers
                results[i] = ErrorAnswer.of(error)
                continue
            decision = policy.decide(
                settings, headers, request, group=group, levels=self._levels,
                retry_queue_count=queue_count, rng=self._rng, now_ms=self._clock_ms(),
                history_max=self._history_max)
            pending.append((i, headers, request, decision))
        if pending:
            for i, result in self._write(store, group, pending, traceparent):
                results[i] = result
        done = [r for r in results if r is not None]
        assert len(done) == len(results)  # every item has its answer or its error
        return done

    def _write(self, store: ShardStore, group: str,
               pending: list[tuple[int, StoredHeaders, SendBackRequest, Decision]],
               caller: str | None) -> list[tuple[int, SendBackAnswer]]:
        if any(d.outcome == Outcome.DLQ for _, _, _, d in pending):
            store.ensure_topic(naming.dlq_topic(group), 1)  # R6: one queue
        items: list[CopyItem] = []
        spans: list[trace.Span] = []
        for _, headers, request, decision in pending:
            span = _start_span(headers, group, request, decision, caller)
            spans.append(span)
            props = dict(decision.set_properties)
            with trace.use_span(span, end_on_exit=False):
                telemetry.inject(props)  # the copy continues the message's trace
            items.append(CopyItem(
                commitlog_offset=headers.commitlog_offset, topic=decision.topic or "",
                queue_id=decision.queue_id, delay_level=decision.delay_level,
                reconsume_times=decision.reconsume_times, set_properties=props,
                remove_properties=decision.remove_properties))
        try:
            stored = store.copy(items)
        except ClepsydraError as exc:
            for span in spans:
                span.set_status(trace.Status(trace.StatusCode.ERROR, exc.code))
                span.end()
            if isinstance(exc, MessageNotFound):
                raise SendBackMessageNotFound(str(exc), rule="R2") from exc
            raise
        out: list[tuple[int, SendBackAnswer]] = []
        counts: dict[str, int] = {}
        for (i, headers, _, decision), result, span in zip(pending, stored, spans, strict=True):
            new_id = result.msg_id
            span.set_attribute(telemetry.NEW_MESSAGE_ID, new_id)
            span.end()
            out.append((i, decision.answer(new_id)))
            counts[decision.outcome] = counts.get(decision.outcome, 0) + 1
            logger.info("send-back group=%s msg_id=%s outcome=%s topic=%s delay_level=%d "
                        "reconsume_times=%d new_msg_id=%s", group, headers.msg_id,
                        decision.outcome, decision.topic, decision.delay_level,
                        decision.reconsume_times, new_id)
        for outcome, n in counts.items():
            self._groups.count_send_back(group, outcome, n)
        return out
