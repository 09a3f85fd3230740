"""Input rules for produce requests (SPEC P1, L2, S3). Each failure is a ValidationError
(or Forbidden) naming the rule; callers validate a whole request before storing any of it."""

from __future__ import annotations

import re

from clepsydra_core import naming
from clepsydra_core import properties as P
from clepsydra_core.errors import BodyTooLarge, Forbidden, ValidationError

TOPIC_MAX_LEN = 127
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_PROPERTIES_BYTES = 64 * 1024
_TOPIC = re.compile(r"[A-Za-z0-9_\-|%]+")
_NAME_CHARS = "A-Za-z0-9_|"  # and "-", kept last in a character class
TOPIC_PATTERN = (f"^(?:[{_NAME_CHARS}-]+|(?:"
                 + "|".join(re.escape(p).replace("\\%", "%") for p in naming.SYSTEM_PREFIXES)
                 + f")[{_NAME_CHARS}%-]*)$")
"""P1 as a regular expression (ECMA-262 and Python alike; the OpenAPI documents carry it): a
plain name, or a system prefix followed by name characters and ``%``. With
:data:`TOPIC_MAX_LEN`, it accepts what :func:`validate_topic_name` accepts."""
PLAIN_NAME = f"[{_NAME_CHARS}-]{{1,{TOPIC_MAX_LEN}}}"
"""A plain topic name (no system prefix, so no ``%``) as a regular expression fragment."""
GROUP_MAX_LEN = TOPIC_MAX_LEN - len(naming.RETRY_PREFIX)
"""A group names its retry topic ``%RETRY%<group>``, which must stay within P1's length."""
GROUP_PATTERN = f"^[{_NAME_CHARS}-]+$"
"""Group names: the topic characters without ``%`` (:func:`validate_group_name`)."""


def validate_topic_name(topic: object) -> str:
    """P1: letters, digits, ``_ - | %``, at most 127 characters; ``%`` only in system names."""
    if not isinstance(topic, str) or not topic:
        raise ValidationError("topic must be a non-empty string", rule="P1", code="INVALID_TOPIC")
    if len(topic) > TOPIC_MAX_LEN:
        raise ValidationError(f"topic is {len(topic)} characters, at most {TOPIC_MAX_LEN}",
                              rule="P1", code="INVALID_TOPIC")
    if not _TOPIC.fullmatch(topic):  # fullmatch: `$` would let a trailing newline in
        raise ValidationError(f"topic {topic!r} has characters outside letters, digits, _ - | %",
                              rule="P1", code="INVALID_TOPIC")
    if "%" in topic and not naming.is_system_topic(topic):
        raise ValidationError(f"topic {topic!r}: % is reserved for system prefixes",
                              rule="P1", code="INVALID_TOPIC")
    return topic


def validate_group_name(group: object) -> str:
    """Group names follow the topic rules minus ``%`` (a group names its retry topic)."""
    if not isinstance(group, str) or not group or "%" in group:
        raise ValidationError(f"invalid group name {group!r}", rule="P1", code="INVALID_GROUP")
    validate_topic_name(naming.retry_topic(group))
    return group


def check_producible(topic: str) -> None:
    """S3: clients cannot produce to system topics; `%RETRY%` topics accept plain sends
    (the R9 fallback and R10)."""
    if naming.is_system_topic(topic) and not naming.is_retry_topic(topic):
        raise Forbidden(f"cannot produce to system topic {topic!r}", rule="S3")


def check_consumable(topic: str) -> None:
    """S3: the schedule and timer topics are never pulled by consumers."""
    if topic in (naming.SCHEDULE_TOPIC, naming.TIMER_TOPIC):
        raise Forbidden(f"{topic} cannot be pulled by consumers", rule="S3")


def validate_body(body: bytes, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    if len(body) > max_body_bytes:
        raise BodyTooLarge(f"body is {len(body)} bytes, at most {max_body_bytes}", rule="P1")
    return body


def validate_properties(props: object, *, allow_reserved: bool = False) -> dict[str, str]:
    """P1: string names and values, valid Unicode, bounded size; reserved names are set by
    the system (a producer may set only those in ``properties.CLIENT_SETTABLE``)."""
    if props is None:
        return {}
    if not isinstance(props, dict):
        raise ValidationError("properties must be an object of strings", rule="P1",
                              code="INVALID_PROPERTIES")
    total = 0
    for name, value in props.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ValidationError(f"property {name!r} must have a non-empty string name and a "
                                  "string value", rule="P1", code="INVALID_PROPERTIES")
        if not allow_reserved and name in P.RESERVED and name not in P.CLIENT_SETTABLE:
            raise ValidationError(f"property {name!r} is reserved", rule="P1",
                                  code="INVALID_PROPERTIES")
        try:
            total += len(name.encode()) + len(value.encode()) + 6
        except UnicodeEncodeError as exc:
            raise ValidationError(f"property {name!r} is not valid Unicode text", rule="P1",
                                  code="INVALID_PROPERTIES") from exc
        if len(name.encode()) > 0xFFFF:
            raise ValidationError(f"property name {name[:20]!r}... too long", rule="P1",
                                  code="INVALID_PROPERTIES")
    if total > MAX_PROPERTIES_BYTES:
        raise ValidationError(f"properties take {total} bytes, at most {MAX_PROPERTIES_BYTES}",
                              rule="P1", code="INVALID_PROPERTIES")
    return props


SETTABLE_NAME_FIELDS: dict[str, bytes] = {}
"""Names a producer may set (P1) seen so far -> their ``properties.name_field`` (writers look
here first: ``SETTABLE_NAME_FIELDS.get(name) or settable_name_field(name)``)."""
_SETTABLE_MAX = 4096
_SETTABLE_MAX_LEN = 256
"""Names of at most this many bytes are kept, and the cache starts again when full (producers
choose the names)."""


def settable_name_field(name: object) -> bytes | None:
    """P1, the fast form of :func:`validate_properties`' checks of a name: the
    ``properties.name_field`` of a property a producer may set (cached), None for any other
    name (:func:`validate_properties` then names why)."""
    field = SETTABLE_NAME_FIELDS.get(name) if type(name) is str else None
    if field is not None:
        return field
    if not isinstance(name, str) or not name or (name in P.RESERVED
                                                 and name not in P.CLIENT_SETTABLE):
        return None
    try:
        raw = name.encode()
    except UnicodeEncodeError:
        return None
    if len(raw) > 0xFFFF:
        return None
    field = P.name_field(name)
    if len(raw) <= _SETTABLE_MAX_LEN:
        if len(SETTABLE_NAME_FIELDS) >= _SETTABLE_MAX:
            SETTABLE_NAME_FIELDS.clear()
        SETTABLE_NAME_FIELDS[name] = field
    return field


def properties_settable(props: dict[str, object]) -> bool:
    """True when :func:`validate_properties` passes ``props`` (P1: names a producer may set,
    text values, the size), in fewer steps; False for anything else (it then names the
    problem)."""
    total = 0
    known = SETTABLE_NAME_FIELDS.get
    for name, value in props.items():
        prefix = known(name) or settable_name_field(name)
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


def validate_text(value: object, what: str) -> str | None:
    """Optional text fields (tags, keys): a string of valid Unicode, or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string", rule="P1", code="INVALID_REQUEST")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} is not valid Unicode text", rule="P1",
                              code="INVALID_REQUEST") from exc
    return value
