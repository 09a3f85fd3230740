"""The error body every service answers a 4xx or 5xx with (DESIGN "HTTP contract"):
``{error, message}``, ``error`` the stable code of :mod:`clepsydra_core.errors`' table
(``ClepsydraError.to_json`` writes it), ``message`` the text naming the SPEC rule where one
applies. A value of its own where an error stands in an answer's place (a batch send-back's
item that failed, :class:`~clepsydra_core.wire.retry.SendBackResults`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.wire.codec import WireValue, wire_meta


@dataclass(frozen=True, slots=True)
class ErrorAnswer(WireValue):
    """An error: its stable code and a text naming the SPEC rule where one applies."""

    error: str = field(metadata=wire_meta(
        doc="stable code (INVALID_REQUEST, NO_PERMISSION, SYSTEM_ERROR, ...)"))
    message: str = field(metadata=wire_meta(doc="text naming the SPEC rule where one applies"))

    @classmethod
    def of(cls, exc: ClepsydraError) -> ErrorAnswer:
        return cls(exc.code, exc.message)
