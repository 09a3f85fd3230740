"""The HTML report of a run, with PNG charts (matplotlib, Agg backend), built from the run's
result rows: lateness per level, the retry funnel, the top dead-letter reasons, throughput."""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from clepsydra_core import naming

Rows = list[dict[str, Any]]
TOP_REASONS = 10


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def lateness_chart(rows: Rows, path: Path) -> bool:
    """p50/p95/p99/max lateness per level (worst hour of each level), log scale."""
    delivered = [r for r in rows if r.get("count")]
    if not delivered:
        return False
    levels = sorted({int(r["level"]) for r in delivered})
    worst = {lv: {k: max(int(r[k] or 0) for r in delivered if r["level"] == lv)
                  for k in ("p50Ms", "p95Ms", "p99Ms", "maxMs")} for lv in levels}
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.2
    for i, key in enumerate(("p50Ms", "p95Ms", "p99Ms", "maxMs")):
        ax.bar([x + (i - 1.5) * width for x in range(len(levels))],
               [max(worst[lv][key], 1) for lv in levels], width, label=key[:-2])
    ax.set_xticks(range(len(levels)), [f"level {lv}" for lv in levels])
    ax.set_yscale("log")
    ax.set_ylabel("lateness (ms)")
    ax.set_title("Delivery lateness per level")
    ax.legend()
    _save(fig, path)
    return True


def funnel_chart(rows: Rows, path: Path) -> bool:
    """Stacked shares per group and topic: first time, after n retries, dead-lettered."""
    rows = [r for r in rows if r.get("total")]
    if not rows:
        return False
    labels = [f"{r['group']} / {r['topic']}" for r in rows]
    steps = sorted({int(k) for r in rows for k in (r.get("afterRetries") or {})})
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(rows)))
    left = [0.0] * len(rows)

    def segment(values: list[float], label: str) -> None:
        ax.barh(labels, values, left=left, label=label)
        for i, v in enumerate(values):
            left[i] += v

    segment([r["firstTime"] / r["total"] for r in rows], "first time")
    for n in steps:
        segment([(r.get("afterRetries") or {}).get(str(n), 0) / r["total"] for r in rows],
                f"after {n} retr{'y' if n == 1 else 'ies'}")
    segment([r["deadLettered"] / r["total"] for r in rows], "dead-lettered")
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of messages")
    ax.set_title("Retry funnel")
    ax.legend(loc="lower right", fontsize="small")
    _save(fig, path)
    return True


def dead_letters_chart(rows: Rows, path: Path) -> bool:
    top = rows[:TOP_REASONS]
    if not top:
        return False
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.4 * len(top)))
    ax.barh([f"{r['group']}/{r['topic']}: {str(r['reason'])[:50]}" for r in top][::-1],
            [r["count"] for r in top][::-1], color="tab:red")
    ax.set_xlabel("dead letters")
    ax.set_title("Top dead-letter reasons")
    _save(fig, path)
    return True


def throughput_chart(rows: Rows, path: Path) -> bool:
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 4))
    for topic in sorted({r["topic"] for r in rows}):
        points = [(r["minute"], r["messages"]) for r in rows if r["topic"] == topic]
        ax.plot([p[0][-5:] for p in points], [p[1] for p in points], marker=".", label=topic)
    ax.set_ylabel("messages / minute")
    ax.set_title("Throughput per topic (UTC)")
    ax.tick_params(axis="x", labelrotation=45, labelsize="small")
    ax.legend(fontsize="small")
    _save(fig, path)
    return True


CHARTS = (("lateness", lateness_chart), ("funnel", funnel_chart),
          ("dead-letters", dead_letters_chart), ("throughput", throughput_chart))


def _table(rows: Rows) -> str:
    if not rows:
        return "<p><em>no rows</em></p>"
    columns = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c)))}</td>" for c in columns)
                   + "</tr>" for r in rows[:500])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(run_dir: Path, result: dict[str, Any]) -> Path:
    """Charts into ``charts/``, then ``report.html``; its path."""
    charts_dir = run_dir / naming.REPORT_CHARTS_DIR
    charts_dir.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Rows] = result["jobs"]
    sections = []
    for name, draw in CHARTS:
        if name in tables and draw(tables[name], charts_dir / f"{name}.png"):
            sections.append(f'<img src="{naming.REPORT_CHARTS_DIR}/{name}.png" alt="{name}">')
    for name, rows in tables.items():
        sections.append(f"<h2>{html.escape(name)}</h2>{_table(rows)}")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(result["sinceMs"] / 1000))
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(result["nowMs"] / 1000))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Clepsydra report {html.escape(result['runId'])}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:90%}}img{{display:block;margin:1em 0}}
</style></head><body>
<h1>Clepsydra report {html.escape(result['runId'])}</h1>
<p>Messages stored from {since} to {now} UTC; {result['inputFiles']} export files;
jobs: {html.escape(', '.join(result['ran']))}.</p>
{''.join(sections)}
</body></html>
"""
    path = run_dir / naming.REPORT_HTML
    path.write_text(page, encoding="utf-8")
    return path
