"""The live consumers of each group, from their heartbeats (SPEC C1, C5).

In memory only: consumers heartbeat every few seconds, so after a restart the registry refills
within one heartbeat period. A consumer that has not heartbeated for ``expiry_ms`` is dropped.
All consumers of a group must subscribe alike (C5): the registry compares each consumer's
subscriptions and message model with the group's majority and reports the ones that differ.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from clepsydra_core.wire.groups import (
    BROADCASTING,
    CLUSTERING,
    MESSAGE_MODELS,
    ConsumerInfo,
    Mismatch,
    Subscription,
)

logger = logging.getLogger(__name__)

__all__ = ["BROADCASTING", "CLUSTERING", "MESSAGE_MODELS", "Consumer", "ConsumerRegistry",
           "GroupView"]

Signature = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Consumer:
    client_id: str
    subscriptions: dict[str, str]
    message_model: str
    last_heartbeat_ms: int
    first_seen_ms: int

    @property
    def signature(self) -> Signature:
        return self.message_model, tuple(sorted(self.subscriptions.items()))

    def info(self) -> ConsumerInfo:
        return ConsumerInfo(self.client_id, self.subscriptions, self.message_model,
                            self.last_heartbeat_ms)


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group's live consumers (sorted by client id) and whether they subscribe alike."""

    group: str
    consumers: list[Consumer]
    mismatches: list[Mismatch]

    @property
    def consistent(self) -> bool:
        return not self.mismatches

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.consumers]


class ConsumerRegistry:
    """Thread-safe registry of consumers by group, with expiry."""

    def __init__(self, expiry_ms: int, clock_ms: Callable[[], int] | None = None) -> None:
        self.expiry_ms = expiry_ms
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._groups: dict[str, dict[str, Consumer]] = {}
        self._lock = threading.Lock()

    def heartbeat(self, group: str, client_id: str, subscriptions: dict[str, str],
                  message_model: str) -> GroupView:
        """Register or refresh a consumer; the group's view after it."""
        now = self._clock_ms()
        with self._lock:
            members = self._groups.setdefault(group, {})
            previous = members.get(client_id)
            consumer = Consumer(client_id, dict(subscriptions), message_model, now,
                                previous.first_seen_ms if previous else now)
            members[client_id] = consumer
            view = self._view_locked(group, now)
        changed = previous is None or previous.signature != consumer.signature
        if changed and any(m.client_id == client_id for m in view.mismatches):
            logger.warning("consumer subscription mismatch group=%s client_id=%s "
                           "subscriptions=%s message_model=%s (SPEC C5)", group, client_id,
                           subscriptions, message_model)
        return view

    def view(self, group: str) -> GroupView:
        with self._lock:
            return self._view_locked(group, self._clock_ms())

    def unregister(self, group: str, client_id: str) -> bool:
        """Remove a consumer (its shutdown); False if it was not registered."""
        with self._lock:
            members = self._groups.get(group)
            if not members or client_id not in members:
                return False
            del members[client_id]
            if not members:
                del self._groups[group]
            return True

    def counts(self) -> dict[str, int]:
        """Live consumers per group."""
        now = self._clock_ms()
        with self._lock:
            for group in list(self._groups):
                self._expire_locked(group, now)
            return {group: len(members) for group, members in self._groups.items()}

    def _expire_locked(self, group: str, now: int) -> None:
        members = self._groups.get(group)
        if members is None:
            return
        for client_id, consumer in list(members.items()):
            if now - consumer.last_heartbeat_ms > self.expiry_ms:
                logger.info("consumer expired group=%s client_id=%s last_heartbeat_ms=%d",
                            group, client_id, consumer.last_heartbeat_ms)
                del members[client_id]
        if not members:
            del self._groups[group]

    def _view_locked(self, group: str, now: int) -> GroupView:
        self._expire_locked(group, now)
        consumers = sorted(self._groups.get(group, {}).values(), key=lambda c: c.client_id)
        return GroupView(group, consumers, _mismatches(consumers))


def _mismatches(consumers: list[Consumer]) -> list[Mismatch]:
    """C5: the consumers whose subscriptions or message model differ from the group's
    majority (ties go to the longest-registered consumer's)."""
    if len(consumers) < 2:
        return []
    counts = Counter(c.signature for c in consumers)
    if len(counts) == 1:
        return []
    oldest_first = sorted(consumers, key=lambda c: (c.first_seen_ms, c.client_id))
    reference = max(oldest_first, key=lambda c: counts[c.signature])
    expected_model, expected_subs = reference.signature
    out = []
    for c in consumers:
        if c.signature == reference.signature:
            continue
        out.append(Mismatch(
            c.client_id, c.subscriptions, c.message_model,
            Subscription(dict(expected_subs), expected_model),
            f"consumer {c.client_id!r} subscribes differently from the group's other "
            f"consumers (e.g. {reference.client_id!r}) (SPEC C5)"))
    return out
