"""No file of the repository cites a tracker's issue number: a reader has the repository and
nothing else, so a reason is cited by a rule id (``SPEC D9``, docs/semantics.md) or a decision
id (``DEC-scheduler-lease``, docs/decisions.md), both held resolvable by the tests beside this
one. Every text file git tracks (or would track) is read, code, documents, manifests and the
generated OpenAPI documents alike."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.fixtures.markdown import REPO

ISSUE_NUMBER = re.compile(r"\bissues?\s?#?\d+", re.IGNORECASE)
"""The word, singular or plural, any case, a number after it (with a ``#``, a section
number): the forms :func:`test_the_check_finds_each_form` writes."""
_SKIP = {".git", ".venv", ".tox", "node_modules", ".clepsydra", "build", "__pycache__"}


def tracked_files(root: Path = REPO) -> list[Path]:
    """Every file git tracks or would track (untracked but not ignored) under ``root``."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root,
                             capture_output=True, text=True, check=True).stdout
        return sorted(root / p for p in out.splitlines() if (root / p).is_file())
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        return sorted(p for p in root.rglob("*")
                      if p.is_file() and not _SKIP & set(p.relative_to(root).parts))


def issue_numbers(paths: list[Path], root: Path = REPO) -> list[str]:
    """``path:line: text`` (relative to ``root``) of every issue number in the text files
    among ``paths``."""
    found: list[str] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:100]}")
    return found


def test_no_file_cites_an_issue_number() -> None:
    found = issue_numbers(tracked_files())
    assert not found, (f"{len(found)} issue number(s): cite a rule (SPEC X9) or a decision "
                       f"(DEC-...) instead:\n" + "\n".join(found[:40]))


def test_the_check_finds_each_form(tmp_path: Path) -> None:
    word = "issue"  # (spelled apart: this file is checked too)
    forms = [f"see {word} 14", f"({word.title()} #3)", f"{word}s 14 and 18",
             f"{word} 12.8's figure"]
    for i, form in enumerate(forms):
        (tmp_path / f"f{i}.py").write_text(f"x = 1  # {form}\n", encoding="utf-8")
    (tmp_path / "clean.md").write_text(f"SPEC D9, DEC-scheduler-lease; an {word} of the store; "
                                       "apache/rocketmq#6566\n", encoding="utf-8")
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe " + word.encode() + b" 1")
    paths = sorted(tmp_path.iterdir())
    hits = [h.split(": ", 1)[1] for h in issue_numbers(paths, tmp_path)]
    assert hits == [f"x = 1  # {form}" for form in forms]

