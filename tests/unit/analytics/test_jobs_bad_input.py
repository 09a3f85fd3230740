"""`jobs run` refuses bad input before any JVM starts: exit 2, the problem named, no traceback,
nothing written."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clepsydra_analytics.cli_jobs import jobs_run
from clepsydra_analytics.settings import AnalyticsSettings


def settings_at(home: Path, **env: str) -> AnalyticsSettings:
    return AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(home),
                                       "CLEPSYDRA_STORE_URL": "http://127.0.0.1:9", **env})


def run(settings: AnalyticsSettings, **kw: object) -> tuple[int, dict[str, str]]:
    out = io.StringIO()
    code = jobs_run(settings, output="json", out=out, **{"jobs": None, "since": None, **kw})
    return code, json.loads(out.getvalue())


def test_unknown_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, answer = run(settings_at(tmp_path), jobs=["lateness", "latency"])
    assert code == 2 and answer["error"] == "UNKNOWN_JOB"
    assert "unknown job 'latency'" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()


def test_bad_since(tmp_path: Path) -> None:
    code, answer = run(settings_at(tmp_path), since="two hours")
    assert code == 2 and answer["error"] == "INVALID_SINCE"
    assert "'two hours'" in answer["message"]


def test_unwritable_export_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    code, answer = run(settings_at(tmp_path,
                                   CLEPSYDRA_ANALYTICS_EXPORT_URI=str(blocker / "export")))
    assert code == 2 and answer["error"] == "CONFIG_ERROR"
    err = capsys.readouterr().err
    assert str(blocker / "export") in err and "not writable" in err and "Traceback" not in err


def test_unwritable_reports_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    code, answer = run(settings_at(tmp_path,
                                   CLEPSYDRA_ANALYTICS_REPORTS_DIR=str(blocker / "reports")),
                       export_first=False)
    assert code == 2 and "reports folder" in answer["message"]


def test_bad_setting_stops_the_entry_point_naming_it(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "clepsydra_analytics", "jobs", "run"],
                          env={"CLEPSYDRA_HOME": str(tmp_path),
                               "CLEPSYDRA_ANALYTICS_RUNS_KEPT": "none", "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "CLEPSYDRA_ANALYTICS_RUNS_KEPT" in proc.stderr and "Traceback" not in proc.stderr
