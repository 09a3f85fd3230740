"""The store's layers as STYLE.md draws them (DEC-store-engine-layers), held by an AST walk of
every module's imports: the engine's folders in order (log, then metadata, indexes, write path,
scheduling, then the ``MessageStore`` facade), none importing one above it; the base modules
(``config``, ``types``) importing none of them; the engine importing no framework, no HTTP
code and no wire contract; ``api/`` reaching the engine through the facade and its value
types only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.import_walk import imports, module_name
from tools.processes import REPO

PACKAGE = REPO / "services" / "store" / "src" / "clepsydra_store"
ENGINE = "clepsydra_store.engine"
LAYERS = {"log": 0, "meta": 1, "index": 2, "write": 3, "schedule": 4, "message_store": 5}
"""Each part of the engine and its rank: a module imports parts of its rank or below."""
BASE = frozenset({"config", "types"})
"""Modules every layer may import; they import no other part of the engine."""
FORBIDDEN = ("flask", "werkzeug", "gunicorn", "opentelemetry", "prometheus_client",
             "requests", "celery", "redis", "orjson", "clepsydra_web", "clepsydra_core.wire",
             "clepsydra_core.runtime", "clepsydra_store.api",
             "clepsydra_store.app", "clepsydra_store.settings", "clepsydra_store.worker",
             "clepsydra_store.inline", "clepsydra_store.consumers",
             "clepsydra_store.queue_locks")
"""What the engine imports none of: frameworks, the HTTP edge, the wire contracts, the rest
of the service."""
API_MAY_USE = frozenset({f"{ENGINE}.message_store", f"{ENGINE}.types"})
"""All ``api/`` imports of the engine: the facade and the values it takes and returns."""


def name(path: Path) -> str:
    return module_name(path, PACKAGE)


def part(module: str) -> str | None:
    """The engine part (a key of LAYERS, or a BASE module) a module belongs to."""
    if not module.startswith(ENGINE + "."):
        return None
    return module[len(ENGINE) + 1:].split(".")[0]


def engine_files() -> list[Path]:
    return sorted((PACKAGE / "engine").rglob("*.py"))


def test_every_engine_module_has_a_layer() -> None:
    unplaced = [name(p) for p in engine_files()
                if name(p) != ENGINE
                and part(name(p)) not in LAYERS.keys() | BASE]
    assert unplaced == []


@pytest.mark.parametrize("path", engine_files(), ids=name)
def test_no_engine_module_imports_a_higher_layer(path: Path) -> None:
    own = part(name(path))
    wrong = []
    for imported in imports(path, PACKAGE):
        other = part(imported)
        if other is None or other == own:
            continue
        if own in BASE:
            wrong.append(imported)  # a base module imports no part of the engine
        elif other not in BASE and own in LAYERS and LAYERS.get(other, 99) > LAYERS[own]:
            wrong.append(imported)
    assert wrong == [], f"{name(path)} ({own}) imports a higher layer"


@pytest.mark.parametrize("path", engine_files(), ids=name)
def test_the_engine_imports_no_framework_nor_wire_contract(path: Path) -> None:
    wrong = [m for m in imports(path, PACKAGE)
             if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert wrong == []


def test_the_api_reaches_the_engine_through_the_facade_only() -> None:
    wrong = {}
    for path in sorted((PACKAGE / "api").rglob("*.py")):
        used = {m for m in imports(path, PACKAGE) if m.startswith(ENGINE + ".")}
        # "from clepsydra_store.engine import types" names the module types: allowed
        outside = sorted(m for m in used if not any(m == a or m.startswith(a + ".")
                                                    for a in API_MAY_USE))
        if outside:
            wrong[name(path)] = outside
    assert wrong == {}


def test_the_walk_sees_an_upward_import(tmp_path: Path) -> None:
    """The checks above would fail on what they look for (a log module importing the writer,
    a relative import resolved, a wire type in the engine)."""
    log = tmp_path / "clepsydra_store" / "engine" / "log"
    log.mkdir(parents=True)
    bad = log / "bad.py"
    bad.write_text("from clepsydra_store.engine.write.writer import Writer\n"
                   "from ..schedule import handover\n"
                   "from clepsydra_core.wire.copy import CopyItem\n")
    found = imports(bad, tmp_path / "clepsydra_store")
    assert "clepsydra_store.engine.write.writer" in found
    assert "clepsydra_store.engine.schedule.handover" in found
    assert {part(m) for m in found} >= {"write", "schedule"}
    assert LAYERS["write"] > LAYERS["log"] and LAYERS["schedule"] > LAYERS["log"]
    assert any(m.startswith("clepsydra_core.wire") for m in found)
