"""One JSON-over-HTTP client for every caller of the store and the retry service: the client
SDK, the retry service's store calls, the scheduler's hand-over calls.

It holds once what each of them did its own way: a keep-alive connection per thread (a lean
one for a plain ``http://`` service without a proxy, ``http_connections.py``,
DEC-lean-http-client; a ``requests.Session`` for ``https://`` or through a proxy), timeouts,
orjson bodies, the W3C trace context of the current span on every call (SPEC O1), and the
mapping of error answers onto the ``clepsydra_core.errors`` tree, chosen by the wire
``code`` (a 404 ``TOPIC_NOT_EXIST`` raises :class:`TopicNotFound`, a 403 ``NO_PERMISSION``
:class:`NoPermission`, ...). A service that does not answer raises :class:`Unavailable` naming
the URL.

Every call carries ``Authorization: Bearer <token>`` when the client has a token: the one it
is given, else ``CLEPSYDRA_TOKEN`` (so the SDK, the CLI and the services' own calls authenticate
here, in one place; docs/access-control.md). The token is never logged nor put in an error.

``HttpClient("http://127.0.0.1:8081").get("/v1/topics/{}", "%RETRY%G")`` percent-encodes each
path argument as one segment (``%25RETRY%25G``).

``requests`` (with urllib3, ~9 MiB of a process) is imported only by a client that needs it:
an ``https://`` service, or proxy variables in the environment of a client that takes them
(DEC-lean-http-client: the services' processes at rest never load it).
"""

from __future__ import annotations

import http.client
import os
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import orjson

from clepsydra_core.errors import (
    AlreadyDelivered,
    BodyTooLarge,
    ClepsydraError,
    DiskFull,
    Forbidden,
    GroupNotFound,
    MessageNotFound,
    NoPermission,
    NotFound,
    NotSent,
    OffsetOutOfRange,
    RateLimited,
    RemoteError,
    TopicNotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from clepsydra_core.properties import TRACEPARENT
from clepsydra_core.runtime import telemetry
from clepsydra_core.runtime.http_connections import DEFAULT_SPIN_US, ConnectionPool
from clepsydra_core.runtime.http_connections import NotSent as ConnectionNotSent
from clepsydra_core.settings import client_token, env_int
from clepsydra_core.wire.cluster import SHARDS_HEADER

if TYPE_CHECKING:
    import requests

Json = dict[str, Any]

_BY_CODE: dict[str, type[ClepsydraError]] = {
    cls.code: cls for cls in (TopicNotFound, MessageNotFound, GroupNotFound, NoPermission,
                              Forbidden, OffsetOutOfRange, Unavailable, DiskFull,
                              Unauthorized, RateLimited, AlreadyDelivered, BodyTooLarge)}
_BY_STATUS: dict[int, type[ClepsydraError]] = {
    400: ValidationError, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: ValidationError,
    413: BodyTooLarge, 414: ValidationError, 422: ValidationError, 431: ValidationError,
    429: RateLimited, 503: Unavailable,
}
_JSON_HEADERS = {"Content-Type": "application/json"}
_UNSAFE = re.compile(r"[^!-~]")
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
"""What a URL may hold unquoted (as ``requests.utils.requote_uri`` leaves it)."""
SPIN_VAR = "CLEPSYDRA_CLIENT_SPIN_US"
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy")
"""Lower-cased names of the environment's proxy variables (any case counts, as for requests)."""


def _proxied(base_url: str) -> bool:
    """True when the environment names a proxy ``requests`` would use for ``base_url`` (only
    then is requests imported to read it exactly, ``no_proxy`` included)."""
    if not any(key.lower() in _PROXY_VARS for key in os.environ):
        return False
    import requests

    return bool(requests.utils.get_environ_proxies(base_url))


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
    own keep-alive connection (``http_connections.ConnectionPool``; a ``requests.Session`` for
    ``https://`` or through a proxy), no connection shared between threads.

    ``env_proxies``: take proxies from the environment (read once per session; a user's SDK);
    service-to-service clients pass False (cluster-internal addresses). ``pool_size``: keep-alive
    connections per ``requests`` session (a service answering many threads at once wants more).
    ``token``: the bearer token to send (None: ``CLEPSYDRA_TOKEN``, else none). ``spin_us``:
    how long a call reads without blocking while answers come that fast and the machine has a
    core to spare (DEC-client-spin-spare-core; None:
    ``CLEPSYDRA_CLIENT_SPIN_US``, else ``http_connections.DEFAULT_SPIN_US``; 0: never)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 connect_timeout_s: float | None = None, service: str = "service",
                 env_proxies: bool = True, pool_size: int = 10,
                 token: str | None = None, spin_us: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.service = service
        self._env_proxies = env_proxies
        self._pool_size = pool_size
        self._spin_us = spin_us
        token = token or client_token()
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._prefix = ""
        self._shards = 0
        parts = urlsplit(self.base_url)
        if (parts.scheme == "http" and parts.hostname and not parts.username
                and not (env_proxies and _proxied(self.base_url))):
            if spin_us is None:
                spin_us = env_int(os.environ, SPIN_VAR, DEFAULT_SPIN_US, minimum=0,
                                  maximum=10_000)
            self._pool = ConnectionPool(parts.hostname, parts.port or 80, spin_us)
            self._prefix = parts.path
        self._set_auth({"Authorization": f"Bearer {token}"} if token else {})

    def _set_auth(self, auth: dict[str, str]) -> None:
        """The token's header field, and the fields every call starts with: on the lean
        connection the token's then ``Content-Type`` for a call with a body (a ``requests``
        session sends the token itself), made once, not merged a call."""
        self._auth = auth
        lead = auth if self._pool is not None else {}
        self._lead: dict[str, str] = dict(lead)
        self._json_lead: dict[str, str] = {**lead, **_JSON_HEADERS}

    @property
    def shards_hint(self) -> int:
        """How many store shards the last answer that said so named (``SHARDS_HEADER``; 0 when
        none did: a one-store store, or another service)."""
        return self._pool.shards if self._pool is not None else self._shards

    def sibling(self, base_url: str, service: str | None = None) -> HttpClient:
        """A client of another URL with this one's settings and token (another store shard,
        DEC-store-shards)."""
        twin = HttpClient(base_url, timeout_s=self.timeout_s,
                          connect_timeout_s=self.connect_timeout_s,
                          service=service or self.service, env_proxies=self._env_proxies,
                          pool_size=self._pool_size, spin_us=self._spin_us)
        twin._set_auth(dict(self._auth))
        return twin

    def _session(self) -> requests.Session:
        import requests  # an https:// or proxied service only (module docstring)
        from requests.adapters import HTTPAdapter

        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            # The environment's proxies are read once here, not on every call: with trust_env
            # requests looks for ~/.netrc and parses the proxy variables per request (~5 % of
            # a consumer's CPU). Our APIs take no netrc credentials.
            if self._env_proxies:
                session.proxies.update(requests.utils.get_environ_proxies(self.base_url))
            session.trust_env = False
            session.headers.update(self._auth)
            if self._pool_size != 10:
                adapter = HTTPAdapter(pool_connections=2, pool_maxsize=self._pool_size)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def path(self, template: str, *args: str | int) -> str:
        """Fill ``{}`` placeholders with percent-encoded segments."""
        return template.format(*(segment(a) for a in args))

    def request_status(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                       json: Any = None, timeout_s: float | None = None,
                       headers: dict[str, str] | None = None) -> tuple[int, Json]:
        """(status, JSON object) of a call answered below 400; the error tree otherwise.
        The request's header fields, in this order: the token's (the lean connection's; a
        ``requests`` session holds it), ``Content-Type`` with a body, the current span's
        context unless ``headers`` give one, then ``headers`` (a name given twice keeps its
        first place, the later value). The lean connection's call is made here, not a layer
        below (DEC-sdk-send-path: the SDK's every send passes)."""
        sent = dict(self._json_lead if json is not None else self._lead)
        if headers is None or TRACEPARENT not in headers:
            telemetry.inject(sent)  # the current span's context (a caller's headers win)
        if headers:
            sent.update(headers)
        read_s = timeout_s or self.timeout_s
        data = None if json is None else orjson.dumps(json)
        pool = self._pool
        try:
            if pool is not None:
                target = self._prefix + path
                if _UNSAFE.search(target):
                    target = quote(target, safe=_URL_SAFE)
                if params:
                    query = _clean(params)
                    if query:
                        target += ("&" if "?" in target else "?") + urlencode(query, doseq=True)
                status, content = pool.exchange(method, target, data, sent, read_s,
                                                self.connect_timeout_s or read_s)
            else:
                status, content = self._session_call(method, self.base_url + path, params,
                                                     data, sent, read_s)
        except (OSError, http.client.HTTPException) as exc:  # requests' errors are OSErrors
            kind = NotSent if isinstance(exc, ConnectionNotSent) else Unavailable
            cause = type(exc.__cause__ if kind is NotSent and exc.__cause__ else exc).__name__
            raise kind(
                f"the {self.service} at {self.base_url} did not answer ({cause}): "
                "check that it runs and that the URL is right") from exc
        try:
            payload = orjson.loads(content) if content else {}
        except orjson.JSONDecodeError:
            payload = None
        if status >= 400:
            raise error_from_response(status, payload, self.base_url + path)
        if not isinstance(payload, dict):
            raise RemoteError(f"{method} {self.base_url + path} answered {status} without a "
                              "JSON object")
        return status, payload

    def _session_call(self, method: str, url: str, params: dict[str, Any] | None,
                      data: bytes | None, headers: dict[str, str],
                      read_s: float) -> tuple[int, bytes]:
        """One call through the thread's ``requests`` session (https, a proxy)."""
        timeout = read_s if self.connect_timeout_s is None else (self.connect_timeout_s, read_s)
        resp = self._session().request(method, url, params=_clean(params), data=data,
                                       headers=headers, timeout=timeout)
        shards = resp.headers.get(SHARDS_HEADER)
        if shards is not None and shards.isdigit():
            self._shards = int(shards)
        return resp.status_code, resp.content

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                json: Any = None, timeout_s: float | None = None,
                headers: dict[str, str] | None = None) -> Json:
        return self.request_status(method, path, params=params, json=json,
                                   timeout_s=timeout_s, headers=headers)[1]

    def get(self, path: str, params: dict[str, Any] | None = None, **kw: Any) -> Json:
        return self.request("GET", path, params=params, **kw)

    def post(self, path: str, json: Any = None, *, params: dict[str, Any] | None = None,
             timeout_s: float | None = None, headers: dict[str, str] | None = None) -> Json:
        return self.request_status("POST", path, params=params,
                                   json=json if json is not None else {}, timeout_s=timeout_s,
                                   headers=headers)[1]

    def put(self, path: str, json: Any = None, **kw: Any) -> Json:
        return self.request("PUT", path, json=json if json is not None else {}, **kw)

    def delete(self, path: str, params: dict[str, Any] | None = None, **kw: Any) -> Json:
        return self.request("DELETE", path, params=params, **kw)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        if self._pool is not None:
            self._pool.close()


def _clean(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = str(value).lower() if isinstance(value, bool) else value
    return out
