"""One small JSON-over-HTTP client for the store and the retry service (DESIGN.md, HTTP v1).

Errors come back as the ``clepsydra_core.errors`` tree, chosen by the wire ``code`` (a 404
``TOPIC_NOT_EXIST`` raises :class:`TopicNotFound`, a 403 ``NO_PERMISSION`` :class:`NoPermission`,
...). A service that does not answer raises :class:`Unavailable` naming the URL.

``HttpClient("http://127.0.0.1:8081").get("/v1/topics/{}", "%RETRY%G")`` percent-encodes each
path argument as one segment (``%25RETRY%25G``).
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote

import requests

from clepsydra_core import telemetry
from clepsydra_core.errors import (
    ClepsydraError,
    Forbidden,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    NotFound,
    OffsetOutOfRange,
    TopicNotFound,
    Unavailable,
    ValidationError,
)

Json = dict[str, Any]

_BY_CODE: dict[str, type[ClepsydraError]] = {
    "TOPIC_NOT_EXIST": TopicNotFound,
    "MESSAGE_NOT_FOUND": MessageNotFound,
    "SUBSCRIPTION_GROUP_NOT_EXIST": GroupNotFound,
    "NO_PERMISSION": NoPermission,
    "FORBIDDEN": Forbidden,
    "OFFSET_OUT_OF_RANGE": OffsetOutOfRange,
    "SERVICE_UNAVAILABLE": Unavailable,
}
_BY_STATUS: dict[int, type[ClepsydraError]] = {
    400: ValidationError, 403: Forbidden, 404: NotFound, 409: ValidationError,
    413: ValidationError, 422: ValidationError, 503: Unavailable,
}


class RemoteError(ClepsydraError):
    """A service answered with an error the client has no closer class for."""


def segment(value: str | int) -> str:
    """One percent-encoded path segment: ``%RETRY%G`` -> ``%25RETRY%25G``."""
    return quote(str(value), safe="")


def error_from_response(status: int, payload: Any, url: str) -> ClepsydraError:
    """The ClepsydraError for a v1 error body ``{"error": CODE, "message": text}``."""
    code = message = None
    if isinstance(payload, dict):
        code = payload.get("error")
        message = payload.get("message")
    if not isinstance(code, str):
        code = None
    text = message if isinstance(message, str) and message else f"HTTP {status} from {url}"
    cls: type[ClepsydraError] = RemoteError
    if code and code in _BY_CODE:
        cls = _BY_CODE[code]
    elif code and code.startswith("INVALID"):
        cls = ValidationError
    elif status in _BY_STATUS:
        cls = _BY_STATUS[status]
    exc = cls(text)
    # The wire code is kept even when the class is a broader one (INVALID_DELAY_LEVEL, ...).
    exc.code = code or exc.code
    exc.http_status = status
    return exc


class HttpClient:
    """JSON requests against one base URL. Safe to share between threads: each thread gets its
    own ``requests.Session`` (connection pooling without cross-thread sharing)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0, service: str = "service") -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.service = service
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            # The environment's proxies are read once here, not on every call: with trust_env
            # requests looks for ~/.netrc and parses the proxy variables per request (~5 % of
            # a consumer's CPU). Our APIs take no netrc credentials.
            session.proxies.update(requests.utils.get_environ_proxies(self.base_url))
            session.trust_env = False
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def path(self, template: str, *args: str | int) -> str:
        """Fill ``{}`` placeholders with percent-encoded segments."""
        return template.format(*(segment(a) for a in args))

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                json: Any = None, timeout_s: float | None = None) -> Json:
        url = self.base_url + path
        headers: dict[str, str] = {}
        telemetry.inject(headers)
        try:
            resp = self._session().request(
                method, url, params=_clean(params), json=json, headers=headers,
                timeout=timeout_s or self.timeout_s)
        except requests.RequestException as exc:
            raise Unavailable(
                f"the {self.service} at {self.base_url} did not answer ({type(exc).__name__}): "
                "check that it runs and that the URL is right") from exc
        try:
            payload = resp.json() if resp.content else {}
        except ValueError:
            payload = None
        if resp.status_code >= 400:
            raise error_from_response(resp.status_code, payload, url)
        if not isinstance(payload, dict):
            raise RemoteError(f"{method} {url} answered {resp.status_code} without a JSON object")
        return payload

    def get(self, path: str, params: dict[str, Any] | None = None, **kw: Any) -> Json:
        return self.request("GET", path, params=params, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> Json:
        return self.request("POST", path, json=json if json is not None else {}, **kw)

    def put(self, path: str, json: Any = None, **kw: Any) -> Json:
        return self.request("PUT", path, json=json if json is not None else {}, **kw)

    def delete(self, path: str, params: dict[str, Any] | None = None, **kw: Any) -> Json:
        return self.request("DELETE", path, params=params, **kw)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()


def _clean(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = str(value).lower() if isinstance(value, bool) else value
    return out
