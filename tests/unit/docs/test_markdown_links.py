"""The docs stand on their own: every relative link in every Markdown file of the
repository points inside it, to a file that exists, and to a heading that exists when it names
one; no link leaves the repository for files its users do not have."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.fixtures.markdown import REPO, Link, anchors, is_external, links, markdown_files, slug

FILES = markdown_files()


def _relative_links() -> list[Link]:
    return [link for path in FILES for link in links(path) if not is_external(link.target)]


def _where(link: Link) -> str:
    return f"{link.path.relative_to(REPO)}:{link.line}: {link.target}"


def test_the_repository_has_markdown_with_links() -> None:
    names = {p.relative_to(REPO).as_posix() for p in FILES}
    assert {"README.md", "libs/client/README.md", "docs/semantics.md"} <= names
    assert len(_relative_links()) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves_inside_the_repository(path: Path) -> None:
    problems = []
    for link in links(path):
        if is_external(link.target):
            continue
        file_part, _, anchor = link.target.partition("#")
        target = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not target.is_relative_to(REPO):
            problems.append(f"{_where(link)} leaves the repository")
        elif not target.exists():
            problems.append(f"{_where(link)} names a missing file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            problems.append(f"{_where(link)} names a missing heading (have: "
                            f"{', '.join(sorted(anchors(target)))})")
    assert not problems, "\n".join(problems)


def test_no_markdown_sends_readers_to_the_reference_docs_outside_the_repository() -> None:
    # SPEC.md, DESIGN.md, FACTS.md and STYLE.md live outside the repository
    outside = ("SPEC.md", "DESIGN.md", "FACTS.md", "STYLE.md", "shared/")
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
            for p in FILES for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if any(name in line for name in outside)]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize(("heading", "anchor"), [
    ("HTTP contract (v1)", "http-contract-v1"),
    ("`PullConsumer` and `AdminClient`", "pullconsumer-and-adminclient"),
    ("From send to delivery: the schedule and the exactly-once hand-over",
     "from-send-to-delivery-the-schedule-and-the-exactly-once-hand-over"),
])
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nsee [x](missing.md), [y](#title), [z](#nope)\n"
                    "```\n[not a link](inside-code.md)\n```\n`[nor](this.md)`\n")
    assert [link.target for link in links(page)] == ["missing.md", "#title", "#nope"]
    assert anchors(page) == {"title"}
