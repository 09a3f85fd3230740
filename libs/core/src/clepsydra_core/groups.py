"""Consumer-group settings (SPEC R2, R3, R5): the one definition of their defaults, limits,
validation and JSON shape, used by the store (which keeps them durably, beside topics) and by
the retry service (which reads them on every send-back, through a Redis cache)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clepsydra_core.retry_rules import DEFAULT_MAX_RECONSUME_TIMES

DEFAULT_RETRY_QUEUE_NUMS = 1
"""R3: queues of a group's retry topic when the group does not say."""
MAX_RETRY_QUEUE_NUMS = 64
"""More retry queues than this is refused as absurd (a group rarely has more consumers)."""


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
    """The settings a ``PUT`` body (:class:`clepsydra_core.wire.groups.GroupSettingsPatch`)
    asks for, merged over the current ones (or the defaults); a field absent or null keeps its
    value. Unknown fields, non-integers, negatives and absurd values are refused (400)."""
    from clepsydra_core.wire.groups import GroupSettingsPatch  # the wire module imports this one

    patch = GroupSettingsPatch.from_json(body, what="group settings", strict=True)
    values = current or GroupSettings()
    return GroupSettings(
        retry_queue_nums=(values.retry_queue_nums if patch.retry_queue_nums is None
                          else patch.retry_queue_nums),
        retry_max_times=(values.retry_max_times if patch.retry_max_times is None
                         else patch.retry_max_times))
