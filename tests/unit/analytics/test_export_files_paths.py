"""A local export folder is listed, probed and cleaned with the standard library (the
exporter at rest holds no pyarrow); any other URI through pyarrow's filesystem. Both give the
same answers: the same ranges, the temp files removed, the small stamp files written, read and
removed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportFiles
from clepsydra_core import naming

MESSAGES = [{"msgId": f"m{i}", "topic": "orders", "queueId": 0, "queueOffset": i,
             "storeTimestamp": 1_700_000_000_000 + i} for i in range(3)]


def exercise(files: ExportFiles) -> tuple[object, ...]:
    files.check_writable()
    table = schemas.table_of(MESSAGES)
    files.write_range("orders", 0, 0, 3, "2023-11-14T22", table)
    files.write_range("%RETRY%billing", 1, 5, 8, "2023-11-14T22", table)
    temp = f"{files.hour_dir('orders', '2023-11-14T22')}/{naming.EXPORT_TEMP_PREFIX}half"
    files.write_small(temp, b"half-written")
    removed = files.remove_temp_files()
    stamp = f"{files.root}/{naming.EXPORT_SNAPSHOT_DIR}/.probe.written"
    files.write_small(stamp, b'{"digest": "d"}')
    small = files.read_small(stamp), files.exists(stamp)
    files.remove(stamp)
    files.remove(stamp)  # gone already: nothing to do
    gone = files.read_small(stamp), files.exists(stamp)
    ranges = sorted((r.topic, r.queue_id, r.start_offset, r.end_offset, r.hour)
                    for r in files.ranges())
    read = [files.read_table(r).num_rows for r in files.files_since("2023-11-14T00")]
    return removed, small, gone, ranges, files.exported_ends(), read


def test_a_local_folder_answers_as_pyarrows_filesystem_does(tmp_path: Path) -> None:
    local = ExportFiles(str(tmp_path / "export"))
    remote = ExportFiles("mock:///export")
    assert local.local and not remote.local
    assert exercise(local) == exercise(remote) == (
        1, (b'{"digest": "d"}', True), (None, False),
        [("%RETRY%billing", 1, 5, 8, "2023-11-14T22"), ("orders", 0, 0, 3, "2023-11-14T22")],
        {("orders", 0): 3, ("%RETRY%billing", 1): 8}, [3, 3])
    assert ExportFiles(f"file://{tmp_path / 'export'}").root == local.root


def test_listing_a_local_folder_imports_no_pyarrow(tmp_path: Path) -> None:
    code = f"""
import sys
from clepsydra_analytics.export_files import ExportFiles
files = ExportFiles({str(tmp_path / "export")!r})
files.check_writable()
files.remove_temp_files()
files.exported_ends()
assert "pyarrow" not in sys.modules, "pyarrow imported"
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"})


def test_an_unusable_uri_is_a_config_error() -> None:
    from clepsydra_core.errors import ConfigError

    with pytest.raises(ConfigError, match="CLEPSYDRA_ANALYTICS_EXPORT_URI"):
        ExportFiles("nosuchscheme://bucket/export")
