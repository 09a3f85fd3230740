"""Job output rows as JSON objects with camelCase names (``p50_ms`` -> ``p50Ms``,
``consumer_group`` -> ``group``), the shape ``clepsydra report run --format json`` prints."""

from __future__ import annotations

from typing import Any

RENAMES = {"consumer_group": "group"}


def camel(name: str) -> str:
    if name in RENAMES:
        return RENAMES[name]
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in sorted(value.items())}
    if isinstance(value, float):
        return round(value, 6)
    return value


def rows_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{camel(k): _value(v) for k, v in row.items()} for row in rows]
