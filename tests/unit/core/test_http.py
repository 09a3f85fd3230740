"""The HTTP client's error mapping and path encoding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from clepsydra_core.errors import (
    BodyTooLarge,
    Forbidden,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    NotFound,
    OffsetOutOfRange,
    RemoteError,
    TopicNotFound,
    Unavailable,
    ValidationError,
)
from clepsydra_core.runtime.http import HttpClient, error_from_response, segment
from tools.processes import free_port

if TYPE_CHECKING:

    from clepsydra_core.errors import ClepsydraError

def test_topic_segments_are_percent_encoded() -> None:
    assert segment("%RETRY%G") == "%25RETRY%25G"
    assert segment("a/b c") == "a%2Fb%20c"
    assert HttpClient("http://x/").path("/v1/topics/{}/queues/{}", "%DLQ%g", 3) == \
        "/v1/topics/%25DLQ%25g/queues/3"


@pytest.mark.parametrize(("status", "code", "cls"), [
    (404, "TOPIC_NOT_EXIST", TopicNotFound),
    (404, "MESSAGE_NOT_FOUND", MessageNotFound),
    (404, "SUBSCRIPTION_GROUP_NOT_EXIST", GroupNotFound),
    (403, "NO_PERMISSION", NoPermission),
    (403, "FORBIDDEN", Forbidden),
    (400, "OFFSET_OUT_OF_RANGE", OffsetOutOfRange),
    (400, "INVALID_DELAY_LEVEL", ValidationError),
    (409, "TOPIC_CONFLICT", ValidationError),
    (413, "BODY_TOO_LARGE", BodyTooLarge),  # DEC-too-large-413
    (404, "SOMETHING", NotFound),
    (503, None, Unavailable),
    (500, "SYSTEM_ERROR", RemoteError),
])
def test_error_codes_map_to_the_error_tree(status: int, code: str | None,
                                           cls: type[ClepsydraError]) -> None:
    exc = error_from_response(status, {"error": code, "message": "text (SPEC X)"}, "u")
    assert type(exc) is cls
    assert exc.code == (code or cls.code)
    assert exc.http_status == status
    assert "text" in exc.message


def test_error_without_a_body_names_the_status() -> None:
    exc = error_from_response(502, None, "http://x/y")
    assert "HTTP 502" in exc.message


def test_a_service_that_does_not_answer_raises_unavailable() -> None:
    http = HttpClient(f"http://127.0.0.1:{free_port()}", timeout_s=1.0, service="store")
    with pytest.raises(Unavailable, match=r"the store at http://127\.0\.0\.1"):
        http.get("/healthz")
    http.close()


def test_proxies_come_from_the_environment_once_and_netrc_is_not_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    session = HttpClient("http://store.example:8081")._session()
    assert session.proxies.get("http") == "http://proxy.example:3128"
    assert session.trust_env is False  # no per-call environment and ~/.netrc look-ups
    monkeypatch.setenv("NO_PROXY", "store.example")
    assert "http" not in HttpClient("http://store.example:8081")._session().proxies


_LOADS_REQUESTS = """
import sys
from clepsydra_core.errors import Unavailable
from clepsydra_core.runtime.http import HttpClient
client = HttpClient(sys.argv[1], timeout_s=1.0)
try:
    client.get("/healthz")
except Unavailable:
    pass
print("requests" in sys.modules, "urllib3" in sys.modules, client._pool is not None)
"""


@pytest.mark.parametrize(("env", "loaded", "lean"), [
    ({}, False, True),
    ({"HTTP_PROXY": "http://127.0.0.1:9"}, True, False),
    # a proxy variable makes requests read the environment exactly (no_proxy): the service is
    # not proxied, so the call still goes through the lean connections
    ({"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}, True, True)])
def test_requests_is_loaded_only_for_a_proxied_or_https_service(
        env: dict[str, str], loaded: bool, lean: bool) -> None:
    # DEC-memory-at-rest: requests and urllib3 were ~9 MiB of every process with an
    # HttpClient; a plain http:// service without a proxy goes through the lean connections
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    out = subprocess.run([sys.executable, "-c", _LOADS_REQUESTS, f"http://127.0.0.1:{free_port()}"],
                         env={**clean, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(loaded), str(loaded), str(lean)]
