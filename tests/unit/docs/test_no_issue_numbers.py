"""The code cites rule ids (``SPEC L2``) and decision ids (``DEC-<words>``), never the number
of a tracker's issue: a reader of the repository has no tracker. Held for the folders already
free of them; a folder joins ``CLEAN`` once its mentions are replaced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.processes import REPO

CLEAN = ("libs/core", "libs/web")
"""Folders whose every file (code, README, pyproject) names no issue number."""
ISSUE = re.compile(r"(?i)\bissues?\s*#?\d+")


def files(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).rglob("*")
                  if p.is_file() and p.suffix in {".py", ".md", ".toml", ".txt", ".cfg"}
                  and "__pycache__" not in p.parts and ".egg-info" not in str(p))


@pytest.mark.parametrize("folder", CLEAN)
def test_no_issue_number_is_cited(folder: str) -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in files(folder)
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if ISSUE.search(line)]
    assert found == []


def test_the_pattern_finds_the_forms_in_use() -> None:
    for text in ("(issue 14)", "issue 12.8", "Issue 20.4:", "issues 12.11, 20.4", "issue #16"):
        assert ISSUE.search(text), text
    assert not ISSUE.search("an issue of the store") and not ISSUE.search("DEC-memory-at-rest")
