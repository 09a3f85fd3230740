"""The analytics package declares every project package it imports: installed on its own (the
Spark image installs it by name, `pip install clepsydra-analytics`), each of its entry points
imports."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "services" / "analytics"


def test_every_imported_project_package_is_a_declared_dependency() -> None:
    imported = set()
    for source in (PACKAGE / "src").rglob("*.py"):
        imported |= set(re.findall(r"^\s*(?:from|import) (clepsydra_[a-z]+)", source.read_text(),
                                   flags=re.M))
    with open(PACKAGE / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    declared = {re.split(r"[^a-z-]", dep, maxsplit=1)[0].replace("-", "_")
                for dep in project["dependencies"]}
    missing = imported - declared - {project["name"].replace("-", "_")}
    assert not missing, f"services/analytics imports {sorted(missing)} without declaring them"
