"""The produce encoder: produce requests encoded straight into records.

Per request, in one pass with no intermediate objects: the plain checks of P1 (body, the
producer's properties, tags, keys), the placement (``routing.router``: S1, T1, R10, L2, which
raises what it refuses) and the record's tail (the codec's ``property_field`` and
``prepare``), with per-batch caches (a properties dict shared by several requests is encoded
once; tags, few and repeated, are cached), for every kind of message: plain, parked at a
level, a timer, a %RETRY% send, dead-lettered. A request that does not pass a plain check goes
to :meth:`Preparer.refuse <clepsydra_store.engine.write.preparer.Preparer.refuse>`, which
names the refusal (the same errors in the same order); this encoder changes nothing before its
checks are done. Its records equal ``Prepared.build``'s of the same properties
(tests/unit/store/test_codec.py holds them to a reference encoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from zlib import crc32

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.properties import name_field
from clepsydra_core.records import tags_code_of
from clepsydra_core.retry_rules import DEFAULT_MAX_RECONSUME_TIMES
from clepsydra_core.validation import (
    MAX_PROPERTIES_BYTES,
    SETTABLE_NAME_FIELDS,
    settable_name_field,
)
from clepsydra_store.engine.index.key_index import key_hash, key_hash_of
from clepsydra_store.engine.types import PutRequest
from clepsydra_store.engine.write.codec import (
    TOPIC_FIELDS,
    Prepared,
    prepare,
    property_field,
    topic_field,
    topic_field_of,
)
from clepsydra_store.engine.write.preparer import Preparer
from clepsydra_store.engine.write.routing import Kind, RetryTarget, Router, Target, router

_TAGS_SEEN: dict[str, tuple[bytes, int]] = {}
"""tags -> (the encoded TAGS property, tagsCode)."""
_LEVEL_SEEN: dict[tuple[tuple[str, str], ...], bytes] = {}
"""The properties a park at a level adds -> their encoded fields."""
_CACHE_MAX = 4096
_CACHE_MAX_LEN = 256
"""The cache holds tags of at most this many bytes, and starts again when full (producers
choose them)."""

TargetFields = tuple[Target, bytes, Router]
"""A produce request's :class:`~clepsydra_store.engine.write.routing.Target`, the
``topic_field`` of its topic and its ``routing.router`` (kept per target by the preparer)."""
ProducerBlock = tuple[bytes, tuple[int, ...], str | None]
"""(the producer's properties block, the key hash of its UNIQ_KEY if it gives one, that
UNIQ_KEY: None when absent, "" when given empty)."""


class BatchEncoder:
    """Encodes one batch of produce requests, in order, at ``now_ms``."""

    __slots__ = ("_encoded", "_ensure", "_max_body", "_max_size", "_now", "_preparer",
                 "_props", "_targets")

    def __init__(self, preparer: Preparer, ensure: dict[str, int], now_ms: int) -> None:
        self._preparer = preparer
        self._ensure = ensure
        """Topics the batch creates (name -> queues), filled from the placements."""
        self._now = now_ms
        self._targets: dict[str, TargetFields] = {}
        self._props: object = None
        self._encoded: ProducerBlock = (b"", (), None)
        """The last properties dict encoded and its :data:`ProducerBlock`: the requests of a
        batch often share one (the HTTP layer's trace context)."""
        config = preparer.config
        self._max_body = config.max_body_bytes
        self._max_size = config.segment_size_bytes

    def prepare(self, requests: Sequence[PutRequest]) -> list[Prepared]:
        rows: list[Prepared] = []
        add = rows.append
        targets = self._targets
        encode = self._encode
        for req in requests:
            target = targets.get(req.topic)
            if target is None:
                target = targets[req.topic] = self._target(req.topic)
            row = encode(req, target)
            if row is None:
                self._preparer.refuse(req, target[0], self._now)
            else:
                add(row)
        return rows

    def _target(self, topic: str) -> TargetFields:
        """The topic's :data:`TargetFields`; raises what the topic is refused with (P1, S3, a
        topic that does not exist, R2)."""
        preparer = self._preparer
        queues, create_retry = preparer.check_topic(topic, self._ensure)
        preparer.check_writable()
        retry = None
        if create_retry or naming.is_retry_topic(topic):
            group = naming.group_of_retry_topic(topic) or ""
            settings = preparer.group_settings.get(group)
            retry = RetryTarget(group, settings.retry_max_times if settings is not None
                                else DEFAULT_MAX_RECONSUME_TIMES, create_retry)
        target: Target = tuple.__new__(Target, (topic, queues, preparer.round_robin(topic), retry))
        routers = preparer.routers  # one per target (DEC-one-routing-decision), built once
        place = routers.get(target)
        if place is None:
            if len(routers) >= _CACHE_MAX:
                routers.clear()
            place = routers[target] = router(target, preparer.levels,
                                             preparer.config.timer_max_delay_ms,
                                             preparer.ids.new)
        return target, topic_field(topic.encode()), place

    def _encode(self, req: PutRequest, target: TargetFields) -> Prepared | None:
        """The record of a request; None, with nothing changed, when a plain check does not
        pass (:meth:`Preparer.refuse` then raises the right error)."""
        body = req.body
        if type(body) is not bytes or len(body) > self._max_body:
            return None
        fields: list[bytes] = []  # the properties block (codec.encode_tail)
        given: str | None = None
        props = req.properties
        if props:
            if props is self._props:
                block, uniq, given = self._encoded
            else:
                if type(props) is not dict:
                    return None
                encoded = _producer_block(props)
                if encoded is None:
                    return None
                self._props, self._encoded = props, encoded
                block, uniq, given = encoded
            fields.append(block)
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
        level = req.delay_level
        if level and type(level) is not int:
            return None
        deliver_at, delay = req.deliver_at, req.delay_ms
        if (deliver_at is not None and type(deliver_at) is not int) or (
                delay is not None and type(delay) is not int):
            return None
        # plain checks done: from here on the request is stored or raises what it breaks
        (topic, queue_id, kind, added, placed_code, delay_ms, mark, reconsume, creates,
         uniq_key) = target[2](req, self._now)
        if given:
            hashes += uniq
        else:  # the store gave it one
            raw = uniq_key.encode()
            if given is None:  # right after the producer's properties, where a dict has it
                fields.insert(1 if props else 0, property_field(_UNIQ_KEY, raw))
            else:  # given empty: in its place
                encoded = _producer_block({**props, P.UNIQ_KEY: uniq_key})
                assert encoded is not None
                fields[0] = encoded[0]
            hashes += (key_hash_of(raw),)
        if added:
            if kind is _LEVEL:  # few and repeated (topic, queue, level): encoded once
                fields.append(_LEVEL_SEEN.get(added) or _level_fields(added))
            else:
                for name, value in added:
                    fields.append(property_field(_NAMES[name], value.encode()))
        if creates:
            self._ensure.update(creates)
        return prepare(body, topic, queue_id,
                       target[1] if topic == req.topic else
                       TOPIC_FIELDS.get(topic) or topic_field_of(topic),
                       fields, code if placed_code is None else placed_code, delay_ms,
                       crc32(body), req.flag, req.sys_flag, req.born_timestamp, req.born_host,
                       reconsume, hashes, mark, 0, uniq_key, self._max_size)

def _producer_block(props: dict[str, str]) -> ProducerBlock | None:
    """The :data:`ProducerBlock` of a producer's properties that ``validate_properties`` passes
    (P1); None for any others."""
    fields: list[bytes] = []
    known = SETTABLE_NAME_FIELDS.get
    for name, value in props.items():
        prefix = known(name) or settable_name_field(name)
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
    return block, (key_hash(uniq),) if uniq else (), uniq


def _level_fields(added: tuple[tuple[str, str], ...]) -> bytes:
    """The properties a park at a level adds (S1), encoded; cached as the tags are."""
    block = b"".join(property_field(_NAMES[name], value.encode()) for name, value in added)
    if len(_LEVEL_SEEN) >= _CACHE_MAX:
        _LEVEL_SEEN.clear()
    _LEVEL_SEEN[added] = block
    return block


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
_NAMES = {name: name_field(name) for name in (P.REAL_TOPIC, P.REAL_QID, P.DELAY, P.DELIVER_AT,
                                               P.DELAY_MS, P.DLQ_REASON)}
"""The ``name_field`` of every property a placement adds."""
_LEVEL = Kind.LEVEL
