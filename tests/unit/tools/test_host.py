"""tools/host.py (DEC-stack-console-hosted): what one process may serve, and each request to
the app of the port it arrived on. The served processes themselves:
tests/integration/test_hosted_console.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from tools import host


def _app(name: bytes) -> host.WsgiApp:
    def app(_environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [name]
    return app


def test_a_request_goes_to_the_app_of_its_port() -> None:
    by_port = host.ByPort({"8082": _app(b"retry"), "8087": _app(b"console")})
    statuses: list[str] = []

    def start(status: str, _headers: list[tuple[str, str]]) -> None:
        statuses.append(status)

    assert by_port({"SERVER_PORT": "8082"}, start) == [b"retry"]
    assert by_port({"SERVER_PORT": "8087"}, start) == [b"console"]
    assert by_port({"SERVER_PORT": "9999"}, start) == [b"no service on this port\n"]
    assert statuses == ["200 OK", "200 OK", "404 Not Found"]
    assert [host.port_of(b) for b in ("127.0.0.1:8082", "[::1]:8087", "0.0.0.0:1")] == [
        "8082", "8087", "1"]


@pytest.mark.parametrize("modules", [["clepsydra_retry"], ["clepsydra_store", "clepsydra_console"],
                                     ["clepsydra_retry", "clepsydra_retry"]])
def test_only_two_or_more_hostable_services_each_once(modules: list[str]) -> None:
    with pytest.raises(ValueError, match="hosts two or more of"):
        host.hosted(modules)


def test_a_service_with_a_gunicorn_master_is_not_hosted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # one gunicorn worker in this process serves both: as deployed (masters) it cannot
    monkeypatch.setenv("CLEPSYDRA_SINGLE_PROCESS", "false")
    with pytest.raises(ValueError, match="CLEPSYDRA_SINGLE_PROCESS=true only"):
        host.hosted(["clepsydra_retry", "clepsydra_console"])
    assert host.main(["clepsydra_retry", "clepsydra_console"]) == 2
