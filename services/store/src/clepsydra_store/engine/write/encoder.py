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
_UNSEEN = object()
"""No topic yet (a request's topic that is not a str is refused all the same)."""
_CACHE_MAX_LEN = 256
"""The cache holds tags of at most this many bytes, and starts again when full (producers
choose them)."""

TargetFields = tuple[Target, bytes, Router]
"""A produce request's :class:`~clepsydra_store.engine.write.routing.Target`, the
``topic_field`` of its topic and its ``routing.router`` (kept per target by the preparer's
``routers``, built once)."""
ProducerBlock = tuple[bytes, tuple[int, ...], str | None]
"""(the producer's properties block, the key hash of its UNIQ_KEY if it gives one, that
UNIQ_KEY: None when absent, "" when given empty)."""


class BatchEncoder:
    """Encodes one batch of produce requests, in order, at ``now_ms``."""

    __slots__ = ("_ensure", "_now", "_preparer", "_targets")

    def __init__(self, preparer: Preparer, ensure: dict[str, int], now_ms: int) -> None:
        self._preparer = preparer
        self._ensure = ensure  # topics the batch creates (name -> queues), from placements
        self._now = now_ms
        self._targets: dict[str, TargetFields] = {}

    def prepare(self, requests: Sequence[PutRequest]) -> list[Prepared]:
        """The records of ``requests``, in order. Each request in one pass of this loop (the
        per-message work inline: DEC-one-routing-decision counts it); a request that does not
        pass a plain check leaves the loop, with nothing changed, for :meth:`Preparer.refuse`,
        which raises the error naming it."""
        rows: list[Prepared] = []
        add = rows.append
        targets = self._targets
        now = self._now
        config = self._preparer.config
        max_body = config.max_body_bytes
        max_size = config.segment_size_bytes
        # the last properties dict encoded and its ProducerBlock: the requests of a batch
        # often share one (the HTTP layer's trace context)
        last_props: object = None
        last_block: ProducerBlock = (b"", (), None)
        name: object = _UNSEEN  # the topic of the request before, and its TargetFields:
        target: Target  # a batch goes to one topic most often (one URL)
        for req in requests:
            if req.topic is not name:
                name = req.topic
                fields_of = targets.get(name)
                if fields_of is None:
                    fields_of = targets[name] = self._target(name)
                target, topic_raw, place = fields_of
            body = req.body
            if type(body) is not bytes or len(body) > max_body:
                break
            fields: list[bytes] = []  # the properties block (codec.encode_tail)
            given: str | None = None
            props = req.properties
            if props:
                if props is last_props:
                    block, uniq, given = last_block
                else:
                    if type(props) is not dict:
                        break
                    encoded = _producer_block(props)
                    if encoded is None:
                        break
                    last_props, last_block = props, encoded
                    block, uniq, given = encoded
                fields.append(block)
            code = 0
            tags = req.tags
            if tags:
                if type(tags) is not str:
                    break
                seen = _TAGS_SEEN.get(tags) or _tags(tags)
                if seen is None:
                    break
                block, code = seen
                fields.append(block)
            hashes: tuple[int, ...] = ()
            keys = req.keys
            if keys:
                if type(keys) is not str:
                    break
                try:
                    raw = keys.encode()
                except UnicodeEncodeError:
                    break
                fields.append(property_field(_KEYS, raw))
                # every whitespace character but the space is unprintable, so a printable text
                # without a space is one key to str.split(), and raw is its bytes
                if keys.isprintable() and " " not in keys:
                    hashes = (key_hash_of(raw),)
                else:
                    hashes = tuple(map(key_hash, keys.split()))
            level = req.delay_level
            if level and type(level) is not int:
                break
            deliver_at, delay = req.deliver_at, req.delay_ms
            if (deliver_at is not None and type(deliver_at) is not int) or (
                    delay is not None and type(delay) is not int):
                break
            # plain checks done: from here on the request is stored or raises what it breaks
            (topic, queue_id, kind, added, placed_code, delay_ms, mark, reconsume, creates,
             uniq_key) = place(req, now)
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
            add(prepare(body, topic, queue_id,
                        topic_raw if topic == name else
                        TOPIC_FIELDS.get(topic) or topic_field_of(topic),
                        fields, code if placed_code is None else placed_code, delay_ms,
                        crc32(body), req.flag, req.sys_flag, req.born_timestamp, req.born_host,
                        reconsume, hashes, mark, 0, uniq_key, max_size))
        else:
            return rows
        self._preparer.refuse(req, target, now)  # a plain check did not pass: name it

    def prepare_alone(self, request: PutRequest, ensure: dict[str, int]) -> list[Prepared]:
        """:meth:`prepare` of one request of several that are refused one by one (the poller's
        group, ``MessageStore.put_group``), the topics it creates put in ``ensure`` (dropped
        with it when it is refused). A topic is read once for all of them, as for a batch's
        messages: what is read of it (checks, queues, %RETRY% settings) is the topic's, not the
        request's (a %RETRY% topic to create stays one to create: each request that goes to it
        names it in its own ``ensure``)."""
        self._ensure = ensure
        return self.prepare((request,))

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
        fields = routers.get(target)
        if fields is None:
            if len(routers) >= _CACHE_MAX:
                routers.clear()
            fields = routers[target] = (target, topic_field(topic.encode()),
                                        router(target, preparer.levels,
                                               preparer.config.timer_max_delay_ms,
                                               preparer.ids.new))
        return fields


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
