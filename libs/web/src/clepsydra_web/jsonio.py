"""JSON in and out of the HTTP layer, and the type checks every route of every service shares.

One reader for every service: orjson parses the body, so anything it cannot read
(invalid UTF-8, a number out of range, nesting deeper than it allows) is a 400 ``INVALID_JSON``,
never a 500. A field of the wrong type is a 400 naming the field. Booleans are not integers here.
Numbers in paths and query strings are ASCII digits only: Python's ``int()`` also takes Arabic-Indic
and fullwidth digits, which no client means as an offset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import type_name as type_name

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
JSON_TYPE = "application/json"

dumps = orjson.dumps


_ASCII_INT = re.compile(r"-?[0-9]+\Z", re.ASCII)
INVALID_JSON = "INVALID_JSON"


def loads_json(raw: bytes, what: str = "request body") -> Any:
    """Any JSON value in ``raw``; ValidationError INVALID_JSON if it cannot be read."""
    if not raw.strip():
        raise ValidationError(f"{what} is empty; a JSON object is expected", code=INVALID_JSON)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"{what} is not valid JSON: {exc}", code=INVALID_JSON) from exc


def loads_object(raw: bytes, what: str = "request body") -> dict[str, Any]:
    """The JSON object in ``raw``; ValidationError INVALID_JSON if it is not one."""
    obj = loads_json(raw, what)
    if not isinstance(obj, dict):
        raise ValidationError(f"{what} must be a JSON object, got {type_name(obj)}",
                              code=INVALID_JSON)
    return obj


def loads_object_or_empty(raw: bytes, what: str = "request body") -> dict[str, Any]:
    """:func:`loads_object`, or ``{}`` for a body left out (no bytes at all) where a route
    allows that; whitespace alone is a body, and not JSON (400 INVALID_JSON)."""
    return loads_object(raw, what) if raw else {}


def check_fields(obj: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    """Refuse unknown fields (a misspelt ``delaylevel`` must not be silently ignored)."""
    if obj.keys() <= allowed:
        return
    for name in obj:
        if name not in allowed:
            raise ValidationError(f"{what}: unknown field {name!r} (allowed: "
                                  f"{', '.join(sorted(allowed))})", code="INVALID_REQUEST")


def as_int(value: object, name: str, *, minimum: int = 0, maximum: int = INT64_MAX,
           rule: str | None = None, code: str = "INVALID_REQUEST") -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integer (the documents say integer): 3.0 is one
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, got {type_name(value)}",
                              code="INVALID_REQUEST")
    if value < minimum or value > maximum:
        raise ValidationError(f"{name} must be between {minimum} and {maximum}, got {value}",
                              rule=rule, code=code)
    return value


def opt_int(obj: Mapping[str, Any], name: str, default: int | None = None, *,
            minimum: int = 0, maximum: int = INT64_MAX) -> int | None:
    value = obj.get(name)
    if value is None:
        return default
    return as_int(value, name, minimum=minimum, maximum=maximum)


def req_int(obj: Mapping[str, Any], name: str, *, minimum: int = 0,
            maximum: int = INT64_MAX) -> int:
    if obj.get(name) is None:
        raise ValidationError(f"{name} is required", code="INVALID_REQUEST")
    return as_int(obj[name], name, minimum=minimum, maximum=maximum)


def opt_str(obj: Mapping[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string, got {type_name(value)}",
                              code="INVALID_REQUEST")
    return value


def req_str(obj: Mapping[str, Any], name: str) -> str:
    value = opt_str(obj, name)
    if value is None:
        raise ValidationError(f"{name} is required", code="INVALID_REQUEST")
    return value


def str_map(value: object, name: str) -> dict[str, str]:
    """An object of string values (subscriptions, properties to set)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{name} must be an object of strings, got {type_name(value)}",
                              code="INVALID_REQUEST")
    for key, item in value.items():
        if not isinstance(item, str):
            raise ValidationError(f"{name}[{key!r}] must be a string, got {type_name(item)}",
                                  code="INVALID_REQUEST")
    return value


def parse_int(raw: str) -> int | None:
    """``raw`` as an integer when it is ASCII digits with an optional leading ``-``, else None
    (no spaces, no ``+``, no ``_``, no other scripts' digits: ``int()`` takes all of those)."""
    if _ASCII_INT.match(raw) is None:
        return None
    return int(raw)


def query_int(args: Mapping[str, str], name: str, default: int, *, minimum: int = 0,
              maximum: int = INT64_MAX, rule: str | None = None,
              code: str = "INVALID_REQUEST") -> int:
    """An integer query parameter; a missing one is ``default``, an empty one is not an integer
    (the documents say integer)."""
    raw = args.get(name)
    if raw is None:
        return default
    value = parse_int(raw)
    if value is None:
        raise ValidationError(f"query parameter {name}={raw!r} is not an integer "
                              "(ASCII digits)", code="INVALID_REQUEST")
    return as_int(value, name, minimum=minimum, maximum=maximum, rule=rule, code=code)


def path_int(raw: str, name: str, *, minimum: int = 0, maximum: int = INT64_MAX,
             code: str = "INVALID_REQUEST", rule: str | None = None) -> int:
    """An integer path segment (queueId, CommitLog offset, level)."""
    value = parse_int(raw)
    if value is None:
        raise ValidationError(f"{name} {raw!r} is not an integer (ASCII digits)",
                              code="INVALID_REQUEST")
    return as_int(value, name, minimum=minimum, maximum=maximum, code=code, rule=rule)
