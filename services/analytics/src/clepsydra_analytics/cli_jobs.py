"""``python -m clepsydra_analytics jobs run``: the runner from the command line, a summary
table (or the result JSON) on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from clepsydra_analytics.runner import run_jobs
from clepsydra_analytics.settings import AnalyticsSettings, parse_duration_s
from clepsydra_core.errors import ClepsydraError, ConfigError, ValidationError

PROG = "clepsydra analytics"


def summary(result: dict[str, Any]) -> str:
    """One line per table: its name and row count, then the first rows of each."""
    lines = [f"run {result['runId']}: {result['inputFiles']} export files, "
             f"export {result['export']['mode']}, {result['elapsedS']:.1f}s"]
    for name, rows in result["jobs"].items():
        lines.append(f"\n{name}: {len(rows)} row(s)")
        if rows:
            columns = list(rows[0])
            lines.append("  " + "  ".join(columns))
            lines += ["  " + "  ".join(str(r.get(c)) for c in columns) for r in rows[:20]]
    lines.append(f"\nreport: {result['report']}")
    return "\n".join(lines)


def jobs_run(settings: AnalyticsSettings, *, jobs: list[str] | None, since: str | None,
             output: str, export_first: bool = True, out: TextIO | None = None) -> int:
    """Exit 0 with the results; 2 with ``{error, message}`` (json) or one line (text) for bad
    input; 1 when the run failed."""
    out = out or sys.stdout
    try:
        since_s = (parse_duration_s(since, "--since") if since is not None
                   else settings.default_since_s)
        result = run_jobs(settings, jobs, since_s, export_first=export_first).to_json()
    except (ValidationError, ConfigError) as exc:
        return _fail(exc, output, out, 2)
    except ClepsydraError as exc:
        return _fail(exc, output, out, 1 if exc.http_status >= 500 and
                     exc.code != "CORRUPT_EXPORT_FILE" else 2)
    if output == "json":
        out.write(json.dumps(result) + "\n")
    else:
        out.write(summary(result) + "\n")
    return 0


def _fail(exc: ClepsydraError, output: str, out: TextIO, code: int) -> int:
    if output == "json":
        out.write(json.dumps(exc.to_json()) + "\n")
    print(f"{PROG}: {exc.message}", file=sys.stderr)
    return code
