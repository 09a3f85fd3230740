"""The produce encoder (issue 13.3): produce requests encoded straight into records.

The checks (P1 body and properties, L2, T1's cap, R10's counts) and the record tail are done
in one pass with no intermediate objects, plus per-batch caches (a properties dict shared by
several requests is encoded once; tags, few and repeated, are cached), for every kind of
message: plain, parked at a level (S1), a timer (T1), a %RETRY% send (R10: dead-lettered at
its max). A request that does not pass a plain check goes to :meth:`Preparer.put`, which names
the refusal (the same errors in the same order); this encoder changes nothing before its checks
are done. The bytes are the codec's (``codec.encode_tail`` over ``codec.property_field``s, the
encoder of every record the store writes), so its records equal ``Prepared.build``'s
(tests/unit/store/test_codec.py holds them to a reference encoding).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from zlib import crc32

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import ValidationError
from clepsydra_core.properties import name_field
from clepsydra_core.records import (
    HEADER_SIZE,
    MIN_END_MARKER,
    is_transaction_prepared_or_rollback,
    tags_code_of,
)
from clepsydra_core.retry_rules import DEFAULT_MAX_RECONSUME_TIMES
from clepsydra_core.validation import MAX_PROPERTIES_BYTES, validate_topic_name
from clepsydra_store.engine.index.dispatcher import PARKED_TIMER, Mark
from clepsydra_store.engine.index.key_index import key_hash, key_hash_of
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.engine.write.codec import (
    Prepared,
    encode_tail,
    property_field,
    too_large,
    topic_field,
)
from clepsydra_store.engine.write.preparer import DLQ_REASON_MAX_RECONSUME, Preparer, retry_counts

_NAMES: dict[str, bytes] = {}
"""Names a producer may set (P1) seen so far -> their encoded ``u16 length | name``."""
_TAGS_SEEN: dict[str, tuple[bytes, int]] = {}
"""tags -> (the encoded TAGS property, tagsCode)."""
_CACHE_MAX = 4096
_CACHE_MAX_LEN = 256
"""The caches hold entries of at most this many bytes, and start again when full (producers
choose the names and tags)."""

RetryInfo = tuple[str, int, bool]
"""(group, its max reconsume times, auto-create the topic) of a %RETRY% topic (R3, R10)."""
TopicInfo = tuple[int, bytes, Iterator[int], RetryInfo | None]
"""(queues, encoded ``u8 length | topic``, round-robin counter, RetryInfo or None) of a
topic."""


class BatchEncoder:
    """Prepares one batch (``Preparer.put`` for each request, in order)."""

    __slots__ = ("_checked", "_encoded", "_ensure", "_max_body", "_max_level", "_max_size",
                 "_preparer", "_props", "_topics")

    def __init__(self, preparer: Preparer, ensure: dict[str, int]) -> None:
        self._preparer = preparer
        self._ensure = ensure
        self._checked: dict[str, tuple[int, bool]] = {}
        self._topics: dict[str, TopicInfo | None] = {}
        self._props: object = None
        self._encoded: tuple[bytes, tuple[int, ...], str] = (b"", (), "")
        """The last properties dict encoded, and (its encoding, its UNIQ_KEY's key hash, its
        UNIQ_KEY): the requests of a batch often share one (the HTTP layer's trace
        context)."""
        config = preparer.config
        self._max_body = config.max_body_bytes
        self._max_size = config.segment_size_bytes - MIN_END_MARKER
        self._max_level = preparer.levels.max_level

    def prepare(self, requests: Sequence[PutRequest]) -> list[Prepared]:
        rows: list[Prepared] = []
        add = rows.append
        topics = self._topics
        encode = self._encode
        for req in requests:
            topic = req.topic
            info = topics.get(topic)
            if info is None and topic not in topics:
                info = topics[topic] = self._topic(topic)
            row = encode(req, info) if info is not None else None
            add(row if row is not None else  # put() names the refusal
                self._preparer.put(req, self._ensure, self._checked))
        return rows

    def _topic(self, topic: str) -> TopicInfo | None:
        """The topic's TopicInfo; raises what put() raises for it."""
        preparer = self._preparer
        hit = self._checked.get(topic)
        if hit is None:
            hit = preparer.check_topic(topic, self._ensure)
            preparer.check_writable()
            self._checked[topic] = hit
        queues, create_retry = hit
        retry: RetryInfo | None = None
        if create_retry or naming.is_retry_topic(topic):
            group = naming.group_of_retry_topic(topic) or ""
            settings = preparer.group_settings(group)
            retry = (group, settings.retry_max_times if settings is not None
                     else DEFAULT_MAX_RECONSUME_TIMES, create_retry)
        return queues, topic_field(topic.encode()), preparer.round_robin(topic), retry

    def _encode(self, req: PutRequest, info: TopicInfo) -> Prepared | None:
        """put() of a request; None, with nothing changed, when a check does not pass plainly
        (put() then raises the right error)."""
        body = req.body
        if type(body) is not bytes or len(body) > self._max_body:
            return None
        queues, topic_raw, counter, retry = info
        fields: list[bytes] = []  # the properties block (codec.encode_tail)
        uniq: tuple[int, ...] = ()
        uniq_key = ""
        props = req.properties
        if props:
            if props is self._props:
                block, uniq, uniq_key = self._encoded
            else:
                if type(props) is not dict:
                    return None
                if props.get(P.UNIQ_KEY) == "":  # given empty: a new one in its place (put())
                    encoded = _producer_block({**props, P.UNIQ_KEY: self._preparer.ids.new()})
                    if encoded is None:
                        return None
                else:
                    encoded = _producer_block(props)
                    if encoded is None:
                        return None
                    self._props, self._encoded = props, encoded
                block, uniq, uniq_key = encoded
            fields.append(block)
        new_uniq = not uniq_key  # issue 20.4: the store gives it one (as Preparer.put)
        code = 0
        tags = req.tags
        if tags:
            if type(tags) is not str:
                return None
            seen = _TAGS_SEEN.get(tags) or _tags(tags)
            if seen is None:
                return None
            block, code = seen
            fields.append(block)
        hashes: tuple[int, ...] = ()
        keys = req.keys
        if keys:
            if type(keys) is not str:
                return None
            try:
                raw = keys.encode()
            except UnicodeEncodeError:
                return None
            fields.append(property_field(_KEYS, raw))
            # every whitespace character but the space is unprintable, so a printable text
            # without a space is one key to str.split(), and raw is its bytes
            if keys.isprintable() and " " not in keys:
                hashes = (key_hash_of(raw),)
            else:
                hashes = tuple(map(key_hash, keys.split()))
        if uniq:
            hashes += uniq
        level = req.delay_level
        if level:
            if type(level) is not int or level < 0:
                return None
            level = min(level, self._max_level)
        deliver_at, delay = req.deliver_at, req.delay_ms
        timer = deliver_at is not None or delay is not None
        if timer:  # T1: the cap (put() names it)
            if (deliver_at is not None and type(deliver_at) is not int) or (
                    delay is not None and type(delay) is not int):
                return None
            try:
                self._preparer.timer_target(deliver_at, delay)
            except ValidationError:
                return None
        reconsume = req.reconsume_times
        dlq = None
        if retry is not None:  # R10
            try:
                reconsume, max_times = retry_counts(props or {}, reconsume, retry[1])
                if reconsume >= max_times and not level and not timer:
                    dlq = validate_topic_name(naming.dlq_topic(retry[0]))
            except ValidationError:
                return None
        # checks done: from here on the request is stored or raises what put() raises
        if new_uniq:
            uniq_key = self._preparer.ids.new()
            raw = uniq_key.encode()
            # right after the producer's properties, where put()'s dict has it
            fields.insert(1 if props else 0, property_field(_UNIQ_KEY, raw))
            hashes += (key_hash_of(raw),)
        topic = req.topic
        delay_ms = 0
        mark: Mark | None = None
        if dlq is not None:  # R10: dead-lettered, queue 0
            if self._preparer.queue_count(dlq, self._ensure) is None:
                self._ensure[dlq] = 1
            fields.append(_DLQ_REASON_FIELD)
            topic_raw = topic_field(dlq.encode())
            topic, queue_id = dlq, 0
        else:
            asked = req.queue_id
            queue_id = (next(counter) % queues if asked is None
                        else self._preparer.pick_queue(topic, queues, asked))
            if retry is not None and retry[2]:
                self._ensure[topic] = queues
            if (timer or level) and not is_transaction_prepared_or_rollback(req.sys_flag):
                if timer:  # T1, as Preparer._park_timer
                    if deliver_at is not None:
                        name, value, code, delay_ms = (_DELIVER_AT, str(deliver_at),
                                                       deliver_at, -1)
                    else:
                        name, value, code, delay_ms = _DELAY_MS, str(delay or 0), 0, delay or -1
                    topic_out, queue_out = naming.TIMER_TOPIC, naming.TIMER_LOG_QUEUE
                    mark = (PARKED_TIMER, 0)
                    topic_raw = _TIMER_TOPIC_RAW
                else:  # S1, as Preparer._park
                    levels = self._preparer.levels
                    name, value = _DELAY, str(level)
                    topic_out, queue_out = naming.SCHEDULE_TOPIC, levels.queue_id(level)
                    delay_ms = levels.delay_ms(level)
                    if delay_ms:
                        code = 0
                    topic_raw = _SCHEDULE_TOPIC_RAW
                fields += (property_field(_REAL_TOPIC, topic.encode()),
                           property_field(_REAL_QID, str(queue_id).encode()),
                           property_field(name, value.encode()))
                topic, queue_id = topic_out, queue_out
        tail = encode_tail(body, topic_raw, fields)
        size = HEADER_SIZE + len(tail)
        if size > self._max_size:
            raise too_large(size, self._max_size + MIN_END_MARKER)
        return tuple.__new__(Prepared, (
            size, topic, queue_id, code, delay_ms, crc32(body), req.flag, req.sys_flag,
            req.born_timestamp, req.born_host, reconsume, len(body), tail, hashes, mark, 0,
            uniq_key))


def _producer_block(props: dict[str, str]) -> tuple[bytes, tuple[int, ...], str] | None:
    """(their properties block: codec.property_field's, key hash of UNIQ_KEY if set, UNIQ_KEY
    or "") of a producer's properties that validate_properties passes (P1); None for any
    others."""
    fields: list[bytes] = []
    for name, value in props.items():
        prefix = _NAMES.get(name) or _settable_name(name)
        if prefix is None or type(value) is not str:
            return None
        try:
            raw = value.encode()
        except UnicodeEncodeError:
            return None
        fields.append(property_field(prefix, raw))
    block = b"".join(fields)
    if len(block) > MAX_PROPERTIES_BYTES:  # validate_properties counts name + value + 6 each
        return None
    uniq = props.get(P.UNIQ_KEY)
    return block, (key_hash(uniq),) if uniq else (), uniq or ""


def settable_properties(props: dict[str, str]) -> bool:
    """True when validate_properties(props) passes (P1: names a producer may set, text values,
    size); False for anything else (validate_properties then names the problem)."""
    total = 0
    for name, value in props.items():
        prefix = _NAMES.get(name) or _settable_name(name)
        if prefix is None or type(value) is not str:
            return False
        if value.isascii():
            total += len(prefix) + 4 + len(value)
            continue
        try:
            total += len(prefix) + 4 + len(value.encode())
        except UnicodeEncodeError:
            return False
    return total <= MAX_PROPERTIES_BYTES


def _settable_name(name: str) -> bytes | None:
    """The encoded name of a property a producer may set (P1, as validate_properties), cached;
    None for any other name."""
    if not isinstance(name, str) or not name or (name in P.RESERVED
                                                 and name not in P.CLIENT_SETTABLE):
        return None
    try:
        raw = name.encode()
    except UnicodeEncodeError:
        return None
    if len(raw) > 0xFFFF:
        return None
    prefix = name_field(name)
    if len(raw) <= _CACHE_MAX_LEN:
        if len(_NAMES) >= _CACHE_MAX:
            _NAMES.clear()
        _NAMES[name] = prefix
    return prefix


def _tags(tags: str) -> tuple[bytes, int] | None:
    """(the encoded TAGS property, tagsCode) of a tags string, None when it is not valid text;
    cached when short."""
    try:
        raw = tags.encode()
    except UnicodeEncodeError:
        return None
    seen = property_field(_TAGS, raw), tags_code_of(raw)
    if len(raw) <= _CACHE_MAX_LEN:
        if len(_TAGS_SEEN) >= _CACHE_MAX:
            _TAGS_SEEN.clear()
        _TAGS_SEEN[tags] = seen
    return seen


_TAGS = name_field(P.TAGS)
_KEYS = name_field(P.KEYS)
_UNIQ_KEY = name_field(P.UNIQ_KEY)
_REAL_TOPIC = name_field(P.REAL_TOPIC)
_REAL_QID = name_field(P.REAL_QID)
_DELAY = name_field(P.DELAY)
_DELIVER_AT = name_field(P.DELIVER_AT)
_DELAY_MS = name_field(P.DELAY_MS)
_DLQ_REASON_FIELD = property_field(name_field(P.DLQ_REASON), DLQ_REASON_MAX_RECONSUME.encode())
_TIMER_TOPIC_RAW = topic_field(naming.TIMER_TOPIC.encode())
_SCHEDULE_TOPIC_RAW = topic_field(naming.SCHEDULE_TOPIC.encode())
