"""The whole local stack's memory at rest (DEC-memory-at-rest): a parent process imports only what
it needs. The stack's supervisor (tools.stack) starts and watches processes. A gunicorn master
(preload off) loads its entry point and its worker class, never Flask, OpenTelemetry, the store's
engine, pyarrow or pyspark: the worker imports the app after the fork (every module a master holds
is resident twice, in it and in its forked worker). Each check runs in a fresh interpreter, doing
what the process does before it forks or idles, and lists the heavy modules it ended up with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("flask", "werkzeug", "opentelemetry", "pyarrow", "pyspark", "numpy", "celery",
         "clepsydra_store.engine.message_store", "clepsydra_store.app", "clepsydra_retry.app",
         "clepsydra_analytics.app", "requests")

REPORT = """
import json, sys
heavy = {heavy!r}
print(json.dumps(sorted(h for h in heavy if h in sys.modules)))
"""

MASTER = """
from {module} import {factory} as factory
from {settings_module} import {settings_class} as Settings
server = factory(Settings.from_env())
server.cfg.worker_class  # what gunicorn's arbiter loads before it forks a worker
"""

MASTERS = {
    "store": ("clepsydra_store.__main__", "server", "clepsydra_store.settings", "StoreSettings"),
    "retry": ("clepsydra_retry.__main__", "server", "clepsydra_retry.settings", "RetrySettings"),
    "analytics serve": ("clepsydra_analytics.server", "server",
                        "clepsydra_analytics.settings", "AnalyticsSettings"),
}


def heavy_modules(code: str, home: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The HEAVY (and ``extra``) modules a fresh interpreter holds after running ``code``."""
    env = {"CLEPSYDRA_HOME": str(home), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code + REPORT.format(heavy=HEAVY + extra)],
                         env={**env, "PYTHONPATH": ":".join(sys.path)},
                         capture_output=True, text=True, timeout=60, check=True)
    found: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_a_gunicorn_master_imports_neither_flask_nor_the_app(name: str, tmp_path: Path) -> None:
    module, factory, settings_module, settings_class = MASTERS[name]
    code = MASTER.format(module=module, factory=factory, settings_module=settings_module,
                         settings_class=settings_class)
    assert heavy_modules(code, tmp_path) == []


SUPERVISOR = """
import io, os
from tools.processes import Console, http_ok
from tools.stack import StackSettings, Supervisor
env = dict(os.environ, CLEPSYDRA_REDIS_URL="redis://127.0.0.1:1/0")
supervisor = Supervisor(StackSettings.from_env(env), env=env, console=Console(io.StringIO()),
                        echo=False)
supervisor._with_tokens(supervisor.planned())  # what start() does before it launches them
http_ok("http://127.0.0.1:1/healthz")  # a readiness check
"""


def test_the_supervisor_holds_no_http_client_library_nor_the_token_code(tmp_path: Path) -> None:
    # make run's own process (tools.stack): urllib.request (ssl, http.client, email) and the
    # tokens' code (hashlib) were most of its 24 MiB; auth off needs no token
    found = heavy_modules(SUPERVISOR, tmp_path, extra=("urllib.request", "http.client", "ssl",
                                                        "redis", "clepsydra_core.auth_tokens"))
    assert found == []


ANALYTICS_API = """
import sys
from clepsydra_analytics.app import create_app
from clepsydra_analytics.settings import AnalyticsSettings
app = create_app(AnalyticsSettings.from_env())
client = app.test_client()
assert client.get("/healthz").status_code == 200
assert client.get("/v1/reports").status_code == 200
if {status!r}:  # no store here: the answer is an error, after the folder was opened
    client.get("/v1/export/status")
"""


def test_the_analytics_api_lists_a_local_export_folder_without_pyarrow(tmp_path: Path) -> None:
    # the API's worker answers health and the reports without pyarrow (~45 MiB); a status
    # request lists a local export folder with the standard library (export_files.py
    # imports pyarrow when it reads or writes a file)
    at_rest = heavy_modules(ANALYTICS_API.format(status=False), tmp_path)
    assert "pyarrow" not in at_rest and "pyspark" not in at_rest
    assert "pyarrow" not in heavy_modules(ANALYTICS_API.format(status=True), tmp_path)
