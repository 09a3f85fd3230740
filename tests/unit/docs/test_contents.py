"""A Markdown page longer than a screen or two says what it holds: every section (a ``##``
heading) is linked from the page itself, by a contents line near its top or an index table, so
a reader can jump to it (the docs/ pages and the READMEs alike)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fixtures.markdown import REPO, links, markdown_files, outside_fences, slug

SCREENS = 150
"""Lines past which a page needs its contents."""
_SECTION = re.compile(r"^##\s+(.*?)\s*#*\s*$")
_CONTENTS = {"contents", "index", "table of contents"}


def sections(path: Path) -> list[str]:
    """The anchors of a page's ``##`` sections, its own contents or index section left out."""
    found = []
    for _, line in outside_fences(path.read_text(encoding="utf-8")):
        match = _SECTION.match(line)
        if match and match.group(1).strip().lower() not in _CONTENTS:
            found.append(slug(match.group(1)))
    return found


def unlinked_sections(path: Path) -> list[str]:
    linked = {link.target[1:] for link in links(path) if link.target.startswith("#")}
    return [anchor for anchor in sections(path) if anchor not in linked]


def test_every_long_page_links_each_of_its_sections() -> None:
    missing = {}
    for path in markdown_files():
        if path.name == "CHANGELOG.md":
            continue  # its sections are dates, newest first: read from the top
        if len(path.read_text(encoding="utf-8").splitlines()) > SCREENS:
            unlinked = unlinked_sections(path)
            if unlinked:
                missing[str(path.relative_to(REPO))] = unlinked[:5]
    assert not missing, f"long pages whose sections are not all linked from the page: {missing}"


def test_the_check_sees_a_missing_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# T\n\n**Contents**: [One](#one)\n\n## One\n\ntext\n\n## Two `x`\n",
                    encoding="utf-8")
    assert sections(page) == ["one", "two-x"]
    assert unlinked_sections(page) == ["two-x"]
