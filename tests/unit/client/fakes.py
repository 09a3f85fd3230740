"""Fakes for the client's unit tests: an HTTP client that answers from a script."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clepsydra_core.errors import ClepsydraError
from clepsydra_core.runtime.http import HttpClient, segment
from clepsydra_core.wire.produce import ProduceAnswer
from clepsydra_core.wire.retry import SendBackAnswer

Handler = Callable[[str, str, Any], dict[str, Any]]


class FakeHttp:
    """Records every call; ``handler(method, path, body)`` answers or raises."""

    def __init__(self, handler: Handler | None = None, base_url: str = "http://fake") -> None:
        self.base_url = base_url
        self.timeout_s = 1.0
        self.calls: list[tuple[str, str, Any]] = []
        self.handler = handler or (lambda method, path, body: {})

    def path(self, template: str, *args: str | int) -> str:
        return template.format(*(segment(a) for a in args))

    def _call(self, method: str, path: str, body: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        return self.handler(method, path, body)

    def get(self, path: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        return self._call("GET", path, params)

    def post(self, path: str, json: Any = None, **kw: Any) -> dict[str, Any]:
        return self._call("POST", path, json)

    def put(self, path: str, json: Any = None, **kw: Any) -> dict[str, Any]:
        return self._call("PUT", path, json)

    def delete(self, path: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        return self._call("DELETE", path, params)

    def request(self, method: str, path: str, *, params: Any = None, json: Any = None,
                **kw: Any) -> dict[str, Any]:
        """Any method; the recorded body is ``{"params": ..., "json": ...}``."""
        return self._call(method, path, {"params": params, "json": json})

    def close(self) -> None:
        return None


def failing(exc: ClepsydraError) -> Handler:
    def handler(method: str, path: str, body: Any) -> dict[str, Any]:
        raise exc

    return handler


def as_http(fake: FakeHttp) -> HttpClient:
    return fake  # type: ignore[return-value]


class FakeRetry(FakeHttp):
    """The retry service's send-back routes (single and batch); ``answer(item)`` decides each
    item's result and ``items`` lists every send-back received, batched or not."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]],
                 batch_route: bool = True) -> None:
        super().__init__(self._handle)
        self.answer = answer
        self.batch_route = batch_route
        self.items: list[dict[str, Any]] = []
        self.batches: list[int] = []

    def _handle(self, method: str, path: str, body: Any) -> dict[str, Any]:
        if path.endswith("/send-back/batch"):
            if not self.batch_route:
                from clepsydra_core.errors import NotFound

                raise NotFound("no such route")
            self.items.extend(body["items"])
            self.batches.append(len(body["items"]))
            return {"results": [self.answer(item) for item in body["items"]]}
        self.items.append(body)
        return self.answer(body)


def stored(topic: str, msg_id: str = "NEW") -> dict[str, Any]:
    """The store's produce answer (:class:`ProduceAnswer`) for a message stored in ``topic``."""
    return ProduceAnswer(msg_id, topic, 0, 0, 0, 1, "7F00000100001F910000000000000000").to_json()


def sent_back(outcome: str, topic: str | None = None, delay_level: int | None = None,
              msg_id: str | None = None) -> dict[str, Any]:
    """The retry service's send-back answer (:class:`SendBackAnswer`)."""
    return SendBackAnswer(outcome, topic, delay_level, msg_id).to_json()
