"""Consumer-group settings (SPEC R2, R3, R5): the one definition of their defaults, limits,
validation and JSON shape, used by the store (which keeps them durably, beside topics) and by
the retry service (which reads them on every send-back, through a Redis cache)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clepsydra_core.errors import ValidationError
from clepsydra_core.retry_rules import DEFAULT_MAX_RECONSUME_TIMES, ORDERLY_MAX_RECONSUME_TIMES

DEFAULT_RETRY_QUEUE_NUMS = 1
"""R3: queues of a group's retry topic when the group does not say."""
MAX_RETRY_QUEUE_NUMS = 64
"""More retry queues than this is refused as absurd (a group rarely has more consumers)."""

FIELDS = {"retryQueueNums": "retry_queue_nums", "retryMaxTimes": "retry_max_times"}
"""JSON name -> attribute of :class:`GroupSettings`."""
_LIMITS = {"retryQueueNums": MAX_RETRY_QUEUE_NUMS, "retryMaxTimes": ORDERLY_MAX_RECONSUME_TIMES}


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """A consumer group's retry settings (R3, R5); 0 retry queues means "drop retries" (R2)."""

    retry_queue_nums: int = DEFAULT_RETRY_QUEUE_NUMS
    retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES

    def to_json(self) -> dict[str, int]:
        return {"retryQueueNums": self.retry_queue_nums, "retryMaxTimes": self.retry_max_times}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> GroupSettings:
        """From a stored or cached ``to_json()`` (values may be the strings of a Redis hash);
        missing fields take the defaults. ValueError when a value is not a whole number."""
        return cls(retry_queue_nums=int(doc.get("retryQueueNums", DEFAULT_RETRY_QUEUE_NUMS)),
                   retry_max_times=int(doc.get("retryMaxTimes", DEFAULT_MAX_RECONSUME_TIMES)))


def validate_settings(body: object, current: GroupSettings | None) -> GroupSettings:
    """The settings a ``PUT`` body asks for, merged over the current ones (or the defaults).
    Unknown fields, non-integers, negatives and absurd values are refused (400)."""
    if not isinstance(body, dict):
        raise ValidationError("group settings must be a JSON object", code="INVALID_REQUEST")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise ValidationError(f"unknown group setting(s) {', '.join(unknown)}; "
                              f"known: {', '.join(FIELDS)}", code="INVALID_REQUEST")
    values = (current or GroupSettings()).to_json()
    for name, value in body.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be a whole number, got {value!r}",
                                  code="INVALID_GROUP_SETTINGS")
        if value < 0:
            raise ValidationError(f"{name} must be >= 0, got {value}", rule="R2" if
                                  name == "retryQueueNums" else "R5",
                                  code="INVALID_GROUP_SETTINGS")
        if value > _LIMITS[name]:
            raise ValidationError(f"{name}={value} is absurd: at most {_LIMITS[name]}",
                                  code="INVALID_GROUP_SETTINGS")
        values[name] = value
    return GroupSettings.from_json(values)
