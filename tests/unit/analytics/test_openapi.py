"""The analytics API's OpenAPI document names every route the app serves, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from clepsydra_analytics.app import create_app
from clepsydra_analytics.settings import AnalyticsSettings


def test_every_route_is_documented(tmp_path: Path) -> None:
    app = create_app(AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path)}))
    served = {(re.sub(r"<(\w+)>", lambda m: "{" + {"run_id": "runId"}.get(
        m.group(1), m.group(1)) + "}", rule.rule), method.lower())
        for rule in app.url_map.iter_rules() if rule.endpoint != "static"
        for method in rule.methods or () if method not in ("HEAD", "OPTIONS")}
    doc = app.test_client().get("/openapi.json").json
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served == documented
