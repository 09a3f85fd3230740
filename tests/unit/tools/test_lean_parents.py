"""Issue 14, the whole local stack's memory at rest: a parent process imports only what it
needs. A gunicorn master (preload off) loads its entry point and its worker class, never Flask,
OpenTelemetry, the store's engine, pyarrow or pyspark: the worker imports the app after the
fork (every module a master holds is resident twice, in it and in its forked worker). Each
check runs in a fresh interpreter, doing what the process does before it forks or idles, and
lists the heavy modules it ended up with."""

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


def heavy_modules(code: str, home: Path) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running ``code``."""
    env = {"CLEPSYDRA_HOME": str(home), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code + REPORT.format(heavy=HEAVY)],
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
