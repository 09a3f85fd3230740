"""Each service's README and the client's have a "Modules" table (`module | owns`) that
matches the code: every module of the package is named, and every name is a module.
A module added or renamed without its row fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.processes import REPO

PACKAGES = {
    "services/store/README.md": "services/store/src/clepsydra_store",
    "services/scheduler/README.md": "services/scheduler/src/clepsydra_scheduler",
    "services/retry/README.md": "services/retry/src/clepsydra_retry",
    "services/analytics/README.md": "services/analytics/src/clepsydra_analytics",
    "services/gateway/README.md": "services/gateway/src/clepsydra_gateway",
    "libs/client/README.md": "libs/client/src/clepsydra_client",
}

_CELL_NAME = re.compile(r"`([\w/]+(?:\.py|/))`")


def table_names(readme: str) -> set[str]:
    """The module names (``x.py``, ``sub/x.py``, ``sub/``) in the first column of the rows of
    the README's "## Modules" section."""
    match = re.search(r"^## Modules\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    assert match, "no '## Modules' section"
    names: set[str] = set()
    for line in match.group(1).splitlines():
        if line.startswith("| `"):
            names.update(_CELL_NAME.findall(line.split("|")[1]))
    return names


def package_modules(root: Path) -> set[str]:
    """Every module of a package, relative to it; ``__init__.py`` left out."""
    return {str(p.relative_to(root)) for p in root.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def covered(module: str, names: set[str]) -> bool:
    return module in names or any(n.endswith("/") and module.startswith(n) for n in names)


@pytest.mark.parametrize("readme", sorted(PACKAGES))
def test_every_module_has_its_row_and_every_row_a_module(readme: str) -> None:
    root = REPO / PACKAGES[readme]
    names = table_names((REPO / readme).read_text())
    modules = package_modules(root)
    assert sorted(m for m in modules if not covered(m, names)) == []
    assert sorted(n for n in names if not (root / n).exists()) == []


def test_a_missing_row_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("a.py", "b.py", "sub/c.py"):
        (tmp_path / "pkg" / name).write_text("")
    names = table_names("# x\n## Modules\n| module | owns |\n|---|---|\n"
                        "| `a.py`, `sub/` | things |\n## Next\n| `b.py` | not here |\n")
    assert names == {"a.py", "sub/"}
    assert [m for m in sorted(package_modules(tmp_path / "pkg")) if not covered(m, names)] \
        == ["b.py"]
