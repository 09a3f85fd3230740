"""The OpenAPI documents tell the truth: schemathesis, every check (``--checks all``),
against the store, the retry service and the analytics API as real processes on loopback with a
real Redis, every operation with a bounded number of examples: no failure, no server error, and
the run's report lists every operation the served document has (schemathesis leaves out the one
that serves the document unless a filter names it: ``--include-path-regex ^/`` does).

A finding means the document or the server is wrong: the documents are generated from the
wire types the servers validate with (``make openapi``), so the fix goes to the wire type, the
route table (``contract.py``) or the server, never to this test. The analytics API is run
without its one write (``POST /v1/reports`` runs the Spark jobs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest
import requests

from clepsydra_core.wire.groups import EXAMPLE_GROUP
from clepsydra_core.wire.timers import MAX_DELAY_MS
from clepsydra_core.wire.topics import EXAMPLE_TOPIC
from tools import parts

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = EXAMPLE_TOPIC
"""The documents' example names: the examples phase then meets a topic with messages and a
group with settings."""
GROUP = EXAMPLE_GROUP
MAX_EXAMPLES = 12
"""Examples per operation and phase: the three runs take well under two minutes on 2 cores."""
SEED = 20261125
CONFIG = REPO / "tests" / "fixtures" / "schemathesis.toml"
"""Which answers count as refusing an invalid request (413, 414 and 431 too: the file says
why)."""


@dataclass
class Services:
    store: str
    retry: str
    analytics: str
    home: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    home = tmp_path_factory.mktemp("conformance")
    # the timer cap at the wire's own bound: a delay the document allows is one the store takes
    builder = (parts.Stack(home).with_redis()
               .with_store(CLEPSYDRA_TIMER_MAX_DELAY=str(MAX_DELAY_MS))
               .with_retry().with_analytics(parts.ANALYTICS_API))
    with builder.start():
        store, retry = builder.store, builder.retry
        # something to find: a topic with messages, a group with settings
        assert requests.post(f"{store.url}/v1/topics", json={"name": TOPIC, "queues": 2},
                             timeout=10).status_code == 201
        assert requests.post(f"{store.url}/v1/topics/{TOPIC}/messages/batch", json={
            "messages": [{"body": f"m{i}", "keys": f"k{i}"} for i in range(4)]},
            timeout=10).status_code == 201
        assert requests.put(f"{retry.url}/v1/groups/{GROUP}", json={},
                            timeout=10).status_code == 201
        yield Services(store.url, retry.url, builder.analytics.url, home)


def schemathesis(url: str, home: Path, name: str,
                 *extra: str) -> subprocess.CompletedProcess[str]:
    """``st run`` against the service's own /openapi.json (what it serves is what is tested)."""
    cli = Path(sys.executable).with_name("st")
    report = home / f"{name}-junit.xml"
    argv = [str(cli), "--config-file", str(CONFIG), "run", f"{url}/openapi.json",
            "--checks", "all",
            "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
            # no shrinking and no targeting: Hypothesis phases of tests/fixtures/schemathesis_hooks
            "--phases", "examples,coverage,fuzzing",
            "--suppress-health-check", "all", "--request-timeout", "30",
            "--include-path-regex", "^/",  # every operation, GET /openapi.json too
            "--report", "junit", "--report-junit-path", str(report), *extra]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NO_COLOR": "1",
           "SCHEMATHESIS_HOOKS": "tests.fixtures.schemathesis_hooks"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env,
                          check=False)


EXCLUDED = {"analytics": {"runReport"}}
"""Operations a run leaves out, by operationId (the analytics API's Spark run)."""
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def operations(url: str, excluded: set[str]) -> set[str]:
    """``METHOD /path`` of every operation the service's served document has."""
    doc = requests.get(f"{url}/openapi.json", timeout=10).json()
    return {f"{method.upper()} {path}" for path, item in doc["paths"].items()
            for method, op in item.items()
            if method in METHODS and op.get("operationId") not in excluded}


def operations_run(report: Path) -> tuple[set[str], int]:
    """The operations a run's JUnit report lists, and its failures and errors."""
    root = ElementTree.parse(report).getroot()
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in root.iter("testsuite"))
    return {str(case.get("name")) for case in root.iter("testcase")}, bad


@pytest.mark.parametrize("service", ["analytics", "retry", "store"])
def test_document_holds_against_the_running_service(stack: Services, service: str) -> None:
    url = {"store": stack.store, "retry": stack.retry, "analytics": stack.analytics}[service]
    excluded = EXCLUDED.get(service, set())
    extra = [arg for op in sorted(excluded) for arg in ("--exclude-operation-id", op)]
    result = schemathesis(url, stack.home, service, *extra)
    summary = result.stdout[-12000:]
    assert result.returncode == 0, f"schemathesis found mismatches:\n{summary}\n{result.stderr}"
    assert "Server error" not in result.stdout
    ran, bad = operations_run(stack.home / f"{service}-junit.xml")
    assert bad == 0
    assert ran == operations(url, excluded), summary  # every operation, none left out


def test_the_run_caps_a_generated_pull_hold_but_not_an_invalid_one() -> None:
    # a valid waitMs may hold a pull 30 s, the run's request timeout; the hook sends
    # it as a short hold, and leaves a value past the maximum alone (its 400 is checked)
    from types import SimpleNamespace

    from clepsydra_core.wire.messages import MAX_PULL_WAIT_MS
    from tests.fixtures.schemathesis_hooks import HOLD_CAP_MS, before_call

    for asked, sent in ((MAX_PULL_WAIT_MS, HOLD_CAP_MS), (HOLD_CAP_MS, HOLD_CAP_MS),
                        (0, 0), (MAX_PULL_WAIT_MS + 1, MAX_PULL_WAIT_MS + 1)):
        case = SimpleNamespace(path_parameters={}, query={"offset": 3, "waitMs": asked})
        before_call(None, case, {})
        assert case.query == {"offset": 3, "waitMs": sent}


def test_the_run_counts_the_servers_own_refusals_as_rejecting_an_invalid_request() -> None:
    # a request line or headers over gunicorn's limits are refused before the app
    # (414, 431; a body over the limit 413): schemathesis's own list leaves them out, and a
    # long generated query was reported as "schema-violating request accepted"
    from schemathesis.config import SchemathesisConfig
    from schemathesis.config._checks import NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES

    checks = SchemathesisConfig.from_path(str(CONFIG)).projects.default.checks
    expected = checks.negative_data_rejection.expected_statuses
    assert {"413", "414", "431"} <= set(expected)
    assert set(NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES) <= set(expected)  # nothing dropped
