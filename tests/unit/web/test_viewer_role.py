"""The viewer role (clepsydra_core.auth, DEC-console-viewer-role) against every service's access
table: a viewer may call every route that only reads (GET) and none that changes anything; the
token routes stay an admin's. The apps are built over tmp_path and in-memory twins (no
network)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask

from clepsydra_analytics.access import ANALYTICS_ACCESS
from clepsydra_analytics.app import create_app as analytics_app
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_core.auth import READ_ACTIONS, Action, Principal, Role, denial
from clepsydra_retry.access import RETRY_ACCESS
from clepsydra_retry.app import create_app as retry_app
from clepsydra_retry.dlq_state import MemoryDlqState
from clepsydra_retry.groups import MemoryGroupStore
from clepsydra_retry.settings import RetrySettings
from clepsydra_store.api.contract import STORE_ACCESS
from clepsydra_store.app import create_app as store_app
from clepsydra_store.settings import StoreSettings
from clepsydra_web.auth import PermissionTable

VIEWER = Principal("v", Role.VIEWER)
READS = frozenset({"GET", "HEAD", "OPTIONS"})


def _methods(app: Flask) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        out.setdefault(rule.endpoint, set()).update(rule.methods or ())
    return out


def _apps(tmp_path: Path) -> list[tuple[str, Flask, PermissionTable]]:
    store = store_app(StoreSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path / "s")}))
    retry = retry_app(RetrySettings.for_test("http://127.0.0.1:9", "redis://127.0.0.1:9/0"),
                      groups=MemoryGroupStore(), dlq_state=MemoryDlqState())
    analytics = analytics_app(AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path)}))
    return [("store", store, STORE_ACCESS), ("retry", retry, RETRY_ACCESS),
            ("analytics", analytics, ANALYTICS_ACCESS)]


def test_a_viewer_reads_every_route_that_reads_and_changes_nothing(tmp_path: Path) -> None:
    apps = _apps(tmp_path)
    try:
        for service, app, table in apps:
            methods = _methods(app)
            for endpoint, need in table.items():
                reads = methods[endpoint] <= READS
                allowed = denial(VIEWER, need.action, "orders") is None
                if need.action is Action.AUTH_ADMIN:  # tokens: an admin's, even to list
                    assert not allowed, (service, endpoint)
                    continue
                assert allowed == reads, (service, endpoint, sorted(methods[endpoint]))
    finally:
        apps[0][1].extensions["clepsydra"].close()


@pytest.mark.parametrize("action", sorted(READ_ACTIONS, key=lambda a: a.name))
def test_viewer_actions_are_not_scoped(action: Action) -> None:
    assert denial(VIEWER, action, "any-topic-or-group") is None
    assert denial(VIEWER, action, "%RETRY%g") is None
