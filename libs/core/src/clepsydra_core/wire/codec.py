"""One codec for the wire dataclasses: snake_case fields in Python, camelCase on the wire.

A wire type is a frozen, slotted dataclass that mixes in :class:`WireValue`. Its fields' types
say how each value is checked: ``int`` (never a boolean), ``bool``, ``str``, ``X | None``,
``float`` (any JSON number), ``list[X]``, ``dict[str, X]``, nested wire types, ``A | B`` of
wire types (the first one the object reads as) and ``Any`` (any JSON value, read as it is).
A field's JSON name is its name in camelCase unless its metadata says otherwise
(``field(metadata=wire_meta(json="max"))``); ``min_items``/``max_items`` bound a list;
``minimum`` and ``maximum`` bound an integer (``code``/``rule`` name the error of a value out
of range, ``type_code`` the error of a value of the wrong type); ``pattern``/``max_length``
constrain a string; ``doc`` describes the field and ``schema`` adds
JSON Schema keywords the types cannot say (both for the OpenAPI documents,
:mod:`clepsydra_core.wire.schema`); ``internal=True`` keeps a field off the wire. ``from_json``
raises :class:`~clepsydra_core.errors.ValidationError` naming the field
(``handover.fromOffset must be an integer, got string``); the server answers it as a 400, a
client turns it into its own "unexpected answer" error.
"""

from __future__ import annotations

import contextvars
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

from clepsydra_core.errors import RemoteError, ValidationError

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)

_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("wire_strict", default=False)
"""Whether the value being read refuses unknown fields; nested values are read alike."""

Check = Callable[[Any, str], Any]
"""(decoded JSON value, the field's name for messages) -> the Python value."""


def camel(name: str) -> str:
    """``queue_offset`` -> ``queueOffset``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def wire_meta(*, json: str | None = None, minimum: int | None = None,
              maximum: int | None = None, min_items: int | None = None,
              max_items: int | None = None, pattern: str | None = None,
              max_length: int | None = None, code: str | None = None,
              type_code: str | None = None, rule: str | None = None,
              doc: str | None = None, schema: Mapping[str, Any] | None = None,
              internal: bool = False) -> dict[str, Any]:
    """A field's wire metadata: ``field(metadata=wire_meta(json="max", minimum=1))``."""
    return {"json": json, "minimum": minimum, "maximum": maximum, "min_items": min_items,
            "max_items": max_items, "pattern": pattern, "max_length": max_length,
            "code": code, "type_code": type_code, "rule": rule, "doc": doc,
            "schema": dict(schema or {}),
            "internal": internal}


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


def int_bounds(meta: Mapping[str, Any]) -> tuple[int, int]:
    """The range a field's integers must be in (int64 when the metadata does not say)."""
    low, high = meta.get("minimum"), meta.get("maximum")
    return (INT64_MIN if low is None else low), (INT64_MAX if high is None else high)


def _int_check(meta: Mapping[str, Any]) -> Check:
    low, high = int_bounds(meta)
    code, rule = meta.get("code") or "INVALID_REQUEST", meta.get("rule")

    def check(value: Any, name: str) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON Schema's integer: 219.0 is one
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, "an integer", value)
        if value < low or value > high:
            raise ValidationError(f"{name} must be between {low} and {high}, got {value}",
                                  code=code, rule=rule)
        return value
    return check


def _bool_check(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(name, "a boolean", value)
    return value


def _float_check(value: Any, name: str) -> float:
    """A JSON number; an integer stays one (``2`` is written back as ``2``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(name, "a number", value)
    return value


def _str_check(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _bad(name, "a string", value)
    return value


def _text_check(meta: Mapping[str, Any]) -> Check:
    """A string, within ``max_length`` characters and matching ``pattern`` (an ECMA-262 regex
    anchored ``^...$`` as JSON Schema reads it: no final newline before the ``$``)."""
    pattern, most = meta.get("pattern"), meta.get("max_length")
    if pattern is None and most is None:
        return _str_check
    whole = re.compile(pattern) if pattern is not None else None
    code, rule = meta.get("code") or "INVALID_REQUEST", meta.get("rule")

    def check(value: Any, name: str) -> str:
        text = _str_check(value, name)
        if most is not None and len(text) > most:
            raise ValidationError(f"{name} is {len(text)} characters, at most {most}",
                                  code=code, rule=rule)
        found = None if whole is None else whole.search(text)
        if whole is not None and (found is None or found.end() != len(text)):  # `$` is ECMA's
            raise ValidationError(f"{name} {text[:40]!r} does not match {pattern}",
                                  code=code, rule=rule)
        return text
    return check


_KIND_NAMES: dict[Any, str] = {str: "a string", int: "an integer", bool: "a boolean",
                                list[str]: "an array of strings"}


def _json_kind(tp: Any) -> Callable[[Any], bool]:
    """Whether a decoded JSON value is of the JSON type ``tp`` stands for."""
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple):
        return lambda value: isinstance(value, list)
    if origin is dict:
        return lambda value: isinstance(value, dict)
    return lambda value: isinstance(value, origin) and not (
        origin is int and isinstance(value, bool))


def _field_check(tp: Any, meta: Mapping[str, Any]) -> Check:
    """A field's check: its type's, a value of the wrong type refused with the field's
    ``type_code`` when it has one (a value out of range or off its pattern: ``code``)."""
    check = _checker(tp, meta)
    code = meta.get("type_code")
    if not code:
        return check

    def coded(value: Any, name: str) -> Any:
        try:
            return check(value, name)
        except ValidationError as exc:
            if exc.code == "INVALID_REQUEST":
                exc.code = code
            raise
    return coded


def _checker(tp: Any, meta: Mapping[str, Any]) -> Check:
    """The check of a value of type ``tp`` (resolved type hints, not strings)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) > 1 and all(is_wire(a) for a in inner):
            return _wire_union_check(inner)
        if len(inner) > 1:  # str | list[str]: the first alternative whose JSON type fits
            checks = [(_json_kind(a), _checker(a, meta)) for a in inner]

            def check_any(value: Any, name: str) -> Any:
                if value is None:
                    return None
                for kind, alternative in checks:
                    if kind(value):
                        return alternative(value, name)
                raise _bad(name, " or ".join(_KIND_NAMES[a] for a in inner), value)
            return check_any
        check = _checker(inner[0], meta)
        return lambda value, name: None if value is None else check(value, name)
    if tp is Any:
        return lambda value, name: value
    if tp is bool:
        return _bool_check
    if tp is int:
        return _int_check(meta)
    if tp is float:
        return _float_check
    if tp is str:
        return _text_check(meta)
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
        of = typing.get_args(tp)[1]
        item_check = _checker(of, {})
        what = {str: "strings", int: "integers", float: "numbers"}.get(of, "values")

        def check_map(value: Any, name: str) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise _bad(name, f"an object of {what}", value)
            if of is str:
                for key, item_value in value.items():
                    _str_check(item_value, f"{name}[{key!r}]")
                return value
            return {key: item_check(item_value, f"{name}[{key!r}]")
                    for key, item_value in value.items()}
        return check_map
    if isinstance(tp, type) and issubclass(tp, WireValue):
        return lambda value, name: tp.from_json(value, what=name, strict=_STRICT.get())
    raise TypeError(f"no wire check for type {tp!r}")


def is_wire(tp: Any) -> bool:
    """Whether ``tp`` is a wire type."""
    return isinstance(tp, type) and issubclass(tp, WireValue)


def _wire_union_check(kinds: list[type[WireValue]]) -> Check:
    """``A | B`` of wire types (a batch's results: an answer or an error): the first one the
    object reads as; none: the error names the field and each one's complaint."""
    def check(value: Any, name: str) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise _bad(name, "an object", value)
        problems = []
        for kind in kinds:
            try:
                return kind.from_json(value, what=name, strict=_STRICT.get())
            except ValidationError as exc:
                problems.append(f"as {kind.__name__}: {exc.message}")
        raise ValidationError(f"{name} is none of {', '.join(k.__name__ for k in kinds)} "
                              f"({'; '.join(problems)})", code="INVALID_REQUEST")
    return check


def _encoder(tp: Any) -> Callable[[Any], Any] | None:
    """How a value of ``tp`` becomes JSON (None: as it is)."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) > 1 and all(is_wire(a) for a in inner):
            return lambda v: None if v is None else v.to_json()
        encode = _encoder(inner[0])
        return None if encode is None else (lambda v: None if v is None else encode(v))
    if origin in (list, tuple):
        item = _encoder(typing.get_args(tp)[0])
        return (lambda v: list(v)) if item is None else (lambda v: [item(x) for x in v])
    if isinstance(tp, type) and issubclass(tp, WireValue):
        return lambda v: v.to_json()
    return None


def field_specs(cls: type[WireValue]) -> list[tuple[str, bool, Any, Mapping[str, Any]]]:
    """(JSON name, required, type, metadata) of each wire field, in order (for the schema)."""
    hints = typing.get_type_hints(cls)
    return [(f.metadata.get("json") or camel(f.name),
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
             hints[f.name], f.metadata)
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if not f.metadata.get("internal")]


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
    _readers: ClassVar[dict[type, Any]] = {}
    WIRE_SCHEMA: ClassVar[Mapping[str, Any]] = {}
    """JSON Schema keywords of the whole object that its fields cannot say (exclusive fields),
    checked by :meth:`wire_check`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "to_json" not in cls.__dict__:  # not a parent's compiled one: compiled anew
            cls.to_json = WireValue.to_json  # type: ignore[method-assign]
        if "json_of" not in cls.__dict__:
            cls.json_of = WireValue.__dict__["json_of"]  # type: ignore[method-assign]

    def wire_check(self, name: str) -> None:
        """Rules across fields (two fields that exclude each other), after each field's own
        check; raises ValidationError naming them. None by default."""

    @classmethod
    def _wire_specs(cls) -> tuple[_Spec, ...]:
        specs = WireValue._specs.get(cls)
        if specs is None:
            hints = typing.get_type_hints(cls)
            specs = tuple(
                _Spec(f.name, f.metadata.get("json") or camel(f.name),
                      f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING,
                      _field_check(hints[f.name], f.metadata), _encoder(hints[f.name]))
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                if not f.metadata.get("internal"))
            WireValue._specs[cls] = specs
        return specs

    @classmethod
    def json_of(cls, *values: Any, **named: Any) -> dict[str, Any]:
        """``cls(*values, **named).to_json()`` without making the value (optional fields may
        be left off): for a hot path that builds a request from values it has checked itself
        (the client SDK's produce: a frozen instance costs more than its JSON). The first
        call compiles the class's own ``json_of``."""
        encode = _compile_json_of(cls)
        cls.json_of = staticmethod(encode)  # type: ignore[method-assign,assignment]
        return encode(*values, **named)

    @classmethod
    def json_names(cls) -> tuple[str, ...]:
        return tuple(spec.json for spec in cls._wire_specs())

    @classmethod
    def json_name_of(cls) -> dict[str, str]:
        """Field name -> JSON name, for a reader that takes a few fields of an answer on a hot
        path without building the value (the SDK's send results)."""
        return {spec.attr: spec.json for spec in cls._wire_specs()}

    def to_json(self) -> dict[str, Any]:
        """The JSON object; an optional field whose value is None is left out. The first call
        compiles the class's own ``to_json`` (:func:`_compile_to_json`), later ones run it."""
        cls = type(self)
        encode = _compile_to_json(cls)
        cls.to_json = encode  # type: ignore[method-assign,assignment]
        return encode(self)

    @classmethod
    def from_json(cls, obj: Any, *, what: str | None = None, strict: bool = False) -> Self:
        """The value in the decoded JSON ``obj``; ValidationError naming the field otherwise.
        ``strict``: unknown fields are refused too, in nested values as well (requests;
        answers may carry new ones). An integral number (``3.0``) is an integer, as JSON
        Schema counts it."""
        name = what or cls.__name__
        if not isinstance(obj, dict):
            raise _bad(name, "an object", obj)
        if strict:
            known = {spec.json for spec in cls._wire_specs()}
            for key in obj:
                if key not in known:
                    raise ValidationError(f"{name}: unknown field {key!r} (allowed: "
                                          f"{', '.join(sorted(known))})", code="INVALID_REQUEST")
        read = WireValue._readers.get(cls)
        if read is None:
            read = WireValue._readers[cls] = _compile_from_json(cls)
        if not read.nested:
            value: Self = read(obj, name)
        else:
            token = _STRICT.set(strict)
            try:
                value = read(obj, name)
            finally:
                _STRICT.reset(token)
        value.wire_check(name)
        return value


def _required(name: str, json: str) -> ValidationError:
    return ValidationError(f"{name}.{json} is required", code="INVALID_REQUEST")


_MISSING = object()


def _fast_test(tp: Any, meta: Mapping[str, Any]) -> str | None:
    """A Python expression over ``v`` that is true for the values the field's check passes
    unchanged and cheaply (an int in range, a plain string, a bool...); None when there is
    none. A value it does not pass goes through the check, which accepts or names it."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        test = _fast_test(inner[0], meta) if len(inner) == 1 else None
        return None if test is None else f"v is None or {test}"
    if tp is bool:
        return "v is True or v is False"
    if tp is int:
        low, high = int_bounds(meta)
        return f"type(v) is int and {low} <= v <= {high}"
    if tp is float:
        return "type(v) is int or type(v) is float"
    if tp is str and meta.get("pattern") is None and meta.get("max_length") is None:
        return "type(v) is str"
    if origin is dict and typing.get_args(tp)[1] is str:
        return "type(v) is dict and all(type(x) is str for x in v.values())"
    return None


def _compile_from_json(cls: type[WireValue]) -> Any:
    """The field-by-field reader of ``cls`` (``(obj, name) -> value``), as
    :func:`_compile_to_json` writes the encoder: a value of the usual type passes one inline
    test; any other goes through the field's check, which converts it (``3.0`` -> ``3``) or
    raises the error naming the field; an optional field absent or null takes its default.
    The value is made as its ``__init__`` would make it (a wire type has no ``__post_init__``),
    each slot set once. The same rules as the checks alone, quicker."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or not all(f.init for f in fields):
        raise TypeError(f"{cls.__name__}: a wire type is made from its fields alone")
    specs = {spec.attr: spec for spec in cls._wire_specs()}
    scope: dict[str, Any] = {"_MISSING": _MISSING, "_required": _required, "_cls": cls,
                             "_new": object.__new__}
    lines = ["def read(obj, name):"]
    nested = False
    for i, f in enumerate(fields):
        scope[f"_s{i}"] = getattr(cls, f.name).__set__  # the slot's own setter (frozen)
        if f.default is not dataclasses.MISSING:
            scope[f"_d{i}"] = f.default
            default = f"_d{i}"
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_f{i}"] = f.default_factory
            default = f"_f{i}()"
        else:
            default = ""
        spec = specs.get(f.name)
        if spec is None:  # internal: never on the wire, always its default
            lines.append(f"    a{i} = {default}")
            continue
        scope[f"_c{i}"] = spec.check
        test = _fast_test(hints[f.name], f.metadata)
        nested = nested or test is None
        check = f"_c{i}(v, name + {'.' + spec.json!r})"
        take = f"a{i} = v if {test} else {check}" if test else f"a{i} = {check}"
        if spec.required:
            lines += [f"    v = obj.get({spec.json!r}, _MISSING)",
                      "    if v is _MISSING:",
                      f"        raise _required(name, {spec.json!r})",
                      f"    {take}"]
        else:
            lines += [f"    v = obj.get({spec.json!r})",
                      "    if v is None:",
                      f"        a{i} = {default}",
                      "    else:",
                      f"        {take}"]
    lines.append("    out = _new(_cls)")
    lines += [f"    _s{i}(out, a{i})" for i in range(len(fields))]
    lines.append("    return out")
    exec("\n".join(lines), scope)  # the names and JSON keys are the class's own
    read = scope["read"]
    read.__qualname__ = f"{cls.__qualname__}.read"
    read.nested = nested  # a field may hold a wire value: read with the caller's strictness
    return read


_W = typing.TypeVar("_W", bound=WireValue)

BAD_GATEWAY = 502


def read_answer(cls: type[_W], doc: Any, what: str | None = None) -> _W:
    """Another service's answer ``doc`` read with its wire type (not strict: an answer may
    carry fields this reader does not know yet). One that does not read is a
    ``RemoteError`` with status 502 (that service answered something else), naming the field:
    what a client of the store or the retry service raises for an unexpected answer."""
    try:
        return cls.from_json(doc, what=what)
    except ValidationError as exc:
        error = RemoteError(f"unexpected answer: {exc.message}")
        error.http_status = BAD_GATEWAY
        raise error from exc


def _compile_to_json(cls: type[WireValue]) -> Callable[[Any], dict[str, Any]]:
    """``cls.to_json`` written out field by field (as dataclasses write ``__init__``): one
    attribute read and one test per field, no loop over the specs."""
    return _compile(cls, "self", [f"self.{spec.attr}" for spec in cls._wire_specs()])


def _compile_json_of(cls: type[WireValue]) -> Callable[..., dict[str, Any]]:
    """:meth:`WireValue.json_of` of ``cls``: its fields' values, in order, -> the JSON."""
    specs = cls._wire_specs()
    params = ", ".join(f"{spec.attr}{'' if spec.required else '=None'}" for spec in specs)
    return _compile(cls, params, [spec.attr for spec in specs])


def _compile(cls: type[WireValue], params: str,
             values: list[str]) -> Callable[..., dict[str, Any]]:
    lines = [f"def encode({params}):", "    out = {}"]
    scope: dict[str, Any] = {}
    for i, (spec, value) in enumerate(zip(cls._wire_specs(), values, strict=True)):
        if spec.encode is not None:
            scope[f"_e{i}"] = spec.encode
        put = f"out[{spec.json!r}] = " + (f"_e{i}(v)" if spec.encode is not None else "v")
        lines.append(f"    v = {value}")
        lines.append(f"    {put}" if spec.required else f"    if v is not None: {put}")
    lines.append("    return out")
    exec("\n".join(lines), scope)  # the names and JSON keys are the class's own
    encode: Callable[..., dict[str, Any]] = scope["encode"]
    encode.__qualname__ = f"{cls.__qualname__}.encode"
    return encode
