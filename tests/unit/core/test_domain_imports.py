"""``clepsydra_core``'s domain (records, properties, naming, levels, rules, validation, errors,
settings, ``wire/``) apart from its runtime (``clepsydra_core.runtime``: the HTTP client and its
connections, the health server, Celery's worker and beat, telemetry, logging), held by an AST
walk of every domain module's imports, at the top or inside a function: the runtime imports
the domain, never the other way; the domain imports no framework, no transport and, of what
is not the standard library, only what it imports today (orjson)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.unit.import_walk import imports, module_name
from tools.processes import REPO

PACKAGE = REPO / "libs" / "core" / "src" / "clepsydra_core"
RUNTIME = "clepsydra_core.runtime"
FRAMEWORKS = ("flask", "werkzeug", "gunicorn", "jinja2", "celery", "kombu", "billiard", "redis",
              "opentelemetry", "requests", "urllib3", "prometheus_client", "grpc", "pyspark",
              "pyarrow")
"""Frameworks and their clients, which the runtime and the services may use, the domain not."""
TRANSPORTS = ("http", "socketserver", "urllib.request", "ssl", "asyncio", "selectors", "select",
              "wsgiref", "xmlrpc", "subprocess", "multiprocessing", "signal")
"""The standard library's servers, clients and process machinery (``socket`` stays allowed:
``msgid`` packs and unpacks IPv4 addresses with it, no connection)."""
OTHER_PARTS = ("clepsydra_web", "clepsydra_client", "clepsydra_store", "clepsydra_scheduler",
               "clepsydra_retry", "clepsydra_analytics", "clepsydra_console", "clepsydra_gateway")
"""Every other distribution of the repository: clepsydra_core depends on none of them."""
FORBIDDEN = (RUNTIME, *FRAMEWORKS, *TRANSPORTS, *OTHER_PARTS)
THIRD_PARTY_ALLOWED = frozenset({"orjson"})
"""What the domain imports from outside the standard library: a new dependency is a choice to
make here, on purpose."""


def name(path: Path) -> str:
    return module_name(path, PACKAGE)


def domain_files(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py")
                  if p.relative_to(package).parts[0] != "runtime")


def forbidden(modules: list[str]) -> list[str]:
    return sorted({m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)})


def third_party(modules: list[str]) -> list[str]:
    tops = {m.split(".")[0] for m in modules if m}
    return sorted(t for t in tops if t not in sys.stdlib_module_names
                  and t not in {"__future__", "clepsydra_core"} | THIRD_PARTY_ALLOWED)


def test_the_runtime_is_a_package_of_its_own() -> None:
    """The eight runtime modules and the shard map live in runtime/, nowhere else."""
    moved = {"http", "http_connections", "health_http", "celery_beat", "celery_worker",
             "telemetry", "lean_tracer", "logging", "shard_map"}
    assert {p.stem for p in (PACKAGE / "runtime").glob("*.py")} >= moved
    assert sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem in moved) == []


@pytest.mark.parametrize("path", domain_files(), ids=name)
def test_the_domain_imports_neither_the_runtime_nor_a_framework(path: Path) -> None:
    wrong = forbidden(imports(path, PACKAGE))
    assert wrong == [], f"{name(path)} imports the runtime, a framework or a transport"


@pytest.mark.parametrize("path", domain_files(), ids=name)
def test_the_domain_imports_no_new_dependency(path: Path) -> None:
    assert third_party(imports(path, PACKAGE)) == []


def test_the_walk_sees_a_runtime_import(tmp_path: Path) -> None:
    """The checks above fail on what they look for: the runtime imported by name, relatively
    and inside a function, a framework, a transport of the standard library, a new
    dependency; the runtime's own modules are not the domain's."""
    package = tmp_path / "clepsydra_core"
    (package / "wire").mkdir(parents=True)
    (package / "runtime").mkdir()
    (package / "runtime" / "http.py").write_text("import requests\n")
    bad = package / "wire" / "bad.py"
    bad.write_text("from clepsydra_core.runtime import telemetry\n"
                   "from ..runtime.http import HttpClient\n"
                   "def later():\n"
                   "    import celery\n"
                   "    from http.server import HTTPServer\n"
                   "    import msgpack\n")
    found = imports(bad, package)
    assert forbidden(found) == ["celery", "clepsydra_core.runtime",
                                "clepsydra_core.runtime.http",
                                "clepsydra_core.runtime.http.HttpClient",
                                "clepsydra_core.runtime.telemetry", "http.server",
                                "http.server.HTTPServer"]
    assert third_party(found) == ["celery", "msgpack"]
    assert domain_files(package) == [bad]
