"""The search box (``/?q=``): a msgId or offsetMsgId, a key (in one topic, or in every topic up
to a bound), or a trace id (no index holds trace ids: the newest messages of each queue are
read, up to a bound). Every answer says what it looked at and, when it could not look
everywhere, why (DEC-console-honest-lists)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_client.admin import AdminClient
from clepsydra_console.shards import partial_text
from clepsydra_console.views import Query
from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ClepsydraError, NotFound
from clepsydra_core.properties import trace_id_of
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.messages import MAX_PULL, MessageList, PullAnswer, StoredMessage


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
    unreachable: list[int] = field(default_factory=list)
    """Store shards that did not answer a look-up (DEC-console-shards)."""

    def add(self, m: StoredMessage) -> None:
        if all(x.msg_id != m.msg_id for x in self.matches):
            self.matches.append(Match(m.msg_id, m.topic, m.keys, m.store_timestamp))


def _failed(found: Found, what: str, exc: ClepsydraError) -> None:
    found.errors.append(f"{what}: {exc.message}")


def _unreachable(found: Found, shards: list[int] | None) -> None:
    """A look-up that some store shards did not answer (DEC-console-shards) says so."""
    if shards:
        found.unreachable = sorted(set(found.unreachable) | set(shards))
        text = partial_text(shards, "matches") or ""
        found.partial = f"{found.partial}; {text}" if found.partial else text


def _look_up(admin: AdminClient, params: dict[str, str] | None, msg_id: str | None,
             found: Found) -> list[StoredMessage]:
    """``GET /v1/messages`` (by key) or ``/v1/messages/{msgId}``: the copies, the shards that
    did not answer noted in ``found`` (raises the store's error)."""
    path = admin.store.path("/v1/messages/{}", msg_id) if msg_id else "/v1/messages"
    answer = read_answer(MessageList, admin.store.get(path, params), "message look-up")
    _unreachable(found, answer.unreachable)
    return answer.messages


def by_id(admin: AdminClient, query: Query, found: Found) -> None:
    try:
        copies = _look_up(admin, None, query.text, found)
    except NotFound:
        return
    except ClepsydraError as exc:
        _failed(found, f"msgId {query.text}", exc)
        return
    if copies:
        found.add(copies[-1])


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
            for m in _look_up(admin, {"topic": name, "key": key}, None, found):
                found.matches.append(Match(m.msg_id, m.topic, m.keys, m.store_timestamp))
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
        parked = _look_up(admin, {"topic": naming.SCHEDULE_TOPIC, "key": key}, None, found)
    except NotFound:
        return
    except ClepsydraError as exc:
        _failed(found, f"key {key} among the pending level messages", exc)
        return
    for m in parked:
        real = m.properties.get(P.REAL_TOPIC, "")
        if (topic is None or real == topic) and all(x.msg_id != m.msg_id
                                                    for x in found.matches):
            found.matches.append(Match(m.msg_id, real, m.keys, m.store_timestamp))


def _queues(admin: AdminClient, topic: str,
            found: Found) -> list[tuple[int | None, int, int, int]]:
    """(shard or None with one store, queueId, min offset, max offset) of each queue of
    ``topic``; with more than one store shard each from its shard, those of a shard that did
    not answer left out and noted."""
    if not admin.clustered:
        return [(None, q.queue_id, q.min_offset, q.max_offset)
                for q in admin.topic(topic).queues]
    route = admin.route(topic)
    _unreachable(found, route.unreachable)
    return [(q.shard, q.queue_id, q.min_offset or 0, q.max_offset or 0)
            for q in route.queues if q.reachable]


def by_trace(admin: AdminClient, trace: str, topic: str | None, most_topics: int,
             per_queue: int, found: Found) -> None:
    names = _topics(admin, topic, most_topics, found)
    queues = 0
    for name in names:
        try:
            queues_of = _queues(admin, name, found)
        except ClepsydraError as exc:
            _failed(found, f"topic {name}", exc)
            continue
        for shard, queue_id, low, high in queues_of:
            queues += 1
            http = admin.router.client(shard) if shard is not None else admin.store
            start = max(low, high - per_queue)
            while start < high:
                try:
                    page = read_answer(PullAnswer, http.get(
                        http.path("/v1/topics/{}/queues/{}/messages", name, queue_id),
                        {"offset": start, "max": min(MAX_PULL, high - start),
                         "body": "false"}))
                except ClepsydraError as exc:
                    _failed(found, f"{name} queue {queue_id}" + (
                        f" on shard {shard}" if shard is not None else ""), exc)
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
