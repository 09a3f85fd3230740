"""Every rule an error answer or a log line cites is explained in the repository:
each id the source cites as "SPEC <id>" (in a message, a docstring or a comment) or passes as
``rule="<id>"`` to an error — and each one the Markdown cites — has a row in the rule index of
docs/semantics.md."""

from __future__ import annotations

import re

from tests.fixtures.markdown import REPO, markdown_files, section

SEMANTICS = REPO / "docs" / "semantics.md"
RULE_ID = r"[A-Z][0-9]{1,2}"
CITED = re.compile(rf"\bSPEC ({RULE_ID})\b")
RULE_ARG = re.compile(rf"\brule=\"({RULE_ID})\"")
ROW = re.compile(rf"^\|\s*`?({RULE_ID})`?\s*\|\s*(.+?)\s*\|\s*$")


def rule_index() -> dict[str, str]:
    rows = {}
    for line in section(SEMANTICS, "Rule index").splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def cited_in_source() -> dict[str, list[str]]:
    """rule id -> where the services and libs cite it."""
    found: dict[str, list[str]] = {}
    for root in (REPO / "services", REPO / "libs"):
        for path in sorted(root.rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for rule in CITED.findall(line) + RULE_ARG.findall(line):
                    found.setdefault(rule, []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def cited_in_markdown() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in markdown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for rule in CITED.findall(line):
                found.setdefault(rule, []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def test_the_rule_index_explains_every_rule_the_source_cites() -> None:
    index = rule_index()
    cited = cited_in_source()
    # the scan sees what error answers cite: L2 (negative delay level), S3 (system topics),
    # R2 (send-back checks), P1 (input rules), A1 (topic shrink), R16 (DLQ selections)
    assert {"L2", "S3", "R2", "P1", "A1", "R16"} <= set(cited)
    missing = {rule: where[:3] for rule, where in cited.items() if rule not in index}
    assert not missing, f"rules cited but not in docs/semantics.md's rule index: {missing}"


def test_the_rule_index_explains_every_rule_the_docs_cite() -> None:
    index = rule_index()
    missing = {rule: where[:3] for rule, where in cited_in_markdown().items()
               if rule not in index}
    assert not missing, f"rules cited but not in docs/semantics.md's rule index: {missing}"


def test_every_row_of_the_rule_index_says_something() -> None:
    index = rule_index()
    assert len(index) >= 40
    assert all(len(meaning) > 20 for meaning in index.values())


def test_an_error_answer_cites_the_rule_as_the_index_names_it() -> None:
    from clepsydra_core.errors import ValidationError

    message = ValidationError("delay level must be >= 0", rule="L2").message
    (rule,) = CITED.findall(message)
    assert rule in rule_index()


def test_the_scan_would_catch_an_unexplained_rule() -> None:
    line = 'raise Forbidden(f"no (SPEC Z9)", rule="Z8")'
    assert CITED.findall(line) + RULE_ARG.findall(line) == ["Z9", "Z8"]
    assert not {"Z8", "Z9"} & set(rule_index())
