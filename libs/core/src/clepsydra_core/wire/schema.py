"""JSON Schema (draft 2020-12, as OpenAPI 3.1 reads it) of the wire types: the same fields,
types, bounds, patterns and exclusive fields that :meth:`WireValue.from_json` checks, so the
OpenAPI documents (``clepsydra_web.openapi``) say what the servers validate."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from clepsydra_core.wire.codec import WireValue, field_specs, int_bounds, is_wire

Ref = Callable[[type[WireValue]], dict[str, Any]]
"""A nested wire type -> the schema that points at it (``{"$ref": ...}``)."""


def description(cls: type) -> str | None:
    """The class's docstring (not the signature a dataclass makes up when it has none)."""
    doc = cls.__doc__
    if not doc or doc.startswith(cls.__name__ + "("):
        return None
    return inspect.cleandoc(doc)


def type_schema(tp: Any, meta: Mapping[str, Any], ref: Ref) -> dict[str, Any]:
    """The schema of one value of type ``tp`` with the field's metadata."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) > 1 and all(is_wire(a) for a in inner):
            # wire types whose required fields tell them apart: exactly one fits
            alternatives = [type_schema(a, meta, ref) for a in inner]
            if type(None) in typing.get_args(tp):
                alternatives.append({"type": "null"})
            return {"oneOf": alternatives}
        if len(inner) > 1:
            alternatives = [type_schema(a, meta, ref) for a in inner]
            if type(None) in typing.get_args(tp):
                alternatives.append({"type": "null"})
            return {"anyOf": alternatives}
        schema = type_schema(inner[0], meta, ref)
        if "$ref" in schema:
            return {"anyOf": [schema, {"type": "null"}]}
        return {**schema, "type": [schema["type"], "null"]}
    if tp is Any:
        return {}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        low, high = int_bounds(meta)
        return {"type": "integer", "minimum": low, "maximum": high}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        out: dict[str, Any] = {"type": "string"}
        if meta.get("max_length") is not None:
            out["maxLength"] = meta["max_length"]
        if meta.get("pattern") is not None:
            out["pattern"] = meta["pattern"]
        return out
    if origin in (list, tuple):
        out = {"type": "array", "items": type_schema(typing.get_args(tp)[0], {}, ref)}
        if meta.get("min_items"):
            out["minItems"] = meta["min_items"]
        if meta.get("max_items") is not None:
            out["maxItems"] = meta["max_items"]
        return out
    if origin is dict:
        return {"type": "object",
                "additionalProperties": type_schema(typing.get_args(tp)[1], {}, ref)}
    if isinstance(tp, type) and issubclass(tp, WireValue):
        return ref(tp)
    raise TypeError(f"no schema for type {tp!r}")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    if "anyOf" in schema:
        if {"type": "null"} in schema["anyOf"]:
            return schema
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


def non_null(*names: str) -> dict[str, Any]:
    """Schema: every one of ``names`` is given and not null."""
    return {"required": list(names),
            "properties": {name: {"not": {"type": "null"}} for name in names}}


def object_schema(cls: type[WireValue], ref: Ref, *, closed: bool) -> dict[str, Any]:
    """The schema of a wire type; ``closed``: unknown fields refused (a request read with
    ``strict=True``)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, is_required, tp, meta in field_specs(cls):
        schema = type_schema(tp, meta, ref)
        if not is_required:
            schema = _nullable(schema)  # from_json reads an optional null as absent
        if meta.get("doc"):
            schema = {**schema, "description": meta["doc"]}
        schema.update(meta.get("schema") or {})
        properties[name] = schema
        if is_required:
            required.append(name)
    out: dict[str, Any] = {"type": "object"}
    text = description(cls)
    if text:
        out["description"] = text
    if required:
        out["required"] = required
    out["properties"] = properties
    if closed:
        out["additionalProperties"] = False
    out.update(cls.WIRE_SCHEMA)
    return out


def nested_types(cls: type[WireValue]) -> list[type[WireValue]]:
    """The wire types ``cls`` holds (directly), in field order."""
    found: list[type[WireValue]] = []

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, WireValue):
            if tp not in found:
                found.append(tp)
            return
        for arg in typing.get_args(tp):
            walk(arg)
    for _, _, tp, _ in field_specs(cls):
        walk(tp)
    return found
