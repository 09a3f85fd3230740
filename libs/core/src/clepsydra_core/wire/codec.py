"""One codec for the wire dataclasses: snake_case fields in Python, camelCase on the wire.

A wire type is a frozen, slotted dataclass that mixes in :class:`WireValue`. Its fields' types
say how each value is checked: ``int`` (never a boolean), ``bool``, ``str``, ``X | None``,
``list[X]``, ``dict[str, str]`` and nested wire types. A field's JSON name is its name in
camelCase unless its metadata says otherwise (``field(metadata=wire_meta(json="max"))``);
``min_items``/``max_items`` bound a list; ``minimum`` and
``maximum`` bound an integer; ``internal=True`` keeps a field off the wire. ``from_json``
raises :class:`~clepsydra_core.errors.ValidationError` naming the field
(``handover.fromOffset must be an integer, got string``); the server answers it as a 400, a
client turns it into its own "unexpected answer" error.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from clepsydra_core.errors import ValidationError

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)

Check = Callable[[Any, str], Any]
"""(decoded JSON value, the field's name for messages) -> the Python value."""


def camel(name: str) -> str:
    """``queue_offset`` -> ``queueOffset``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def wire_meta(*, json: str | None = None, minimum: int | None = None,
              maximum: int | None = None, min_items: int | None = None,
              max_items: int | None = None, internal: bool = False) -> dict[str, Any]:
    """A field's wire metadata: ``field(metadata=wire_meta(json="max", minimum=1))``."""
    return {"json": json, "minimum": minimum, "maximum": maximum, "min_items": min_items,
            "max_items": max_items, "internal": internal}


def type_name(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _bad(name: str, expected: str, value: object) -> ValidationError:
    return ValidationError(f"{name} must be {expected}, got {type_name(value)}",
                           code="INVALID_REQUEST")


def _int_check(minimum: int | None, maximum: int | None) -> Check:
    low = INT64_MIN if minimum is None else minimum
    high = INT64_MAX if maximum is None else maximum

    def check(value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, "an integer", value)
        if value < low or value > high:
            raise ValidationError(f"{name} must be between {low} and {high}, got {value}",
                                  code="INVALID_REQUEST")
        return value
    return check


def _bool_check(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(name, "a boolean", value)
    return value


def _str_check(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _bad(name, "a string", value)
    return value


def _checker(tp: Any, meta: Mapping[str, Any]) -> Check:
    """The check of a value of type ``tp`` (resolved type hints, not strings)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        check = _checker(inner[0], meta)
        return lambda value, name: None if value is None else check(value, name)
    if tp is bool:
        return _bool_check
    if tp is int:
        return _int_check(meta.get("minimum"), meta.get("maximum"))
    if tp is str:
        return _str_check
    if origin in (list, tuple):
        item = _checker(typing.get_args(tp)[0], {})
        as_tuple = origin is tuple
        fewest, most = meta.get("min_items") or 0, meta.get("max_items")

        def check_list(value: Any, name: str) -> Any:
            if not isinstance(value, list):
                raise _bad(name, "an array", value)
            if len(value) < fewest or (most is not None and len(value) > most):
                raise ValidationError(f"{name} must hold {fewest} to {most or 'any number of'} "
                                      f"items, got {len(value)}", code="INVALID_REQUEST")
            items = [item(v, f"{name}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if as_tuple else items
        return check_list
    if origin is dict:
        def check_map(value: Any, name: str) -> dict[str, str]:
            if not isinstance(value, dict):
                raise _bad(name, "an object of strings", value)
            for key, item_value in value.items():
                _str_check(item_value, f"{name}[{key!r}]")
            return value
        return check_map
    if isinstance(tp, type) and issubclass(tp, WireValue):
        return lambda value, name: tp.from_json(value, what=name)
    raise TypeError(f"no wire check for type {tp!r}")


def _encoder(tp: Any) -> Callable[[Any], Any] | None:
    """How a value of ``tp`` becomes JSON (None: as it is)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        encode = _encoder(inner[0])
        return None if encode is None else (lambda v: None if v is None else encode(v))
    if origin in (list, tuple):
        item = _encoder(typing.get_args(tp)[0])
        return (lambda v: list(v)) if item is None else (lambda v: [item(x) for x in v])
    if isinstance(tp, type) and issubclass(tp, WireValue):
        return lambda v: v.to_json()
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    attr: str
    json: str
    required: bool
    check: Check
    encode: Callable[[Any], Any] | None


class WireValue:
    """Mixed into a frozen slotted dataclass: ``to_json()`` / ``from_json()`` by its fields."""

    __slots__ = ()
    _specs: ClassVar[dict[type, tuple[_Spec, ...]]] = {}

    @classmethod
    def _wire_specs(cls) -> tuple[_Spec, ...]:
        specs = WireValue._specs.get(cls)
        if specs is None:
            hints = typing.get_type_hints(cls)
            specs = tuple(
                _Spec(f.name, f.metadata.get("json") or camel(f.name),
                      f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING,
                      _checker(hints[f.name], f.metadata), _encoder(hints[f.name]))
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if not f.metadata.get("internal"))
            WireValue._specs[cls] = specs
        return specs

    @classmethod
    def json_names(cls) -> tuple[str, ...]:
        return tuple(spec.json for spec in cls._wire_specs())

    def to_json(self) -> dict[str, Any]:
        """The JSON object; an optional field whose value is None is left out."""
        out: dict[str, Any] = {}
        for spec in self._wire_specs():
            value = getattr(self, spec.attr)
            if value is None and not spec.required:
                continue
            out[spec.json] = value if spec.encode is None else spec.encode(value)
        return out

    @classmethod
    def from_json(cls, obj: Any, *, what: str | None = None, strict: bool = False) -> Self:
        """The value in the decoded JSON ``obj``; ValidationError naming the field otherwise.
        ``strict``: unknown fields are refused too (requests; answers may carry new ones)."""
        name = what or cls.__name__
        if not isinstance(obj, dict):
            raise _bad(name, "an object", obj)
        specs = cls._wire_specs()
        if strict:
            known = {spec.json for spec in specs}
            for key in obj:
                if key not in known:
                    raise ValidationError(f"{name}: unknown field {key!r} (allowed: "
                                          f"{', '.join(sorted(known))})", code="INVALID_REQUEST")
        kwargs: dict[str, Any] = {}
        for spec in specs:
            value = obj.get(spec.json)
            if spec.json not in obj and spec.required:
                raise ValidationError(f"{name}.{spec.json} is required", code="INVALID_REQUEST")
            if value is None and not spec.required:
                continue  # absent or null: the default
            kwargs[spec.attr] = spec.check(value, f"{name}.{spec.json}")
        return cls(**kwargs)
