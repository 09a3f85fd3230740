"""The delay-level table (SPEC L1-L3).

``DelayLevels.parse("1s 5s 10s")`` builds the table; level i (1-based) is the i-th entry.
A malformed table raises ConfigError naming the bad entry, so a service fails at start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clepsydra_core.errors import ConfigError, ValidationError

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ENTRY = re.compile(r"^([1-9][0-9]*)([smhd])$")
_DURATION = re.compile(r"^([0-9]+)(ms|[smhd])?$")


def duration_ms(text: str) -> int | None:
    """A duration as ms: ``"90m"``, ``"365d"``, ``"1500ms"`` or plain ms (``"1500"``); None
    when malformed (units s m h d, as the level table's)."""
    match = _DURATION.match(text.strip())
    if not match:
        return None
    unit = match.group(2)
    return int(match.group(1)) * (1 if unit in (None, "ms") else _UNIT_MS[unit])


@dataclass(frozen=True, slots=True)
class DelayLevels:
    """An immutable level table: ``delays_ms[i - 1]`` is the delay of level i."""

    delays_ms: tuple[int, ...]

    @classmethod
    def parse(cls, table: str) -> DelayLevels:
        """Parse a space-separated table such as ``"1s 5s 1m 2h"`` (units s m h d)."""
        entries = table.split()
        if not entries:
            raise ConfigError("delay level table is empty", rule="L1")
        delays = []
        for index, entry in enumerate(entries, start=1):
            match = _ENTRY.match(entry)
            if not match:
                raise ConfigError(
                    f"delay level {index} is malformed: {entry!r} "
                    "(expected a positive number followed by one of s m h d)",
                    rule="L1",
                )
            delays.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
        return cls(tuple(delays))

    @classmethod
    def default(cls) -> DelayLevels:
        return cls.parse(DEFAULT_LEVELS)

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        """L2: 0 stays 0 (not delayed), above max becomes max; negative is refused."""
        if level < 0:
            raise ValidationError(f"delayLevel must be >= 0, got {level}", rule="L2",
                                  code="INVALID_DELAY_LEVEL")
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        """Delay of a level (clamped); level 0 has none."""
        level = self.clamp(level)
        return 0 if level == 0 else self.delays_ms[level - 1]

    def queue_id(self, level: int) -> int:
        """L3: schedule queue of a level (after clamping)."""
        level = self.clamp(level)
        if level == 0:
            raise ValueError("level 0 has no schedule queue")
        return level - 1

    def level_of_queue(self, queue_id: int) -> int:
        """Inverse of :meth:`queue_id`."""
        return queue_id + 1

    def levels(self) -> range:
        """1..max_level."""
        return range(1, self.max_level + 1)

    def __str__(self) -> str:
        return " ".join(format_delay(ms) for ms in self.delays_ms)


def format_delay(delay_ms: int) -> str:
    """Largest whole unit that represents a delay exactly: 90000 -> '90s', 120000 -> '2m'."""
    for unit in ("d", "h", "m", "s"):
        if delay_ms % _UNIT_MS[unit] == 0:
            return f"{delay_ms // _UNIT_MS[unit]}{unit}"
    return f"{delay_ms}ms"
