"""Every decision the code or the documents cite as ``DEC-<words>`` has an entry in
docs/decisions.md (a ``## DEC-<words>: title`` heading) and a row in its index."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fixtures.markdown import REPO, markdown_files

DECISIONS = REPO / "docs" / "decisions.md"
DECISION_ID = r"DEC-[a-z0-9]+(?:-[a-z0-9]+)*"
CITED = re.compile(rf"\b({DECISION_ID})\b")
ENTRY = re.compile(rf"^## ({DECISION_ID}): \S", re.M)
ROW = re.compile(rf"^\|\s*\[?`?({DECISION_ID})`?\]?(?:\([^)]*\))?\s*\|", re.M)
_EXAMPLE = "DEC-scheduler-lease"
"""The example docs/decisions.md's own introduction uses."""


def _sources() -> list[Path]:
    found = [p for root in ("services", "libs", "tools", "bench", "tests", "k8s", "docker")
             for p in sorted((REPO / root).rglob("*"))
             if p.is_file() and p.suffix in {".py", ".yaml", ".yml", ".toml", ".sh", ".ini"}]
    return found + [p for p in markdown_files() if p != DECISIONS]


def cited() -> dict[str, list[str]]:
    """decision id -> where the tree cites it."""
    found: dict[str, list[str]] = {}
    for path in _sources():
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for decision in CITED.findall(line):
                found.setdefault(decision, []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def test_every_cited_decision_has_an_entry_and_an_index_row() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    entries, rows = set(ENTRY.findall(text)), set(ROW.findall(text))
    missing = {d: where[:3] for d, where in cited().items()
               if d not in entries or d not in rows}
    assert not missing, f"decisions cited but without an entry and index row: {missing}"


def test_every_entry_is_in_the_index_and_the_other_way_round() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    entries, rows = set(ENTRY.findall(text)), set(ROW.findall(text))
    assert entries == rows, f"entries without a row: {entries - rows}; rows without an " \
                            f"entry: {rows - entries}"


def test_the_scan_would_catch_an_unexplained_decision() -> None:
    line = "# replaced the poll (DEC-no-such-decision-here)"
    assert CITED.findall(line) == ["DEC-no-such-decision-here"]
    assert "DEC-no-such-decision-here" not in ENTRY.findall(DECISIONS.read_text("utf-8"))
    assert CITED.findall(f"`{_EXAMPLE}`") == [_EXAMPLE]
