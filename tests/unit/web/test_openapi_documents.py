"""The OpenAPI documents are generated and cannot drift: each checked-in
``openapi.json`` equals what its service's route table and the wire types make, each names every
route its app serves, and the generator adds what every route of a shape can answer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from flask import Flask

from clepsydra_core.wire.codec import WireValue
from clepsydra_web.openapi import Answer, Api, Param, Route, build
from tools import openapi as tool

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.mark.parametrize("package", sorted(tool.DOCUMENTS))
def test_checked_in_document_is_the_generated_one(package: str) -> None:
    assert tool.document_path(package).read_text(encoding="utf-8") == tool.generated(package), \
        f"{package}/openapi.json is stale: run make openapi"


def test_check_mode_names_a_stale_document(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n", encoding="utf-8")
    monkeypatch.setattr(tool, "document_path", lambda package: stale)
    monkeypatch.setattr(tool, "DOCUMENTS", {"clepsydra_retry": tool.DOCUMENTS["clepsydra_retry"]})
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0 and tool.main(["--check"]) == 0  # written, then current


def _served(app: Flask) -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        routes.setdefault(path, set()).update(m.lower() for m in rule.methods or ()
                                              if m.lower() in METHODS)
    return routes


def _documented(package: str) -> dict[str, set[str]]:
    doc = json.loads(tool.document_path(package).read_text(encoding="utf-8"))
    return {path: {m for m in ops if m in METHODS} for path, ops in doc["paths"].items()}


def test_store_document_names_every_route(tmp_path: Path) -> None:
    from clepsydra_store.app import create_app
    from clepsydra_store.settings import StoreSettings

    settings = StoreSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path)})
    app = create_app(settings)
    try:
        served = _served(app)
    finally:
        app.extensions["clepsydra"].close()
    served = {re.sub(r"\{(msg_id|queue_id|client_id)\}",
                     lambda m: "{" + {"msg_id": "msgId", "queue_id": "queueId",
                                      "client_id": "clientId"}[m.group(1)] + "}", path): ops
              for path, ops in served.items()}
    assert _documented("clepsydra_store") == served


@dataclass(frozen=True, slots=True)
class _Thing(WireValue):
    """A thing."""

    name: str
    size: int | None = None


def test_generator_adds_the_shape_errors_and_closes_requests() -> None:
    api = Api("t", "1", "d", [
        Route("PUT", "/v1/things/{id}", "putThing", "Put", [Answer(200, "ok", _Thing)],
              request=_Thing, errors=(409,)),
        Route("GET", "/v1/things", "listThings", "List", [Answer(200, "ok", {"type": "array"})]),
    ], path_params={"id": Param("id", {"type": "integer", "minimum": 0})})
    doc = build(api)
    put = doc["paths"]["/v1/things/{id}"]["put"]
    assert set(put["responses"]) == {"200", "400", "404", "409", "413", "414"}
    assert put["parameters"][0] == {"name": "id", "in": "path", "required": True,
                                    "schema": {"type": "integer", "minimum": 0}}
    assert set(doc["paths"]["/v1/things"]["get"]["responses"]) == {"200"}
    thing = doc["components"]["schemas"]["_Thing"]
    assert thing["additionalProperties"] is False and thing["required"] == ["name"]
    assert thing["properties"]["size"]["type"] == ["integer", "null"]  # optional: null = absent
    assert thing["description"] == "A thing."


def test_the_bearer_scheme_is_described_with_its_answers() -> None:
    """Access control: the bearer scheme of CLEPSYDRA_AUTH=on is in every document,
    its 401 and 403 described once."""
    api = Api("t", "1", "d", [
        Route("GET", "/v1/things", "listThings", "List", [Answer(200, "ok")]),
        Route("GET", "/healthz", "healthz", "Up", [Answer(200, "ok")])], path_params={})
    doc = build(api)
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    text = doc["components"]["securitySchemes"]["bearerAuth"]["description"]
    assert "401 UNAUTHORIZED" in text and "403 FORBIDDEN" in text and "/healthz" in text


def test_generator_refuses_a_route_twice_and_an_unknown_schema() -> None:
    twice = Api("t", "1", "d", [Route("GET", "/x", "a", "A", [Answer(200, "ok")])] * 2,
                path_params={})
    with pytest.raises(ValueError, match="declared twice"):
        build(twice)
    unknown = Api("t", "1", "d", [Route("GET", "/x", "a", "A", [Answer(200, "ok", "Nope")])],
                  path_params={})
    with pytest.raises(ValueError, match="Nope"):
        build(unknown)
