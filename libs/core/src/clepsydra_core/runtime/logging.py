"""Log lines of every process, configured once by each entry point (library code adds no
handlers).

Every process of the stack writes the same lines: by default one JSON object per
line with ``time``, ``level``, ``service``, ``logger``, ``message`` and, inside a span,
``trace_id`` and ``span_id`` (and ``exc`` for an exception), so a trace id printed in a log line
finds the message's whole life. ``CLEPSYDRA_LOG_FORMAT=text`` writes the same fields as one
readable line for people. Whatever else would write to the stream goes through here too:
gunicorn's own lines (``clepsydra_web.server``), Celery's (its ``setup_logging`` signal, and its
banner left out) and Python warnings (``logging.captureWarnings``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from typing import IO, Any

from clepsydra_core.settings import LOG_FORMATS as FORMATS
from clepsydra_core.settings import LOG_JSON as JSON
from clepsydra_core.settings import LOG_TEXT as TEXT
from clepsydra_core.settings import CommonSettings

_current: dict[str, str] = {"service": "clepsydra", "format": JSON}
"""What :func:`configure` chose for this process (a formatter made later, e.g. by gunicorn's
logger class, follows it)."""


def _time(record: logging.LogRecord) -> str:
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z")


def _span_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the span active in this thread, None outside one."""
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - telemetry is a dependency of core
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def fields(record: logging.LogRecord, service: str | None = None) -> dict[str, Any]:
    """The fields of one log line, in their order."""
    out: dict[str, Any] = {
        "time": _time(record),
        "level": record.levelname,
        "service": service or _current["service"],
        "logger": record.name,
        "message": record.getMessage(),
    }
    ids = _span_ids()
    if ids is not None:
        out["trace_id"], out["span_id"] = ids
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module's docstring)."""

    def __init__(self, service: str | None = None) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out = fields(record, self.service)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level service logger: message [trace_id=… span_id=…]``, an exception's
    traceback on the lines after it."""

    def __init__(self, service: str | None = None) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out = fields(record, self.service)
        line = (f"{out['time']} {out['level']:<7} {out['service']} {out['logger']}: "
                f"{out['message']}")
        if "trace_id" in out:
            line += f" trace_id={out['trace_id']} span_id={out['span_id']}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(service: str | None = None) -> logging.Formatter:
    """A formatter of the format :func:`configure` chose."""
    return TextFormatter(service) if _current["format"] == TEXT else JsonFormatter(service)


def configure(level: str = "INFO", *, service: str | None = None, fmt: str = JSON,
              stream: IO[str] | None = None) -> None:
    """Send every log record (and every Python warning) to ``stream`` (stdout) in ``fmt``;
    call once per process, before anything logs."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if service:
        _current["service"] = service
    _current["format"] = fmt
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)


def configure_from(settings: CommonSettings, service: str) -> None:
    """This process's log lines as its settings say (CLEPSYDRA_LOG_LEVEL,
    CLEPSYDRA_LOG_FORMAT), named ``service``."""
    configure(settings.log_level, service=service, fmt=settings.log_format)


CELERY_ROOT_WARNING = r"You're running the worker with superuser privileges"
"""The start of Celery's SecurityWarning for a worker whose uid or gid is 0."""
CELERY_SERIALIZERS = {"accept_content": ["json"], "task_serializer": "json",
                      "result_serializer": "json"}
"""The Celery settings of every worker of the stack: JSON only, never pickle."""


def quiet_celery_root_warning() -> None:
    """Leave out Celery's warning about a worker running as root.

    The stack runs its workers as the user who starts it, as intended: uid 10001 in the
    images and on Kubernetes, the developer locally (root in a container or a CI machine).
    Celery's warning is about pickle — a root worker that unpickles what the broker hands it
    can be made to run any code, which is why Celery refuses to start as root with pickle
    accepted — and every worker of the stack accepts JSON only (:data:`CELERY_SERIALIZERS`),
    so the warning names no danger here and would only teach people to ignore warnings."""
    warnings.filterwarnings("ignore", message=CELERY_ROOT_WARNING)
