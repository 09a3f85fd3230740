"""A bench's scratch folder under the system's temporary directory, removed when the bench's
process exits (``atexit``: after its ``finally`` blocks stopped what it started), so that
``make bench`` does not leave gigabytes behind: a bench's stores, Redis and exports write there
(``bench.pending_cost`` alone writes 3-4 GiB), and a store whose disk is 90 % full answers 507
``DISK_FULL`` (``CLEPSYDRA_STORE_DISK_MAX_RATIO``), the next bench's included.

``CLEPSYDRA_BENCH_KEEP=1`` keeps it (its path is printed) for a look at the logs and data.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

KEEP_VAR = "CLEPSYDRA_BENCH_KEEP"


def scratch_dir(prefix: str) -> Path:
    """A new folder named ``prefix…``, removed at exit unless ``CLEPSYDRA_BENCH_KEEP=1``."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(_remove, path)
    return path


def _remove(path: Path) -> None:
    if os.environ.get(KEEP_VAR) == "1":
        print(f"kept {path} ({KEEP_VAR}=1)", file=sys.stderr)
        return
    shutil.rmtree(path, ignore_errors=True)
