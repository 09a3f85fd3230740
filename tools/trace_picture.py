"""One message's trace as a picture (docs/tracing.md, SPEC O1): a Gantt-like tree, one row per
span in the order of the tree (each child under its parent, by start time), its bar from its
start to its end, coloured by the process that made it.

    python -m tools.trace_picture SPANS.jsonl OUT.png [--trace TRACE_ID ...]

``SPANS.jsonl`` holds one span a line in the format of ``CLEPSYDRA_OTEL_EXPORTER=file:<path>``
(clepsydra_core.runtime.telemetry.JsonLinesSpanExporter: name, service, traceId, spanId,
parentSpanId, links, attributes, start, end). Every trace whose root is a ``client.produce`` span is
drawn (or the ``--trace`` ones), one panel each, titled with what happened to its message. The
README's picture is redone with

    CLEPSYDRA_TRACE_OUT=docs/trace pytest -p tools.pytest_plugin -m integration \\
        tests/integration/retry/test_trace_tree.py
    python -m tools.trace_picture docs/trace.jsonl docs/trace.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from clepsydra_core.runtime import telemetry

COLOURS = {telemetry.CLIENT_SERVICE: "#4C72B0", telemetry.STORE_SERVICE: "#DD8452",
           telemetry.RETRY_SERVICE: "#55A868", telemetry.SCHEDULER_SERVICE: "#8172B3"}
OTHER_COLOUR = "#999999"
NOTES = (("reconsume", telemetry.RECONSUME_TIMES), ("", telemetry.RESULT),
         ("", telemetry.OUTCOME), ("", telemetry.DLQ_REASON))
"""Attributes written beside a bar: (label, attribute)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One drawn span: its trace, its depth in the tree, times in ms since the trace began."""

    trace_id: str
    span_id: str
    depth: int
    name: str
    service: str
    start_ms: float
    end_ms: float
    linked: bool
    note: str
    """A few of its attributes (reconsume times, result, outcome, DLQ reason)."""


def load(path: Path) -> list[dict[str, Any]]:
    """The spans of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def traces(spans: Iterable[dict[str, Any]]) -> list[str]:
    """Ids of the traces rooted at a ``client.produce`` span, the earliest first."""
    roots = [s for s in spans if s["name"] == "client.produce" and not s.get("parentSpanId")]
    return [s["traceId"] for s in sorted(roots, key=lambda s: s["start"])]


def tree_rows(spans: Sequence[dict[str, Any]], trace_id: str) -> list[Row]:
    """The spans of one trace in the order of its tree; a span whose parent was not exported
    is drawn as a root."""
    mine = [s for s in spans if s["traceId"] == trace_id]
    ids = {s["spanId"] for s in mine}
    t0 = min(s["start"] for s in mine)
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in mine:
        parent = span.get("parentSpanId")
        children.setdefault(parent if parent in ids else None, []).append(span)
    rows: list[Row] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["start"]):
            rows.append(Row(trace_id, span["spanId"], depth, span["name"],
                            span.get("service") or "", (span["start"] - t0) / 1e6,
                            (span["end"] - t0) / 1e6, bool(span.get("links")), _note(span)))
            walk(span["spanId"], depth + 1)

    walk(None, 0)
    return rows


def story(spans: Sequence[dict[str, Any]], trace_id: str) -> str:
    """What happened to the trace's message, in a few words (the panel's title)."""
    mine = [s for s in spans if s["traceId"] == trace_id]
    attrs = [s.get("attributes") or {} for s in mine]
    parts = []
    level = next((a.get(telemetry.DELAY_LEVEL) for s, a in zip(mine, attrs, strict=True)
                  if s["name"] == "client.produce"), None)
    if level:
        parts.append(f"sent with delay level {level}")
    else:
        parts.append("sent")
    results = [a[telemetry.RESULT] for s, a in zip(mine, attrs, strict=True)
               if s["name"] == "client.consume" and telemetry.RESULT in a]
    failed = sum(r != "SUCCESS" for r in results)
    if failed:
        parts.append(f"failed {failed} time{'s' if failed > 1 else ''}")
    reasons = [a[telemetry.DLQ_REASON] for a in attrs if telemetry.DLQ_REASON in a]
    if reasons:
        parts.append(f"dead-lettered ({reasons[0]})")
    elif "SUCCESS" in results:
        parts.append("consumed")
    return ", ".join(parts)


def _note(span: dict[str, Any]) -> str:
    attrs = span.get("attributes") or {}
    notes = [f"{label}={attrs[key]}" if label else str(attrs[key])
             for label, key in NOTES if key in attrs]
    return " ".join(notes)


def render(spans: Sequence[dict[str, Any]], out: Path,
           trace_ids: Sequence[str] | None = None) -> list[Row]:
    """Draw the traces (default: every ``client.produce``-rooted one) into ``out`` (PNG);
    the rows drawn, panel after panel."""
    chosen = list(trace_ids) if trace_ids else traces(spans)
    if not chosen:
        raise ValueError("no trace to draw: no client.produce root span")
    panels = [tree_rows(spans, t) for t in chosen]
    heights = [max(len(rows), 1) for rows in panels]
    fig = Figure(figsize=(13, 1.2 + 0.32 * sum(heights) + 0.8 * len(panels)))  # no pyplot:
    axes = fig.subplots(len(panels), 1, squeeze=False,  # no display, no global state
                        gridspec_kw={"height_ratios": heights})
    drawn: list[Row] = []
    labels = [["    " * r.depth + r.name for r in rows] for rows in panels]
    pad = max(len(label) for names in labels for label in names) * 5.2  # points, 8-pt mono
    for ax, trace_id, rows, names in zip(axes[:, 0], chosen, panels, labels, strict=True):
        span_ms = max(max(r.end_ms for r in rows), 1.0)
        for y, row in enumerate(rows):
            width = max(row.end_ms - row.start_ms, span_ms * 0.003)  # a 1-ms span shows too
            ax.barh(y, width, left=row.start_ms, height=0.6,
                    color=COLOURS.get(row.service, OTHER_COLOUR))
            duration = row.end_ms - row.start_ms
            label = f"{duration:.0f} ms" if duration >= 1 else f"{duration:.1f} ms"
            if row.linked:
                label += "  ↔ hand-over batch"
            ax.text(row.start_ms + width + span_ms * 0.005, y,
                    f"{label}  {row.note}".rstrip(), va="center", fontsize=7.5)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(names, fontsize=8, family="monospace")
        for tick in ax.get_yticklabels():
            tick.set_horizontalalignment("left")  # the tree's indentation shows
        ax.tick_params(axis="y", pad=pad)
        ax.invert_yaxis()
        ax.set_xlim(0, span_ms * 1.4)  # room for the notes of the last spans
        ax.set_xlabel("ms since the message was sent", fontsize=8)
        ax.set_title(f"{story(spans, trace_id)}  (trace {trace_id[:8]}…, {len(rows)} spans)",
                     fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
        drawn.extend(rows)
    services = sorted({r.service for r in drawn})
    fig.legend(handles=[Patch(color=COLOURS.get(name, OTHER_COLOUR), label=name)
                        for name in services], loc="upper right", fontsize=8,
               ncols=len(services))
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return drawn


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spans", type=Path, help="spans, one JSON object a line")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--trace", action="append", help="a trace id to draw (repeatable)")
    args = parser.parse_args(argv)
    rows = render(load(args.spans), args.out, args.trace)
    print(f"{args.out}: {len(rows)} spans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
