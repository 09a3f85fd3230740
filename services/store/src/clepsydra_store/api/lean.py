"""One route answered below Flask (issue 14, the lean WSGI path of ``fastpath.py``), as the
Flask view, its hooks and its error handlers would: the request's span and metrics under the
view's operation, the access check first when access control is on, errors as v1
``ErrorAnswer`` bodies (``clepsydra_web.errors.error_answer``). The pull (``queues.serve``) and
the timers' hand-over (``timers.serve``) are answered through it; produce has its own
(``produce.serve``: its body is read before the check, on the poller thread too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clepsydra_core.auth import Action
from clepsydra_store.api.context import StoreContext
from clepsydra_web import jsonio
from clepsydra_web.auth import REFUSALS, refusal
from clepsydra_web.errors import error_answer
from clepsydra_web.jsonio import JSON_TYPE

Answer = tuple[int, list[tuple[str, str]], bytes]
"""(status, headers, JSON body)."""


def answer(c: StoreContext, environ: Mapping[str, Any], operation: str, action: Action,
           resource: str | None, make: Callable[[], Any]) -> Answer:
    """``make()``'s JSON object as a 200, within the request's span and metrics; the 401,
    403 or 429 when the request's token may not do ``action`` on ``resource``; the error's
    answer when ``make`` raises."""
    scope = c.obs.begin(operation, environ)
    status = 500
    try:
        if c.guard is not None:
            try:
                c.guard.check(environ.get("HTTP_AUTHORIZATION"), action, resource)
            except REFUSALS as exc:
                status, headers, body = refusal(exc)
                return status, headers, body
        body = jsonio.dumps(make())
        status = 200
    except Exception as exc:  # as Flask's handlers answer (a broken chunked body: 400)
        status, body = error_answer(exc)
    finally:
        c.obs.end(scope, status)
    return status, [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body)))], body
