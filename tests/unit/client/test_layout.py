"""The client package's shape (libs/client README, "Modules"), held by an AST walk of every
module's imports, lazy and ``TYPE_CHECKING`` ones included: the SDK's top-level modules and
``consumer/`` never import ``cli/`` (the command is built on the SDK, never the other way
round), and no module of the package imports itself back through others (``push`` and
``rebalance_service`` once did: the rebalance service now takes a ``GroupMember`` protocol)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.import_walk import imports, module_name
from tools.processes import REPO

PACKAGE = REPO / "libs" / "client" / "src" / "clepsydra_client"
ROOT = "clepsydra_client"
CLI = f"{ROOT}.cli"
CONSUMER = f"{ROOT}.consumer"


def files(package: Path = PACKAGE) -> list[Path]:
    return sorted(package.rglob("*.py"))


def imported_modules(path: Path, package: Path, names: set[str]) -> set[str]:
    """The modules of ``names`` a file imports: ``from x import y`` is ``x.y`` when that is a
    module, else ``x`` (a package stands for its ``__init__``); the packages Python imports on
    the way (``x`` of ``from x.y import z``) are not counted."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = module_name(path, package)
    anchor = own.split(".") if path.name == "__init__.py" else own.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*anchor[:len(anchor) - node.level + 1], *filter(None, [base])])
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in names else base
                      for a in node.names}
    return (found & names) - {own}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of the package it imports."""
    paths = files(package)
    names = {module_name(p, package) for p in paths}
    return {module_name(p, package): imported_modules(p, package, names) for p in paths}


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle (its modules, the first repeated at the end), else []."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for other in sorted(edges.get(module, ())):
            if state.get(other) == 1:
                return [*path[path.index(other):], other]
            if other not in state and (found := walk(other)):
                return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(edges):
        if module not in state and (found := walk(module)):
            return found
    return []


def test_the_three_layers_are_there() -> None:
    names = set(graph())
    assert {f"{CONSUMER}.push", f"{CONSUMER}.rebalance_service", f"{CONSUMER}.thread_pools",
            f"{CLI}.main", f"{CLI}.commands", f"{ROOT}.producer"} <= names
    # no module left at an old path (a shim would be a second way in)
    assert not names & {f"{ROOT}.push", f"{ROOT}.cli.cli", f"{ROOT}.timers", f"{ROOT}.commands",
                        f"{ROOT}.rebalance_service", f"{ROOT}.render"}


@pytest.mark.parametrize("path", [p for p in files() if not inside(module_name(p, PACKAGE), CLI)],
                         ids=lambda p: module_name(p, PACKAGE))
def test_the_sdk_never_imports_the_command(path: Path) -> None:
    wrong = [m for m in imports(path, PACKAGE) if inside(m, CLI)]
    assert wrong == [], f"{module_name(path, PACKAGE)} imports the CLI"


def test_no_module_of_the_client_imports_itself_back() -> None:
    assert cycle(graph()) == []


def test_push_and_the_rebalance_service_do_not_import_each_other() -> None:
    edges = graph()
    push, rebalance = f"{CONSUMER}.push", f"{CONSUMER}.rebalance_service"
    assert rebalance in edges[push] and push not in edges[rebalance]


def test_the_walk_sees_a_cli_import_and_a_cycle(tmp_path: Path) -> None:
    """The checks above would fail on what they look for: the consumer importing the CLI (a
    lazy import in a function, a relative one), and a cycle through a ``TYPE_CHECKING``
    import."""
    package = tmp_path / ROOT
    for folder in (package / "consumer", package / "cli"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "consumer" / "push.py").write_text(
        "from clepsydra_client.consumer.rebalance_service import RebalanceService\n"
        "def f():\n    from ..cli import render\n")
    (package / "consumer" / "rebalance_service.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from clepsydra_client.consumer.push import PushConsumer\n")
    (package / "cli" / "render.py").write_text("")
    bad = package / "consumer" / "push.py"
    assert any(inside(m, CLI) for m in imports(bad, package))
    found = cycle(graph(package))
    assert found[0] == found[-1] and set(found) == {f"{CONSUMER}.push",
                                                    f"{CONSUMER}.rebalance_service"}
