"""The pages' view logic, pure (no Flask, no I/O): what a search box entry is, how a body is
previewed, paging, and the due-time chart drawn as inline SVG on the server (no script, no
CDN: DEC-console-server-rendered)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from clepsydra_core.msgid import offset_msg_id

PREVIEW_MAX_CHARS = 2048
"""A body preview shows at most this many characters (then says it was cut)."""
_HEX32 = re.compile(r"^[0-9A-Fa-f]{32}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


@dataclass(frozen=True, slots=True)
class Query:
    """What the search box was given: ``kind`` is ``id`` (a msgId or offsetMsgId, and, when it
    is 32 hex digits, perhaps a trace id too), ``trace`` (a traceparent), ``key`` or
    ``empty``."""

    kind: str
    text: str
    trace_id: str | None = None


def classify_query(raw: str | None) -> Query:
    text = (raw or "").strip()
    if not text:
        return Query("empty", "")
    found = _TRACEPARENT.match(text.lower())
    if found:
        return Query("trace", text, found.group(1))
    if _HEX32.match(text):
        return Query("id", text, text.lower())  # a msgId and a trace id look alike
    if offset_msg_id(text) is not None:
        return Query("id", text)
    return Query("key", text)


@dataclass(frozen=True, slots=True)
class Preview:
    """A body as a page shows it: ``kind`` ``text`` (``text`` holds it, to be escaped by the
    template), ``binary`` (``text`` holds a hex dump of its start), or ``empty``; ``cut`` when
    only the start is shown; ``size`` in bytes."""

    kind: str
    text: str
    size: int
    cut: bool


def body_preview(body: str | None, body_base64: str | None, size: int,
                 max_chars: int = PREVIEW_MAX_CHARS) -> Preview:
    """The preview of a stored message's body (the store sends text as ``body``, anything else
    as ``bodyBase64``)."""
    if body is not None:
        if not body:
            return Preview("empty", "", size, False)
        return Preview("text", body[:max_chars], size, len(body) > max_chars)
    if body_base64 is None:
        return Preview("empty", "", size, False)
    try:
        raw = base64.b64decode(body_base64, validate=True)
    except (binascii.Error, ValueError):
        return Preview("binary", "(not readable base64)", size, False)
    head = raw[:max_chars // 3]
    dump = " ".join(f"{b:02x}" for b in head)
    return Preview("binary", dump, size or len(raw), len(raw) > len(head))


@dataclass(frozen=True, slots=True)
class Page:
    """A page of a list: ``offset`` and ``size`` as asked, bounded by ``most``."""

    offset: int
    size: int

    @classmethod
    def of(cls, args: Mapping[str, str], default: int, most: int) -> Page:
        return cls(_int(args.get("offset"), 0, 0, 1 << 62),
                   _int(args.get("max"), default, 1, most))

    def next(self, next_offset: int | None = None) -> int:
        return self.offset + self.size if next_offset is None else next_offset

    @property
    def previous(self) -> int | None:
        return max(self.offset - self.size, 0) if self.offset > 0 else None


def _int(raw: str | None, default: int, low: int, high: int) -> int:
    if raw is None or not raw.strip().isdigit():
        return default
    return max(low, min(int(raw), high))


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int


def bar_chart_svg(bars: Sequence[Bar], *, title: str, width: int = 640, height: int = 180,
                  empty: str = "nothing pending") -> str:
    """A bar chart as an inline SVG document (every text escaped): one bar per entry, its value
    above it, its label below; ``empty`` written in the middle when there are none."""
    pad, label_h, top = 28, 18, 18
    inner_h = height - label_h - top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
           f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'aria-label="{escape(title)}"><title>{escape(title)}</title>',
           f'<line x1="{pad}" y1="{top + inner_h}" x2="{width - 4}" y2="{top + inner_h}" '
           'class="axis"/>']
    if not bars:
        out.append(f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" '
                   f'class="empty">{escape(empty)}</text></svg>')
        return "".join(out)
    most = max(b.value for b in bars) or 1
    step = (width - pad - 4) / len(bars)
    bar_w = max(step * 0.7, 1.0)
    for i, bar in enumerate(bars):
        h = inner_h * bar.value / most
        x = pad + i * step + (step - bar_w) / 2
        y = top + inner_h - h
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                   f'class="bar"><title>{escape(bar.label)}: {bar.value}</title></rect>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                   f'class="value">{bar.value}</text>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{height - 4}" text-anchor="middle" '
                   f'class="label">{escape(bar.label)}</text>')
    out.append("</svg>")
    return "".join(out)


def hour_label(hour: int) -> str:
    """Hour ``hour`` ahead as a chart label: ``<1h``, ``1-2h``, ..."""
    return "<1h" if hour == 0 else f"{hour}-{hour + 1}h"
