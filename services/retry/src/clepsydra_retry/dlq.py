"""The DLQ toolkit (SPEC R16 Beyond): list, show, resend, purge, audit, depth.

A group's dead letters are queue 0 of `%DLQ%<group>` in the store. The store's CommitLog is
append-only, so "resent" and "purged" messages are hidden here (``dlq_state``): a set of
offsetMsgIds (one per dead-letter copy: a message dead-lettered again after a resend is another
copy with the same msgId) and a floor queue offset. Requests name dead letters by msgId (or
offsetMsgId), found with the store's look-up by msgId. Resends are one store copy call per
batch (bodies stay in the store); every resend and purge is appended to the group's audit
list, and each resent message carries the resend in its ``RESEND_HISTORY``.

A resend goes into the group's own retry topic by default (``%RETRY%<group>``, as RocketMQ
redelivers through it): only that group consumes it again. ``target: "origin"`` puts it back on
its original topic instead, where every group subscribed to that topic receives it (SPEC R16).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import TypeVar

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import (
    ClepsydraError,
    MessageNotFound,
    NoPermission,
    Unavailable,
    ValidationError,
)
from clepsydra_core.groups import GroupSettings
from clepsydra_core.levels import DelayLevels
from clepsydra_core.msgid import check_id
from clepsydra_core.wire.cluster import ShardFailure
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.copy import ORIGIN, CopyItem, RangeCopy
from clepsydra_core.wire.dlq import (
    AuditRecord,
    DlqAudit,
    DlqFilter,
    DlqMessage,
    DlqPage,
    FailureEntry,
    PurgeResult,
    ResendEntry,
    ResendResult,
)
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry import policy
from clepsydra_retry.dlq_filter import DlqAction, matches, parse_action
from clepsydra_retry.dlq_state import DlqState, Floor
from clepsydra_retry.groups import GroupStore
from clepsydra_retry.ports import ShardStore, Stores

logger = logging.getLogger(__name__)
_E = TypeVar("_E", bound=WireValue)


class NoRetryTopic(ClepsydraError):
    """A resend into the retry topic of a group that has none (retryQueueNums 0, R2): the
    request is well formed, the group's state refuses it."""

    code = "NO_RETRY_TOPIC"
    http_status = 409

PULL_MAX = 1000
"""The store's largest pull (docs/contracts.md)."""
LIST_SCAN_LIMIT = 20_000
"""A listing scans at most this many DLQ entries per request, then returns nextOffset."""
AUDIT_MSG_IDS = 100
"""msgIds written into one audit record (the count is always exact)."""
RESEND_REMOVES = (P.DLQ_REASON, P.RECONSUME_TIME, P.SCHEDULE_OFFSET, P.DELIVER_TS)
"""A resent message starts over: no dead-letter reason, no R10 counter, no hand-over marks."""


class NotInDlq(MessageNotFound):
    """A msgId named in a DLQ request is not (or no longer) in the group's DLQ."""

    code = "NOT_IN_DLQ"


@dataclass(slots=True)
class _Progress:
    done: int = 0
    skipped: int = 0


class DlqToolkit:
    """With more than one store shard (DEC-store-shards) each shard has its own
    ``%DLQ%<group>`` (a message is dead-lettered on the shard that stored it): listings walk
    the shards in turn, each row saying its shard; a resend or purge goes shard by shard, each
    shard's part written there, a shard that does not answer (or refuses writes, drained)
    named in the result's ``failed`` while the others are done."""

    def __init__(self, stores: Stores, groups: GroupStore, state: DlqState,
                 levels: DelayLevels, *, batch: int = 1000, audit_max: int = 10_000,
                 rng: random.Random | None = None,
                 clock_ms: Callable[[], int] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._stores = stores
        self._groups = groups
        self._state = state
        self._levels = levels
        self._batch = batch
        self._audit_max = audit_max
        self._rng = rng or random.Random()
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._sleep = sleep
        self._prefetcher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dlq-prefetch")

    # ---- reading ---------------------------------------------------------------------------
    def _shards(self) -> list[tuple[int, ShardStore]]:
        """Every store shard's (id, client); with one shard, the store's."""
        if not self._stores.clustered:
            return [(0, self._stores.of(0))]
        return [(shard, self._stores.of(shard)) for shard in self._stores.ids()]

    def _bounds(self, group: str, store: ShardStore) -> tuple[int, int]:
        """(minOffset, maxOffset) of the DLQ queue; (0, 0) while the group has no DLQ."""
        info = store.topic(naming.dlq_topic(group))
        if info is None:
            return 0, 0
        for queue in info.queues:
            if queue.queue_id == 0:
                return queue.min_offset, queue.max_offset
        return 0, 0

    def _pull(self, store: ShardStore, group: str, offset: int, end: int,
              with_body: bool) -> tuple[list[StoredMessage], int]:
        page = store.pull(naming.dlq_topic(group), 0, offset, min(PULL_MAX, end - offset),
                          with_body=with_body)
        return [m for m in page.messages if m.queue_offset < end], page.next_offset

    def _pages(self, store: ShardStore, group: str, start: int, end: int, *,
               prefetch: bool = False, with_body: bool = False
               ) -> Iterator[list[StoredMessage]]:
        """Raw DLQ messages of queue offsets [start, end), a pull at a time, headers only
        unless ``with_body`` (scans, resends and purges need no body). With ``prefetch`` the
        next pull runs while the caller works on the current page."""
        offset = start
        ahead: Future[tuple[list[StoredMessage], int]] | None = None
        try:
            while offset < end:
                messages, next_offset = (ahead.result() if ahead is not None
                                         else self._pull(store, group, offset, end, with_body))
                ahead = None
                if prefetch and offset < next_offset < end:
                    ahead = self._prefetcher.submit(self._pull, store, group, next_offset, end,
                                                    with_body)
                if messages:
                    yield messages
                if next_offset <= offset:
                    return
                offset = next_offset
        finally:
            if ahead is not None:
                ahead.cancel()

    def _visible(self, group: str, floor: Floor,
                 messages: list[StoredMessage]) -> list[StoredMessage]:
        above = [m for m in messages if m.queue_offset >= floor.queue_offset]
        if not above or self._state.removed_count(group) == 0:
            return above  # the usual case: nothing hidden one by one, no per-id look-up
        flags = self._state.removed_flags(group, [copy_id(m) for m in above])
        return [m for m, removed in zip(above, flags, strict=True) if not removed]

    def list_page(self, group: str, queue_offset: int | None, max_count: int,
                  flt: DlqFilter, shard: int | None = None) -> DlqPage:
        """A page of visible dead letters matching the filter, from ``queue_offset`` on (of
        ``shard``, with more than one store shard: the next shards follow in the same page
        while it has room)."""
        self._groups.get(group)
        if not self._stores.clustered:
            rows, next_offset, high = self._list_shard(self._stores.of(0), group, 0,
                                                       queue_offset, max_count, flt)
            return DlqPage(rows, next_offset, high)
        shards = self._stores.ids()
        start_shard = shard if shard is not None else shards[0]
        if start_shard not in shards:
            raise ValidationError(f"no store shard {start_shard} (shards "
                                  f"{', '.join(map(str, shards))})", code="INVALID_REQUEST")
        found: list[DlqMessage] = []
        unreachable: list[int] = []
        offset = queue_offset
        next_offset, high = 0, 0
        todo = [s for s in shards if s >= start_shard]
        for position, current in enumerate(todo):
            try:
                part, next_offset, high = self._list_shard(
                    self._stores.of(current), group, current, offset,
                    max_count - len(found), flt)
            except Unavailable:
                unreachable.append(current)
                offset = None
                continue
            found += part
            offset = None
            if next_offset < high:  # this shard has more: the next page goes on here
                return DlqPage(found, next_offset, high, current, unreachable or None)
            if len(found) >= max_count and position + 1 < len(todo):
                return DlqPage(found, 0, 0, todo[position + 1], unreachable or None)
        return DlqPage(found, next_offset, high, None, unreachable or None)

    def _list_shard(self, store: ShardStore, group: str, shard: int,
                    queue_offset: int | None, max_count: int, flt: DlqFilter
                    ) -> tuple[list[DlqMessage], int, int]:
        floor = self._state.floor(group, shard)
        low, high = self._bounds(group, store)
        start = max(queue_offset if queue_offset is not None else 0, floor.queue_offset, low)
        found: list[DlqMessage] = []
        next_offset = start
        scan_end = min(high, start + LIST_SCAN_LIMIT)
        for page in self._pages(store, group, start, scan_end, with_body=True):
            visible = {id(m) for m in self._visible(group, floor, page)}
            for message in page:
                next_offset = message.queue_offset + 1
                if id(message) in visible and matches(flt, message):
                    found.append(summarize(message, shard=shard if self._stores.clustered
                                           else None))
                    if len(found) >= max_count:
                        break
            if len(found) >= max_count:
                break
        else:
            next_offset = max(next_offset, scan_end)
        return found, next_offset, high

    def _locate(self, group: str, msg_id: str) -> list[StoredMessage]:
        """The visible dead letters of the group with this msgId (or offsetMsgId), oldest
        first, on any shard (each copy's ``shard`` says which), or NotInDlq naming it."""
        where = f"msgId {msg_id} is not in the DLQ of group {group!r}"
        copies = self._stores.bootstrap.copies(msg_id)
        dlq = naming.dlq_topic(group)
        dead = [m for m in copies if m.topic == dlq]
        if not dead:
            if copies:
                raise NotInDlq(f"{where}: it is in topic {copies[-1].topic!r}", rule="R16")
            raise NotInDlq(f"{where}: no such message", rule="R16")
        floors: dict[int, Floor] = {}
        for m in dead:
            if (m.shard or 0) not in floors:
                floors[m.shard or 0] = self._state.floor(group, m.shard or 0)
        dead = [m for m in dead if m.queue_offset >= floors[m.shard or 0].queue_offset]
        flags = self._state.removed_flags(group, [copy_id(m) for m in dead]) if dead else []
        visible = [m for m, removed in zip(dead, flags, strict=True) if not removed]
        if not visible:
            raise NotInDlq(f"{where}: it was already resent or purged", rule="R16")
        return visible

    def show(self, group: str, msg_id: str) -> DlqMessage:
        """One dead letter with its body and its parsed attempt and resend histories."""
        self._groups.get(group)
        message = self._locate(group, check_id(msg_id))[-1]
        return summarize(message, histories=True, shard=message.shard)

    def depth(self, group: str) -> int:
        """Visible dead letters of a group (for metrics): entries above each shard's floor
        minus the msgIds hidden above them."""
        total = 0
        for shard, store in self._shards():
            low, high = self._bounds(group, store)
            floor = self._state.floor(group, shard)
            total += high - max(low, floor.queue_offset)
        return max(0, total - self._state.removed_count(group))

    def audit(self, group: str, max_count: int) -> DlqAudit:
        self._groups.get(group)
        return DlqAudit([AuditRecord.from_json(r, what="audit record")
                         for r in self._state.audit(group, max_count)])

    # ---- changing --------------------------------------------------------------------------
    def resend(self, group: str, body: object, client: str) -> ResendResult:
        """Resend one / a filter / all into the group's retry topic at a chosen level (the
        default: only this group receives them), or to the original topic (RETRY_TOPIC);
        reconsumeTimes starts again at 0, failure history is kept, the resend is appended to
        each message's RESEND_HISTORY. Each shard's dead letters are resent on that shard."""
        action = parse_action(body, resend=True, max_level=self._levels.max_level)
        settings = self._groups.get(group)
        if not self._stores.clustered and not self._stores.of(0).is_writable():
            raise NoPermission("the store does not accept writes now", rule="R2")
        if action.target == "retry" and policy.drops_retries(settings):
            raise NoRetryTopic(f"group {group!r} has retryQueueNums 0: it has no retry "
                               "topic to resend into", rule="R2")
        progress = _Progress()
        entry = json.dumps({"time": self._clock_ms(), "client": client, "group": group,
                            "target": action.target}, separators=(",", ":"))
        located = (_unique([c for m in action.msg_ids for c in self._locate(group, m)])
                   if action.msg_ids is not None else None)
        failed: list[ShardFailure] = []
        try:
            for shard, store in self._shards():
                mine = (None if located is None
                        else [m for m in located if (m.shard or 0) == shard])
                if mine is not None and not mine:
                    continue
                try:
                    self._resend_shard(store, shard, group, settings, action, mine, progress,
                                       {P.RESEND_HISTORY: entry})
                except (Unavailable, NoPermission) as exc:
                    if not self._stores.clustered:
                        raise
                    failed.append(ShardFailure(shard, exc.code, exc.message))
        except ClepsydraError as exc:
            if progress.done:  # a partial resend is still recorded, with what stopped it
                self._audit(group, "resend", action, progress.done, client,
                            skipped=progress.skipped, error=exc.message)
            raise
        if failed and not progress.done and len(failed) == len(self._shards()):
            raise NoPermission(f"no store shard took the resend: {failed[0].message}",
                               rule="R2")
        result = ResendResult(progress.done, progress.skipped, action.target, failed or None)
        self._audit(group, "resend", action, progress.done, client, skipped=progress.skipped,
                    error="; ".join(f"shard {f.shard}: {f.message}" for f in failed) or None)
        logger.info("dlq resend group=%s target=%s resent=%d skipped=%d failed_shards=%s "
                    "client=%s", group, action.target, progress.done, progress.skipped,
                    [f.shard for f in failed], client)
        return result

    def _resend_shard(self, store: ShardStore, shard: int, group: str,
                      settings: GroupSettings, action: DlqAction,
                      located: list[StoredMessage] | None, progress: _Progress,
                      history: dict[str, str]) -> None:
        """One shard's part of a resend (its dead letters, written there)."""
        if not store.is_writable():
            raise NoPermission("the store does not accept writes now", rule="R2")
        retry_queues = 0
        if action.target == "retry":
            retry_queues = store.ensure_topic(naming.retry_topic(group),
                                              settings.retry_queue_nums)
        self._resend(store, shard, group, action, located, retry_queues, progress, history)

    def _resend(self, store: ShardStore, shard: int, group: str, action: DlqAction,
                located: list[StoredMessage] | None, retry_queues: int, progress: _Progress,
                history: dict[str, str]) -> None:
        floor = self._state.floor(group, shard)
        origins: dict[str, bool] = {}
        started = time.monotonic()
        if located is not None:
            for message in located:
                problem = self._origin_problem(store, message, action, origins)
                if problem:
                    raise ValidationError(f"cannot resend msgId {message.msg_id}: {problem}",
                                          rule="R16", code="INVALID_REQUEST")
            self._resend_chunked(store, shard, group, located, action, retry_queues, progress,
                                 started, history)
        elif (action.filter is None and not action.max_per_second
              and self._state.removed_count(group) == 0):
            self._resend_ranges(store, shard, group, action, floor, progress, history)
        else:
            low, high = self._bounds(group, store)
            contiguous = action.filter is None
            for page in self._pages(store, group, max(low, floor.queue_offset), high,
                                    prefetch=True):
                visible = self._visible(group, floor, page)
                chosen = [m for m in visible
                          if action.filter is None or matches(action.filter, m)]
                todo = []
                for message in chosen:
                    if self._origin_problem(store, message, action, origins):
                        progress.skipped += 1
                        contiguous = False
                    else:
                        todo.append(message)
                self._resend_chunked(store, shard, group, todo, action, retry_queues, progress,
                                     started, history, floor_up=contiguous)
            if contiguous and high > 0:
                self._raise_floor(store, shard, group, high)

    def _resend_ranges(self, store: ShardStore, shard: int, group: str, action: DlqAction,
                       floor: Floor, progress: _Progress, history: dict[str, str]) -> None:
        """Resend all, nothing hidden one by one, no rate limit: the store copies the DLQ a
        range at a time (``/v1/internal/copy-range``), no message crosses the wire. The floor
        follows while every message went; after a skip, copied msgIds are hidden one by one
        (as the per-page path does)."""
        low, high = self._bounds(group, store)
        offset = max(low, floor.queue_offset)
        contiguous = True
        if action.target == "retry":
            target, level = naming.retry_topic(group), action.delay_level or 0
        else:
            target, level = ORIGIN, 0
        while offset < high:
            r = store.copy_range(RangeCopy(
                topic=naming.dlq_topic(group), queue_id=0, from_offset=offset, target=target,
                max_count=min(self._batch, high - offset), delay_level=level,
                reconsume_times=0, remove_properties=RESEND_REMOVES,
                append_properties=history))
            progress.done += r.copied
            progress.skipped += len(r.skipped)
            contiguous = contiguous and not r.skipped
            next_offset = r.next_offset
            last = r.last_commitlog_offset
            if contiguous and last is not None:
                self._state.raise_floor(group, Floor(next_offset, last + 1), compact=False,
                                        shard=shard)
            elif r.copied_msg_ids:
                self._state.remove(group, r.copied_msg_ids)
            if next_offset <= offset:
                break
            offset = next_offset
        if contiguous and high > 0:
            self._raise_floor(store, shard, group, high)

    def _origin_problem(self, store: ShardStore, message: StoredMessage, action: DlqAction,
                        origins: dict[str, bool]) -> str | None:
        if action.target == "retry":
            return None
        origin = message.properties.get(P.RETRY_TOPIC)
        if not origin:
            return "it has no RETRY_TOPIC (resend it into the retry topic instead)"
        if naming.is_system_topic(origin):
            return f"its original topic {origin!r} is a system topic"
        if origin not in origins:
            origins[origin] = store.topic(origin) is not None
        if not origins[origin]:
            return f"its original topic {origin!r} does not exist in the store"
        return None

    def _copy_item(self, group: str, message: StoredMessage, action: DlqAction,
                   retry_queues: int, history: dict[str, str]) -> CopyItem:
        """The copy of one dead letter: back to its group's retry topic, or to its origin."""
        props = message.properties
        removes = tuple(n for n in RESEND_REMOVES if n in props)
        offset = message.commitlog_offset
        if action.target == "retry":
            return CopyItem(offset, naming.retry_topic(group),
                            queue_id=self._rng.randrange(max(retry_queues, 1)),
                            delay_level=action.delay_level or 0, reconsume_times=0,
                            remove_properties=removes, append_properties=history)
        return CopyItem(offset, props[P.RETRY_TOPIC], reconsume_times=0,
                        remove_properties=removes, append_properties=history)

    def _resend_chunked(self, store: ShardStore, shard: int, group: str,
                        messages: list[StoredMessage], action: DlqAction, retry_queues: int,
                        progress: _Progress, started: float, history: dict[str, str], *,
                        floor_up: bool = False) -> None:
        chunk = self._batch
        if action.max_per_second:
            chunk = max(1, min(chunk, int(action.max_per_second / 10)))
        for start in range(0, len(messages), chunk):
            part = messages[start:start + chunk]
            if action.max_per_second:
                wait_s = started + progress.done / action.max_per_second - time.monotonic()
                if wait_s > 0:
                    self._sleep(wait_s)
            store.copy([self._copy_item(group, m, action, retry_queues, history)
                        for m in part])
            if floor_up:
                last = part[-1]
                self._state.raise_floor(group, Floor(last.queue_offset + 1,
                                                     last.commitlog_offset + 1),
                                        compact=False, shard=shard)
            else:
                self._state.remove(group, [copy_id(m) for m in part])
            progress.done += len(part)

    def purge(self, group: str, body: object, client: str) -> PurgeResult:
        """Hide dead letters for good: all, a filter, or the msgIds named (on every shard)."""
        action = parse_action(body, resend=False, max_level=self._levels.max_level)
        self._groups.get(group)
        if action.msg_ids is not None:
            located = _unique([c for m in action.msg_ids for c in self._locate(group, m)])
            self._state.remove(group, [copy_id(m) for m in located])
            count = len(located)
            failed: list[ShardFailure] = []
        else:
            count, failed = (self.depth(group) if action.filter is None else 0), []
            for shard, store in self._shards():
                try:
                    count += self._purge_shard(store, shard, group, action)
                except Unavailable as exc:
                    if not self._stores.clustered:
                        raise
                    failed.append(ShardFailure(shard, exc.code, exc.message))
        self._audit(group, "purge", action, count, client,
                    error="; ".join(f"shard {f.shard}: {f.message}" for f in failed) or None)
        logger.info("dlq purge group=%s purged=%d failed_shards=%s client=%s", group, count,
                    [f.shard for f in failed], client)
        return PurgeResult(count, failed or None)

    def _purge_shard(self, store: ShardStore, shard: int, group: str,
                     action: DlqAction) -> int:
        """One shard's purge; how many it hid (all: counted before, by ``depth``)."""
        floor = self._state.floor(group, shard)
        low, high = self._bounds(group, store)
        if action.filter is None:
            self._raise_floor(store, shard, group, high)
            return 0
        count = 0
        for page in self._pages(store, group, max(low, floor.queue_offset), high):
            chosen = [copy_id(m) for m in self._visible(group, floor, page)
                      if matches(action.filter, m)]
            self._state.remove(group, chosen)
            count += len(chosen)
        return count

    def _raise_floor(self, store: ShardStore, shard: int, group: str, high: int) -> None:
        """Floor at ``high`` (one past the last entry seen), then forget hidden msgIds below."""
        if high <= 0:
            return
        last = store.pull(naming.dlq_topic(group), 0, high - 1, 1, with_body=False).messages
        boundary = last[0].commitlog_offset + 1 if last else 0
        self._state.raise_floor(group, Floor(high, boundary), compact=True, shard=shard)

    def _audit(self, group: str, action_name: str, action: DlqAction, count: int, client: str,
               skipped: int | None = None, error: str | None = None) -> None:
        record = AuditRecord(self._clock_ms(), action_name, action.describe(AUDIT_MSG_IDS),
                             count, client, skipped, error)
        self._state.append_audit(group, record.to_json(), self._audit_max)


def copy_id(message: StoredMessage) -> str:
    """Which dead-letter copy a message view is (its offsetMsgId): what is hidden."""
    return message.offset_msg_id or message.msg_id


def _unique(messages: list[StoredMessage]) -> list[StoredMessage]:
    """Each copy once (two ids named may find the same one), in the order found."""
    seen: dict[str, StoredMessage] = {}
    for message in messages:
        seen.setdefault(copy_id(message), message)
    return list(seen.values())


_VIEW_FIELDS = tuple(f.name for f in fields(StoredMessage))


def summarize(message: StoredMessage, *, histories: bool = False,
              shard: int | None = None) -> DlqMessage:
    """The store's message view plus what the DLQ adds: original topic, dead-letter reason,
    attempts and resends recorded (``histories``: the entries themselves too); ``shard``: the
    store shard it is on (with more than one)."""
    props = message.properties
    failures = policy.parse_history(props.get(P.FAILURE_HISTORY))
    resends = policy.parse_history(props.get(P.RESEND_HISTORY))
    fields_of = {name: getattr(message, name) for name in _VIEW_FIELDS}
    if shard is not None:
        fields_of["shard"] = shard
    return DlqMessage(
        **fields_of,
        origin_topic=props.get(P.RETRY_TOPIC), dlq_reason=props.get(P.DLQ_REASON),
        attempts=len(failures), resends=len(resends),
        failure_history=[_entry(FailureEntry, e) for e in failures] if histories else None,
        resend_history=[_entry(ResendEntry, e) for e in resends] if histories else None)


def _entry(cls: type[_E], raw: object) -> _E:
    """A history entry as its wire type; one that is not (written by hand, cut short) as
    ``unparsed`` text."""
    try:
        return cls.from_json(raw)
    except ValidationError:
        text = raw.get("unparsed") if isinstance(raw, dict) else None
        return cls.from_json({"unparsed": text if isinstance(text, str) else json.dumps(raw)})
