"""The numbers of SPEC's retry rules, declared once for every part (the store's R10 reroute,
the retry service's send-back, the client's fallback and consume timeout).

- R5: a concurrent consumer retries ``DEFAULT_MAX_RECONSUME_TIMES`` times unless the request,
  the message or the group says otherwise; an orderly one "forever"
  (``ORDERLY_MAX_RECONSUME_TIMES``, 2^31 - 1, also the largest value anyone may ask for).
  As in RocketMQ, a max of -1 (any negative) means "the default" and 0 means "no retry": the
  first failure dead-letters (:func:`max_reconsume_times_or`).
- R6, R11: any delay level below 0 dead-letters (``DLQ_LEVEL`` is the one the SDK sends).
- R7, R9: level ``BROKER_DECIDES`` (0) means ``FIRST_RETRY_LEVEL + reconsumeTimes``
  (:func:`retry_level_for`), clamped to the table by the caller (L2).
- R13: a message held past the consume timeout goes back with ``CONSUME_TIMEOUT_LEVEL``.
"""

from __future__ import annotations

DEFAULT_MAX_RECONSUME_TIMES = 16
"""R5: retries of a concurrent consumer when nobody names a max (the 16-step ladder)."""
ORDERLY_MAX_RECONSUME_TIMES = 2**31 - 1
"""R5: an orderly consumer retries "forever"; nothing larger is meaningful."""
USE_DEFAULT_MAX = -1
"""R5: a max reconsume times of -1 means "the default" (RocketMQ's convention)."""
DLQ_LEVEL = -1
"""R6, R11: any level below 0 dead-letters; the SDK sends -1."""
BROKER_DECIDES = 0
"""R7, R11: level 0 leaves the level to the ladder."""
FIRST_RETRY_LEVEL = 3
"""R7, R9: the ladder starts at level 3 (10 s with the default table)."""
CONSUME_TIMEOUT_LEVEL = 3
"""R13: the level a message held past the consume timeout is sent back with."""


def max_reconsume_times_or(asked: int | None, default: int) -> int:
    """R5: the max a consumer, request or message asked for; ``default`` when it asked for
    nothing (None) or for "the default" (-1, any negative). 0 stays 0: dead-letter at once."""
    return default if asked is None or asked < 0 else asked


def retry_level_for(reconsume_times: int) -> int:
    """R7, R9: the ladder's level for a message consumed ``reconsume_times`` times before
    (unclamped: the caller clamps it to its level table, L2)."""
    return FIRST_RETRY_LEVEL + reconsume_times
