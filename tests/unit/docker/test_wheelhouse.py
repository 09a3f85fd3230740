"""tools/images.py keeps the wheelhouse byte-stable: what makes a second `make images` on an
unchanged tree reuse every layer."""

from __future__ import annotations

import os
from pathlib import Path

from tools.images import IMAGES, _sync


def test_sync_rewrites_only_changed_wheels_and_drops_stale_ones(tmp_path: Path) -> None:
    built, dest = tmp_path / "built", tmp_path / "dest"
    built.mkdir()
    dest.mkdir()
    for name, data in (("same-1.0-py3-none-any.whl", b"same"),
                       ("changed-1.0-py3-none-any.whl", b"new")):
        (built / name).write_bytes(data)
    (dest / "same-1.0-py3-none-any.whl").write_bytes(b"same")
    (dest / "changed-1.0-py3-none-any.whl").write_bytes(b"old")
    (dest / "gone-1.0-py3-none-any.whl").write_bytes(b"gone")
    os.utime(dest / "same-1.0-py3-none-any.whl", (1_000_000, 1_000_000))

    changed = _sync(built, dest)

    assert changed == ["changed-1.0-py3-none-any.whl", "-gone-1.0-py3-none-any.whl"]
    assert (dest / "same-1.0-py3-none-any.whl").stat().st_mtime == 1_000_000  # untouched
    assert (dest / "changed-1.0-py3-none-any.whl").read_bytes() == b"new"
    assert sorted(p.name for p in dest.iterdir()) == ["changed-1.0-py3-none-any.whl",
                                                      "same-1.0-py3-none-any.whl"]
    assert _sync(built, dest) == []  # a second run changes nothing


def test_image_names_are_the_agreed_ones() -> None:
    # the Kubernetes manifests reference these (clepsydra/<name>:<version> and :dev)
    assert {i.name for i in IMAGES} == {"store", "scheduler-worker", "scheduler-beat", "retry",
                                        "console", "gateway", "analytics-exporter",
                                        "analytics-spark", "redis"}
