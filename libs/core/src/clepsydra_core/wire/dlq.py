"""The retry service's DLQ toolkit (SPEC R16), spoken by the retry service and the client SDK:
what a listing, resend or purge selects.

- ``GET /v1/groups/{group}/dlq?topic=&key=&reason=&fromMs=&toMs=`` and ``DELETE`` alike: the
  filter as query parameters
- ``POST /v1/groups/{group}/dlq/resend`` and ``.../dlq/purge``: ``{filter: DlqFilter, ...}``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue, wire_meta

FILTER_FIELDS = ("topic", "key", "reason", "fromMs", "toMs")
_MS = wire_meta(minimum=0, rule="R16")


@dataclass(frozen=True, slots=True)
class DlqFilter(WireValue):
    """Dead letters whose original topic (RETRY_TOPIC) is ``topic``, whose keys or UNIQ_KEY
    include ``key``, whose DLQ_REASON or failure-history reasons contain ``reason``
    (case-insensitive), and that were dead-lettered in [fromMs, toMs) (an empty window selects
    none). In a resend or purge body at least one field is given."""

    WIRE_SCHEMA: ClassVar[dict[str, Any]] = {"anyOf": [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in FILTER_FIELDS]}

    topic: str | None = None
    key: str | None = None
    reason: str | None = None
    from_ms: int | None = field(default=None, metadata=_MS)
    to_ms: int | None = field(default=None, metadata=_MS)

    def is_empty(self) -> bool:
        return all(v is None for v in (self.topic, self.key, self.reason, self.from_ms,
                                       self.to_ms))

    def wire_check(self, name: str) -> None:
        if self.is_empty():
            raise ValidationError(f"{name} is empty (use all: true to select every dead "
                                  "letter)", rule="R16", code="INVALID_REQUEST")
