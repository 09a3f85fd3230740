"""Text output of the ``clepsydra`` command: aligned tables, key/value blocks, times and
durations, and a simple text progress bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from clepsydra_core.levels import format_delay


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return text.replace("\n", "\\n").replace("\t", " ")


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                 right: Iterable[int] = (), max_width: int = 60, empty: str = "(none)") -> str:
    """Columns padded to their widest cell (cells cut at ``max_width``); ``right`` lists the
    columns aligned right (numbers)."""
    body = [[_cut(cell(v), max_width) for v in row] for row in rows]
    if not body:
        return empty
    widths = [len(h) for h in headers]
    for row in body:
        for i, text in enumerate(row):
            if i < len(widths):
                widths[i] = max(widths[i], len(text))
    right_cols = set(right)

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if i in right_cols else v.ljust(widths[i])
                 for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out.extend(line(row) for row in body)
    return "\n".join(out)


def render_fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """``name  value`` lines with the names aligned."""
    items = [(k, cell(v)) for k, v in pairs]
    if not items:
        return ""
    width = max(len(k) for k, _ in items)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in items)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def format_ts(ms: int | None) -> str:
    """Epoch ms as local ``YYYY-mm-dd HH:MM:SS.mmm`` (``-`` for none)."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def format_due(deliver_at: int | None, now_ms: int | None = None) -> str:
    """A delivery time: ``2027-01-01 10:00:00.000 (in 3h05m)`` (local time), ``(due now)``
    once it has passed, ``-`` for none."""
    if deliver_at is None:
        return "-"
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ahead = deliver_at - now_ms
    when = "due now" if ahead <= 0 else "in " + format_duration_ms(ahead)
    return f"{format_ts(deliver_at)} ({when})"


def format_duration_ms(ms: int | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``2h03m``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def format_delay_ms(ms: int) -> str:
    return format_delay(ms) if ms else "0"


class ProgressBar:
    """``label [#########.........]  450/1000`` on one line, redrawn in place on a terminal
    (at most ten times a second) and finished with a newline. Off a terminal (a pipe, a log)
    nothing is drawn, so scripts see only the command's output."""

    def __init__(self, label: str, total: int | None, *, stream: TextIO | None = None,
                 enabled: bool = True, width: int = 30) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.interactive = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_draw = 0.0

    def render(self) -> str:
        if self.total:
            filled = min(self.width, self.width * self.done // self.total)
            bar = "#" * filled + "." * (self.width - filled)
            return f"{self.label} [{bar}] {self.done}/{self.total}"
        return f"{self.label} {self.done}"

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.interactive and time.monotonic() - self._last_draw >= 0.1:
            self._last_draw = time.monotonic()
            self.stream.write("\r" + self.render())
            self.stream.flush()

    def finish(self) -> None:
        if not self.interactive:
            return
        self.stream.write("\r" + self.render() + "\n")
        self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
