"""A bench's scratch folder is gone when the bench's process ends, unless kept
(``bench/scratch.py``): ``make bench`` must not fill the disk its stores guard (507 at 90 %)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.scratch import KEEP_VAR

REPO = Path(__file__).resolve().parents[3]
CHILD = ("from bench.scratch import scratch_dir\n"
         "p = scratch_dir('clepsydra-scratch-test-')\n"
         "(p / 'home').mkdir(); (p / 'home' / 'data').write_bytes(b'x' * 4096)\n"
         "print(p)\n"
         "raise SystemExit(3)\n")  # a bench failing half-way cleans up too


def _run(keep: str | None) -> tuple[Path, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if k != KEEP_VAR}
    if keep is not None:
        env[KEEP_VAR] = keep
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    return Path(done.stdout.strip()), done


def test_the_scratch_folder_is_removed_when_the_bench_exits() -> None:
    path, done = _run(None)
    assert done.returncode == 3, done.stderr
    assert path.name.startswith("clepsydra-scratch-test-")
    assert not path.exists()


def test_keep_leaves_it_and_says_where() -> None:
    path, done = _run("1")
    try:
        assert (path / "home" / "data").stat().st_size == 4096
        assert f"kept {path}" in done.stderr
    finally:
        shutil.rmtree(path, ignore_errors=True)
