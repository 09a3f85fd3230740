"""The disk guard (DEC-disk-full-507): levels from a sample, the 507 answer naming the setting, the
quota probe over real files, and the settings that bound it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clepsydra_core.errors import ConfigError, DiskFull
from clepsydra_store.engine.log.disk_usage import (
    DiskGuard,
    DiskLevel,
    DiskSample,
    quota_probe,
    volume_probe,
)
from clepsydra_store.settings import StoreSettings


class Disk:
    """A disk whose usage the test sets (the probe's answer)."""

    def __init__(self) -> None:
        self.used = 0

    def __call__(self) -> DiskSample:
        return DiskSample(self.used, 1000)


def test_levels_follow_the_warning_and_high_water_ratios() -> None:
    disk = Disk()
    guard = DiskGuard(disk, max_ratio=0.9, warn_ratio=0.85)
    assert guard.sample() is DiskLevel.OK and guard.writable
    disk.used = 850
    assert guard.sample() is DiskLevel.WARNING and guard.writable
    guard.check()
    disk.used = 900
    assert guard.sample() is DiskLevel.FULL and not guard.writable
    with pytest.raises(DiskFull) as refused:
        guard.check()
    assert refused.value.http_status == 507 and refused.value.code == "DISK_FULL"
    assert "90.0% used" in refused.value.message
    assert "CLEPSYDRA_STORE_DISK_MAX_RATIO=0.9" in refused.value.message
    assert guard.stats()["disk_writable"] == 0 and guard.stats()["disk_warning"] == 1
    disk.used = 100
    assert guard.sample() is DiskLevel.OK
    guard.check()
    assert guard.stats() == {"disk_used_ratio": 0.1, "disk_used_bytes": 100,
                             "disk_total_bytes": 1000, "disk_max_ratio": 0.9,
                             "disk_warn_ratio": 0.85, "disk_warning": 0, "disk_writable": 1}


def test_quota_probe_counts_the_files_under_its_folders(tmp_path: Path) -> None:
    # a configured capacity measured on real files
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 300)
    (tmp_path / "a" / "b" / "y").write_bytes(b"2" * 200)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "z").write_bytes(b"3" * 100)
    sample = quota_probe([tmp_path / "a", tmp_path / "c", tmp_path / "missing"], 1000)()
    assert (sample.used_bytes, sample.total_bytes, sample.ratio) == (600, 1000, 0.6)


def test_volume_probe_counts_as_df_does(tmp_path: Path) -> None:
    # used over used + available (reserved blocks are neither)
    st = os.statvfs(tmp_path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    expected = used / (used + st.f_bavail * st.f_frsize)
    assert abs(volume_probe(tmp_path)().ratio - expected) < 0.01


def test_disk_settings_are_ratios_and_warning_is_not_above_the_mark(tmp_path: Path) -> None:
    # a bad value stops start-up naming the variable
    base = {"CLEPSYDRA_HOME": str(tmp_path)}
    settings = StoreSettings.from_env(base)
    assert (settings.engine.disk_max_ratio, settings.engine.disk_warn_ratio,
            settings.engine.disk_capacity_bytes) == (0.90, 0.85, 0)
    assert settings.lock_expiry_ms == 60_000
    assert settings.poller_spin_us == 300  # DEC-poller-spin
    for env, named in ((dict(CLEPSYDRA_STORE_DISK_MAX_RATIO="1.5"), "DISK_MAX_RATIO"),
                       (dict(CLEPSYDRA_STORE_DISK_WARN_RATIO="0"), "DISK_WARN_RATIO"),
                       (dict(CLEPSYDRA_STORE_DISK_MAX_RATIO="0.8"), "DISK_WARN_RATIO"),
                       (dict(CLEPSYDRA_STORE_DISK_CAPACITY_BYTES="-1"), "CAPACITY_BYTES"),
                       (dict(CLEPSYDRA_STORE_LOCK_EXPIRY_S="0"), "LOCK_EXPIRY_S"),
                       (dict(CLEPSYDRA_STORE_POLLER_SPIN_US="10001"), "POLLER_SPIN_US")):
        with pytest.raises(ConfigError, match=named):
            StoreSettings.from_env({**base, **env})
