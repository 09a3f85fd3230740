"""Reading the stored messages a batch of send-backs is about (their headers; bodies stay in
the store). Always the store's own data, never the client's:

- a send-back that names its message by msgId alone: the store's look-up by msgId
  (``GET /v1/messages/{msgId}``, every copy) and the copy the group consumed (:func:`pick`);
- one ``GET /v1/commitlog/{offset}?body=false`` per message, a few in parallel;
- or, when items say where the consumer pulled them (``topic``, ``queueId``, ``queueOffset``),
  one pull per run of nearby queue offsets; a pulled message counts only if its CommitLog
  offset is the one the item names, else that item falls back to the GET.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, MessageNotFound, Unavailable
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_retry.policy import StoredHeaders
from clepsydra_retry.ports import MessageReader

logger = logging.getLogger(__name__)

PULL_MAX = 1000
"""The store's largest pull."""
MAX_SPARSENESS = 4
"""A run is pulled when it spans at most this many queue entries per wanted message."""


@dataclass(frozen=True, slots=True)
class Locator:
    """Which stored message a send-back is about, and optionally where it was pulled from.
    ``commitlog_offset`` None: named by its msgId alone (resolved by :meth:`read_many`)."""

    commitlog_offset: int | None
    msg_id: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None

    def describe(self) -> str:
        if self.commitlog_offset is None:
            return f"msgId {self.msg_id}"
        if self.msg_id is not None:
            return f"msgId {self.msg_id} (commitLogOffset {self.commitlog_offset})"
        return f"commitLogOffset {self.commitlog_offset}"

    @property
    def hint(self) -> tuple[str, int, int] | None:
        if self.topic is None or self.queue_id is None or self.queue_offset is None:
            return None
        return self.topic, self.queue_id, self.queue_offset


def pick(copies: Sequence[StoredMessage], locator: Locator,
         group: str) -> StoredMessage | None:
    """Of every stored copy of a message (oldest first), the one a send-back by msgId alone is
    about: the copy whose offsetMsgId it is; else the one where the consumer says it pulled
    it; else the newest one the group consumes (its ``%RETRY%`` topic or an ordinary topic).
    None when there is none."""
    wanted = (locator.msg_id or "").upper()
    for message in copies:
        if message.offset_msg_id.upper() == wanted:
            return message
    hint = locator.hint
    for message in copies:
        if hint is not None and (message.topic, message.queue_id,
                                 message.queue_offset) == hint:
            return message
    retry = naming.retry_topic(group)
    consumed = [m for m in copies
                if m.topic == retry or not naming.is_system_topic(m.topic)]
    return consumed[-1] if consumed else None


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """[(start, count)] pull windows over sorted queue offsets, each <= PULL_MAX entries and
    dense enough to be worth one pull."""
    runs: list[tuple[int, int]] = []
    start = prev = offsets[0]
    wanted = 1
    for offset in offsets[1:]:
        span = offset - start + 1
        if span > PULL_MAX or span > MAX_SPARSENESS * (wanted + 1):
            runs.append((start, prev - start + 1))
            start, wanted = offset, 0
        prev = offset
        wanted += 1
    runs.append((start, prev - start + 1))
    return runs


class HeaderReader:
    def __init__(self, store: MessageReader, parallel: int = 4,
                 pool: ThreadPoolExecutor | None = None) -> None:
        """``pool``: the threads that read several headers at once (shared by the readers of
        several store shards); its own ``parallel`` ones when None."""
        self._store = store
        self._pool = pool or ThreadPoolExecutor(max_workers=parallel,
                                                thread_name_prefix="retry-headers")

    def read_one(self, locator: Locator, group: str = "") -> StoredHeaders:
        """MessageNotFound (from the store) when nothing is there or the msgId differs."""
        if locator.commitlog_offset is None:
            chosen = pick(self._store.copies(locator.msg_id or ""), locator, group)
            if chosen is None:
                raise MessageNotFound(f"no copy of msgId {locator.msg_id} that group "
                                      f"{group!r} consumes")
            return StoredHeaders.of(chosen)
        headers = StoredHeaders.of(self._store.headers(locator.commitlog_offset))
        if locator.msg_id is not None and not headers.named_by(locator.msg_id):
            raise MessageNotFound(f"offset {locator.commitlog_offset} holds {headers.msg_id}")
        return headers

    def read_many(self, locators: Sequence[Locator], group: str = ""
                  ) -> list[StoredHeaders | MessageNotFound]:
        """Headers per locator, in order; a MessageNotFound value where there is none.
        Unavailable (the store did not answer) propagates."""
        out: list[StoredHeaders | MessageNotFound | None] = [None] * len(locators)
        for index, found in self._pulled(locators).items():
            out[index] = found
        for index, loc in enumerate(locators):
            if loc.commitlog_offset is None:
                out[index] = self.read_or_missing(loc, group)
        rest = [i for i, h in enumerate(out) if h is None]
        if len(rest) == 1:
            out[rest[0]] = self.read_or_missing(locators[rest[0]], group)
        elif rest:
            for i, result in zip(rest, self._pool.map(
                    lambda i: self.read_or_missing(locators[i], group), rest), strict=True):
                out[i] = result
        return [h for h in out if h is not None]

    def read_or_missing(self, locator: Locator,
                        group: str = "") -> StoredHeaders | MessageNotFound:
        try:
            return self.read_one(locator, group)
        except MessageNotFound as exc:
            return exc

    def _pulled(self, locators: Sequence[Locator]) -> dict[int, StoredHeaders]:
        """Index -> headers for hinted locators found by pulls."""
        wanted: dict[tuple[str, int], dict[int, list[int]]] = defaultdict(
            lambda: defaultdict(list))
        for index, loc in enumerate(locators):
            hint = loc.hint
            if loc.commitlog_offset is not None and hint is not None:
                wanted[(hint[0], hint[1])][hint[2]].append(index)
        found: dict[int, StoredHeaders] = {}
        for (topic, queue_id), by_offset in wanted.items():
            for start, count in _runs(sorted(by_offset)):
                try:
                    page = self._store.pull(topic, queue_id, start, count, with_body=False)
                except Unavailable:
                    raise
                except ClepsydraError as exc:  # unknown topic, bad queue, schedule topic...
                    logger.info("send-back hint pull failed topic=%s queue_id=%d "
                                "queue_offset=%d: %s", topic, queue_id, start, exc)
                    continue
                for message in page.messages:
                    for index in by_offset.get(message.queue_offset, ()):
                        loc = locators[index]
                        headers = StoredHeaders.of(message)
                        if headers.commitlog_offset == loc.commitlog_offset and (
                                loc.msg_id is None or headers.named_by(loc.msg_id)):
                            found[index] = headers
        return found
