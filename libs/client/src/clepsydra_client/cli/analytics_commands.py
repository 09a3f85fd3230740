"""``clepsydra report run|list|show`` and ``clepsydra export status``: the analytics service's
API over HTTP (this package never imports pyspark; the jobs run in the analytics service)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeVar

from clepsydra_client.cli.render import format_ts, render_table
from clepsydra_core.errors import Unavailable
from clepsydra_core.runtime.http import HttpClient
from clepsydra_core.wire.analytics import (
    JOB_NAMES,
    ExportStatus,
    ReportList,
    RunRequest,
    RunResult,
)
from clepsydra_core.wire.codec import WireValue

if TYPE_CHECKING:
    from clepsydra_client.cli.commands import Context, Output

RUN_TIMEOUT_S = 1800.0
"""How long ``report run`` waits for the jobs (the service has its own limit too)."""
COLUMNS = {
    "lateness": ("level", "hour", "count", "p50Ms", "p95Ms", "p99Ms", "maxMs", "early",
                 "pending"),
    "funnel": ("group", "topic", "total", "firstTime", "afterRetries", "deadLettered",
               "firstTimeShare"),
    "dead-letters": ("group", "topic", "reason", "count", "oldestAgeS"),
    "throughput": ("topic", "minute", "messages", "bytes"),
    "consumer-lag": ("group", "topic", "lag", "queues"),
}


_W = TypeVar("_W", bound=WireValue)


class AnalyticsUnavailable(Unavailable):
    """The analytics service did not answer."""


def _http(ctx: Context, timeout_s: float | None = None) -> HttpClient:
    return HttpClient(ctx.analytics_url, timeout_s=timeout_s or ctx.timeout_s,
                      service="analytics service", token=ctx.token)


def _call(ctx: Context, method: str, path: str, body: Any = None,
          timeout_s: float | None = None) -> dict[str, Any]:
    http = _http(ctx, timeout_s)
    try:
        return http.request(method, path, json=body)
    except Unavailable as exc:
        raise AnalyticsUnavailable(exc.message) from exc
    finally:
        http.close()


def _cell(value: Any) -> Any:
    if isinstance(value, dict):
        return " ".join(f"{k}:{v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else value


def _read(cls: type[_W], raw: Any) -> _W:
    from clepsydra_core.wire.codec import read_answer

    return read_answer(cls, raw)


def result_text(result: dict[str, Any]) -> str:
    parts = []
    for name, rows in result.get("jobs", {}).items():
        columns = COLUMNS.get(name) or (tuple(rows[0]) if rows else ())
        parts.append(f"{name} ({len(rows)} row{'s' if len(rows) != 1 else ''})")
        if rows:
            parts.append(render_table(list(columns),
                                      [[_cell(r.get(c)) for c in columns] for r in rows]))
    parts.append(f"report: {result.get('report')}")
    return "\n".join(parts)


def report_run(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.commands import Output

    body = RunRequest(jobs=args.job or None, since=args.since or None)
    result = _read(RunResult, _call(ctx, "POST", "/v1/reports", body.to_json(),
                                    timeout_s=RUN_TIMEOUT_S))
    if args.format == "json":
        args.json = True  # the one object, printed by main() like every --json answer
    return Output(result.to_json(), result_text(result.to_json()))


def report_list(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.commands import Output

    runs = _read(ReportList, _call(ctx, "GET", "/v1/reports")).reports
    rows = [(r.run_id, format_ts(r.now_ms), ",".join(r.ran), r.input_files, r.report)
            for r in runs]
    text = (render_table(["RUN", "AT", "JOBS", "FILES", "REPORT"], rows) if rows
            else "no report runs yet: `clepsydra report run`")
    return Output([r.to_json() for r in runs], text)


def report_show(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.commands import Output

    http = _http(ctx)
    result = _read(RunResult, _call(ctx, "GET", http.path("/v1/reports/{}", args.run_id))
                   ).to_json()
    return Output(result, result_text(result))


def export_status(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.commands import Output

    status = _read(ExportStatus, _call(ctx, "GET", "/v1/export/status"))
    lines = [f"{t.topic}  lag={t.lag} exported={t.exported_rows} queues={t.queues}"
             for t in status.topics]
    return Output(status.to_json(), "\n".join(lines) if lines else "no exported topics")


def add_analytics_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``report`` and ``export`` sub-commands on the ``clepsydra`` parser."""
    report = sub.add_parser("report", help="analytics reports (Spark jobs over the export)")
    actions = report.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class,
                                    required=True)
    r = actions.add_parser("run", help="export what is new and run the jobs now")
    r.add_argument("--job", action="append",
                   help=f"a job to run: {', '.join(JOB_NAMES)} (repeatable; default all)")
    r.add_argument("--since", help="the window, e.g. 2h (units s m h d)")
    r.add_argument("--format", choices=("text", "json"), default="text")
    r.set_defaults(fn=report_run)
    r = actions.add_parser("list", help="the report runs kept, newest first")
    r.set_defaults(fn=report_list)
    r = actions.add_parser("show", help="one run's rows")
    r.add_argument("run_id")
    r.set_defaults(fn=report_show)
    export = sub.add_parser("export", help="the Parquet export")
    actions = export.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class,
                                    required=True)
    e = actions.add_parser("status", help="each exported topic's lag, one line per topic")
    e.set_defaults(fn=export_status)
