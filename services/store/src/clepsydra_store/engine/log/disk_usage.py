"""DiskGuard: the store's disk guard rails (SPEC P4, DEC-disk-full-507; RocketMQ's
diskSpaceWarningLevelRatio and the "disk full" flag its put path checks).

The used share of the disk holding the CommitLog is sampled every second by the housekeeping
thread (not on the put path: a put only reads a flag):

- at or past the **warning** ratio (``CLEPSYDRA_STORE_DISK_WARN_RATIO``, 0.85) the store logs a
  warning (once per crossing) and retention runs on every sample instead of once a minute;
- at or past the **high-water mark** (``CLEPSYDRA_STORE_DISK_MAX_RATIO``, 0.90) every message
  write of a client - produce, and the retry service's copies (send-back, DLQ resend) - is
  refused with ``507 DISK_FULL`` naming the ratio and the setting, before anything is written.
  Scheduler hand-overs and retention's carry-forward still write: they move messages that are
  stored already, and refusing them would only make delayed messages late.

The used share is that of the volume (``used / (used + available)``, the ``Use%`` of ``df``),
or, with ``CLEPSYDRA_STORE_DISK_CAPACITY_BYTES`` set, the bytes of the store's own files over
that capacity (a quota on a shared volume; tests use a small one).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from clepsydra_core.errors import DiskFull

logger = logging.getLogger(__name__)

DISK_MAX_RATIO_VAR = "CLEPSYDRA_STORE_DISK_MAX_RATIO"
DISK_WARN_RATIO_VAR = "CLEPSYDRA_STORE_DISK_WARN_RATIO"
DISK_CAPACITY_VAR = "CLEPSYDRA_STORE_DISK_CAPACITY_BYTES"
"""The settings named in logs and in the 507 answer (read by clepsydra_store.settings)."""


@dataclass(frozen=True, slots=True)
class DiskSample:
    used_bytes: int
    total_bytes: int

    @property
    def ratio(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0


DiskProbe = Callable[[], DiskSample]


class DiskLevel(StrEnum):
    OK = "ok"
    WARNING = "warning"
    FULL = "full"


def volume_probe(path: Path) -> DiskProbe:
    """The volume holding ``path`` as ``df`` shows it: used over used + available to this
    process (blocks reserved for root, or held back by the filesystem, count as neither)."""
    def probe() -> DiskSample:
        usage = shutil.disk_usage(path)  # its ``free`` is what an unprivileged writer gets
        return DiskSample(usage.used, usage.used + usage.free)
    return probe


def quota_probe(roots: Iterable[Path], capacity_bytes: int) -> DiskProbe:
    """The bytes of every file under ``roots`` over ``capacity_bytes``."""
    folders = list(dict.fromkeys(roots))

    def probe() -> DiskSample:
        return DiskSample(sum(_tree_bytes(root) for root in folders), capacity_bytes)
    return probe


def _tree_bytes(root: Path) -> int:
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:  # deleted while we walked
                        continue
        except FileNotFoundError:
            continue
    return total


class DiskGuard:
    def __init__(self, probe: DiskProbe, *, max_ratio: float, warn_ratio: float) -> None:
        self._probe = probe
        self.max_ratio = max_ratio
        self.warn_ratio = min(warn_ratio, max_ratio)
        self._lock = threading.Lock()
        self.last = DiskSample(0, 0)
        self.level = DiskLevel.OK

    @property
    def writable(self) -> bool:
        """False while the last sample is at or past the high-water mark."""
        return self.level is not DiskLevel.FULL

    def sample(self) -> DiskLevel:
        """Measure now; log a change of level."""
        sample = self._probe()
        ratio = sample.ratio
        level = (DiskLevel.FULL if ratio >= self.max_ratio else
                 DiskLevel.WARNING if ratio >= self.warn_ratio else DiskLevel.OK)
        with self._lock:
            before, self.level, self.last = self.level, level, sample
        if level is not before:
            self._log(before, level, sample)
        return level

    def _log(self, before: DiskLevel, level: DiskLevel, sample: DiskSample) -> None:
        args = (sample.ratio, sample.used_bytes, sample.total_bytes)
        if level is DiskLevel.FULL:
            logger.error("disk full: used_ratio=%.3f used_bytes=%d total_bytes=%d is past "
                         f"{DISK_MAX_RATIO_VAR}={self.max_ratio:g}; message writes are refused "
                         "(507 DISK_FULL) until retention frees space", *args)
        elif level is DiskLevel.WARNING:
            logger.warning("disk usage high: used_ratio=%.3f used_bytes=%d total_bytes=%d is "
                           f"past {DISK_WARN_RATIO_VAR}={self.warn_ratio:g} (writes stop at "
                           f"{DISK_MAX_RATIO_VAR}={self.max_ratio:g})%s", *args,
                           "; writes accepted again" if before is DiskLevel.FULL else "")
        else:
            logger.info("disk usage back to normal: used_ratio=%.3f used_bytes=%d "
                        "total_bytes=%d", *args)

    def check(self) -> None:
        """DiskFull when writes are refused (DEC-disk-full-507)."""
        if self.level is DiskLevel.FULL:
            last = self.last
            raise DiskFull(f"the store's disk is {100 * last.ratio:.1f}% used "
                           f"({last.used_bytes} of {last.total_bytes} bytes), past "
                           f"{DISK_MAX_RATIO_VAR}={self.max_ratio:g}: writes are refused until "
                           "retention frees space; nothing was stored")

    def stats(self) -> dict[str, float]:
        last = self.last
        return {"disk_used_ratio": last.ratio, "disk_used_bytes": last.used_bytes,
                "disk_total_bytes": last.total_bytes, "disk_max_ratio": self.max_ratio,
                "disk_warn_ratio": self.warn_ratio,
                "disk_warning": float(self.level is not DiskLevel.OK),
                "disk_writable": float(self.writable)}
