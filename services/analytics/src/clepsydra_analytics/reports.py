"""The reports folder as the API sees it: list the runs, read one, and start a run as its own
process (``python -m clepsydra_analytics jobs run --format json``), so the JVM and its memory
live only as long as the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from clepsydra_analytics import jobs
from clepsydra_analytics.settings import AnalyticsSettings, parse_duration_s
from clepsydra_core import naming
from clepsydra_core.errors import ClepsydraError, NotFound, ValidationError
from clepsydra_core.wire.analytics import RunResult, RunSummary


class RunFailed(ClepsydraError):
    """A jobs run process failed (its error output is in the message)."""

    code = "REPORT_RUN_FAILED"
    http_status = 500


class ReportNotFound(NotFound):
    """No report run with that id."""

    code = "REPORT_NOT_FOUND"


def _valid_run_id(run_id: str) -> str:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ReportNotFound(f"no report {run_id!r}")
    return run_id


class Reports:
    def __init__(self, settings: AnalyticsSettings) -> None:
        self.settings = settings
        self._run_lock = threading.Lock()

    @property
    def folder(self) -> Path:
        return self.settings.reports_dir

    def run_dir(self, run_id: str) -> Path:
        path = self.folder / _valid_run_id(run_id)
        if not (path / naming.REPORT_RESULT).is_file():
            raise ReportNotFound(f"no report {run_id!r} in {self.folder}")
        return path

    def runs(self) -> list[RunSummary]:
        """Every complete run, newest first, without its rows (a result.json that cannot be
        read is left out)."""
        if not self.folder.is_dir():
            return []
        out = []
        for path in sorted(self.folder.iterdir(), reverse=True):
            result_path = path / naming.REPORT_RESULT
            if not result_path.is_file():
                continue
            try:
                result = RunResult.from_json(json.loads(result_path.read_text()))
            except (ValueError, ValidationError):
                continue
            out.append(result.summary())
        return out

    def get(self, run_id: str) -> RunResult:
        return RunResult.from_json(
            json.loads((self.run_dir(run_id) / naming.REPORT_RESULT).read_text()),
            what="result.json")

    def file(self, run_id: str, relative: str) -> Path:
        """A file of a run (the HTML, a chart); ReportNotFound outside the run folder."""
        base = self.run_dir(run_id).resolve()
        path = (base / relative).resolve()
        if base not in path.parents or not path.is_file():
            raise ReportNotFound(f"report {run_id!r} has no {relative!r}")
        return path

    def run(self, job_names: list[str] | None, since: str | None) -> RunResult:
        """Run the jobs now in a child process (one run at a time); its result."""
        jobs.check_jobs(job_names)
        if since is not None:
            parse_duration_s(since, "since")
        argv = [sys.executable, "-m", "clepsydra_analytics", "jobs", "run", "--format", "json"]
        for name in job_names or []:
            argv += ["--job", name]
        if since is not None:
            argv += ["--since", since]
        with self._run_lock:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ),
                                      timeout=self.settings.job_timeout_s, check=False)
            except subprocess.TimeoutExpired as exc:
                raise RunFailed(f"the jobs run took longer than "
                                f"{self.settings.job_timeout_s:g}s "
                                "(CLEPSYDRA_ANALYTICS_JOB_TIMEOUT_S)") from exc
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        try:
            answer: dict[str, Any] = json.loads(last) if last else {}
        except ValueError:
            answer = {}
        if proc.returncode == 0 and "runId" in answer:
            return RunResult.from_json(answer, what="the jobs run's result")
        message = answer.get("message") or _tail(proc.stderr) or f"exit {proc.returncode}"
        if proc.returncode == 2:
            raise ValidationError(str(message), code=str(answer.get("error") or "INVALID_REQUEST"))
        raise RunFailed(f"the jobs run failed: {message}")


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
