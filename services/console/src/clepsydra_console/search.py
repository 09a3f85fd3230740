"""The search box (``/?q=``): a msgId or offsetMsgId, a key (in one topic, or in every topic up
to a bound), or a trace id (no index holds trace ids: the newest messages of each queue are
read, up to a bound). Every answer says what it looked at and, when it could not look
everywhere, why (DEC-console-honest-lists)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_client.admin import AdminClient
from clepsydra_console.views import Query
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError, NotFound
from clepsydra_core.telemetry import trace_id_of
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.messages import MAX_PULL, PullAnswer, StoredMessage


@dataclass(frozen=True, slots=True)
class Match:
    msg_id: str
    topic: str
    keys: str
    store_timestamp: int


@dataclass(slots=True)
class Found:
    """What a search found: ``matches`` (distinct messages), what it ``looked_at``, the
    ``errors`` of look-ups that failed, and ``partial`` when it could not look everywhere."""

    matches: list[Match] = field(default_factory=list)
    looked_at: str = ""
    errors: list[str] = field(default_factory=list)
    partial: str | None = None

    def add(self, m: StoredMessage) -> None:
        if all(x.msg_id != m.msg_id for x in self.matches):
            self.matches.append(Match(m.msg_id, m.topic, m.keys, m.store_timestamp))


def _failed(found: Found, what: str, exc: ClepsydraError) -> None:
    found.errors.append(f"{what}: {exc.message}")


def by_id(admin: AdminClient, query: Query, found: Found) -> None:
    try:
        copies = admin.message_copies(query.text)
    except NotFound:
        return
    except ClepsydraError as exc:
        _failed(found, f"msgId {query.text}", exc)
        return
    m = copies[-1]
    found.matches.append(Match(m.msg_id, m.topic, " ".join(m.keys), m.store_timestamp))


def _topics(admin: AdminClient, topic: str | None, most: int, found: Found) -> list[str]:
    if topic:
        return [topic]
    try:
        names = [t.name for t in admin.topics() if not t.system]
    except ClepsydraError as exc:
        _failed(found, "the topic list", exc)
        return []
    if len(names) > most:
        found.partial = (f"looked in the first {most} of {len(names)} topics "
                         "(CLEPSYDRA_CONSOLE_SEARCH_TOPICS); name a topic to look in it")
    return names[:most]


def by_key(admin: AdminClient, key: str, topic: str | None, most_topics: int,
           found: Found) -> None:
    names = _topics(admin, topic, most_topics, found)
    for name in names:
        try:
            for m in admin.messages_by_key(name, key):
                found.matches.append(Match(m.msg_id, m.topic, " ".join(m.keys),
                                           m.store_timestamp))
        except NotFound:
            continue
        except ClepsydraError as exc:
            _failed(found, f"key {key} in {name}", exc)
    _parked_by_key(admin, key, topic, found)
    found.looked_at = f"key {key!r} in " + (f"topic {topic}" if topic
                                          else f"{len(names)} topic(s)")
    found.looked_at += " and among the pending level messages (not the pending deliverAt ones)"


def _parked_by_key(admin: AdminClient, key: str, topic: str | None, found: Found) -> None:
    """Pending level messages (parked in the schedule topic, S1) with the key, for ``topic``
    when one is given; the store's look-up by key does not read the timer log, so a pending
    ``deliverAt`` message is found by key only once delivered (by msgId always)."""
    try:
        parked = admin.messages_by_key(naming.SCHEDULE_TOPIC, key)
    except NotFound:
        return
    except ClepsydraError as exc:
        _failed(found, f"key {key} among the pending level messages", exc)
        return
    for m in parked:
        real = m.properties.get(P.REAL_TOPIC, "")
        if (topic is None or real == topic) and all(x.msg_id != m.msg_id
                                                    for x in found.matches):
            found.matches.append(Match(m.msg_id, real, " ".join(m.keys), m.store_timestamp))


def by_trace(admin: AdminClient, trace: str, topic: str | None, most_topics: int,
             per_queue: int, found: Found) -> None:
    names = _topics(admin, topic, most_topics, found)
    queues = 0
    for name in names:
        try:
            info = admin.topic(name)
        except ClepsydraError as exc:
            _failed(found, f"topic {name}", exc)
            continue
        for q in info.queues:
            queues += 1
            start = max(q.min_offset, q.max_offset - per_queue)
            while start < q.max_offset:
                try:
                    page = read_answer(PullAnswer, admin.store.get(
                        admin.store.path("/v1/topics/{}/queues/{}/messages", name, q.queue_id),
                        {"offset": start, "max": min(MAX_PULL, q.max_offset - start),
                         "body": "false"}))
                except ClepsydraError as exc:
                    _failed(found, f"{name} queue {q.queue_id}", exc)
                    break
                for m in page.messages:
                    if trace_id_of(m.properties) == trace:
                        found.add(m)
                if page.next_offset <= start:
                    break
                start = page.next_offset
    found.looked_at = (f"trace id {trace} in the newest {per_queue} messages of {queues} "
                       f"queue(s)")
    found.partial = (found.partial or "") + (
        ("; " if found.partial else "") + f"no index holds trace ids: only the newest "
        f"{per_queue} messages of each queue were read (CLEPSYDRA_CONSOLE_SCAN_MESSAGES)")
