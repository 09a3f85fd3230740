"""The store's ``GET /healthz`` answer (DESIGN "HTTP contract"), read by the retry service
(R2: whether the store accepts writes) and the CLI's status. The retry service's and the
analytics service's health answers are in their own modules (:class:`.retry.RetryHealth`,
:mod:`.analytics`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.wire.codec import WireValue, wire_meta

OK = "ok"


@dataclass(frozen=True, slots=True)
class StoreHealth(WireValue):
    """The store is up; ``writable``: it accepts writes (R2; false on a read-only store)."""

    status: str = field(metadata=wire_meta(schema={"enum": [OK]}))
    writable: bool
