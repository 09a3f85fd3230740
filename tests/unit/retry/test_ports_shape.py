"""The retry service's rules reach the store through ``ports.py`` only (as the scheduler's
``delivery.py`` does): the send-back, the DLQ toolkit, the header reads and the policy import
neither the concrete HTTP store client nor a framework, so their unit tests run against a
fake store (``tests/fixtures/retry.py``). Held by an AST walk of their imports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.import_walk import imports
from tools.processes import REPO

PACKAGE = REPO / "services" / "retry" / "src" / "clepsydra_retry"
THROUGH_PORTS = ("sendback", "dlq", "headers", "policy", "dlq_filter")
FORBIDDEN = ("clepsydra_retry.store_client", "clepsydra_retry.app", "clepsydra_retry.api",
             "flask", "werkzeug", "gunicorn", "requests", "clepsydra_core.runtime.http")


def refused(path: Path, root: Path = PACKAGE) -> list[str]:
    """What a module of the package at ``root`` imports from :data:`FORBIDDEN`."""
    return sorted({name for name in imports(path, root)
                   if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)})


@pytest.mark.parametrize("module", THROUGH_PORTS)
def test_the_rules_use_the_store_through_the_ports_only(module: str) -> None:
    assert refused(PACKAGE / f"{module}.py") == []


def test_the_walk_sees_a_concrete_client(tmp_path: Path) -> None:
    bad = tmp_path / "clepsydra_retry" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("from clepsydra_retry.store_client import StoreClient\nimport requests\n")
    assert refused(bad, bad.parent) == ["clepsydra_retry.store_client",
                                        "clepsydra_retry.store_client.StoreClient", "requests"]
