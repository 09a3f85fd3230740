"""What access control costs on the store's produce path (DEC-tokens-at-once's figures).

    .venv/bin/python -m bench.auth_overhead [--requests 20000] [--rounds 5]

Two measures, both in one process so that the other processes on the machine matter less:

- ``guard``: ``Guard.check`` alone (a known token: one dict lookup in the by-value cache, the
  role check) and the first sight of a token (SHA-256 of it, then the digest table);
- ``fastpath``: whole produce requests (1 KiB body) through the store's WSGI app, as gunicorn
  calls it (the produce fast path, then the engine, async flush), with ``CLEPSYDRA_AUTH`` off
  and on, alternated ``--rounds`` times; the median of each is printed with the difference.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clepsydra_core.auth import Action, Role
from clepsydra_core.auth_tokens import TokenTable, create_token
from clepsydra_store.app import create_app
from clepsydra_store.settings import StoreSettings
from clepsydra_web.auth import Guard

TOPIC = "bench"
BODY = b'{"body": "' + b"x" * 1024 + b'"}'


def per_call_us(fn: Callable[[], object], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def bench_guard(tmp: Path, n: int) -> None:
    path = tmp / "guard-tokens.json"
    _, token = create_token(path, "p", Role.PRODUCER, topics=("bench*",))
    guard = Guard(TokenTable(path))
    header = f"Bearer {token}"
    cached = per_call_us(lambda: guard.check(header, Action.SEND, TOPIC), n)
    table = guard.tokens
    fresh = per_call_us(lambda: (table._state.cache.clear(), table.lookup(token)), n)
    unknown = per_call_us(lambda: table.lookup("clp_unknown"), n)
    print(f"guard    known token: {cached:.2f} us/check   first sight (sha256): {fresh:.2f} us"
          f"   unknown token (sha256 + the file's stat): {unknown:.2f} us")


def store_app(home: Path, auth: bool, tokens: Path) -> Any:
    env = {"CLEPSYDRA_HOME": str(home), "CLEPSYDRA_STORE_PORT": "18081",
           "CLEPSYDRA_AUTH": "on" if auth else "off",
           "CLEPSYDRA_AUTH_TOKENS_FILE": str(tokens)}
    app = create_app(StoreSettings.from_env(env))
    client = app.test_client()
    headers = {"Authorization": f"Bearer {ADMIN}"} if auth else {}
    client.post("/v1/topics", json={"name": TOPIC, "queues": 4}, headers=headers)
    return app


ADMIN = ""


def run_requests(app: Any, token: str | None, n: int) -> float:
    """Seconds per produce request through the WSGI app (fast path)."""
    base = {"REQUEST_METHOD": "POST", "PATH_INFO": f"/v1/topics/{TOPIC}/messages",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(BODY)),
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "18081", "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http"}
    if token:
        base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        statuses.append(status)

    wsgi = app.wsgi_app
    started = time.perf_counter()
    for _ in range(n):
        environ = dict(base)
        environ["wsgi.input"] = io.BytesIO(BODY)
        b"".join(wsgi(environ, start_response))
    elapsed = time.perf_counter() - started
    assert all(s.startswith("201") for s in statuses), statuses[:3]
    return elapsed / n


def main() -> None:
    global ADMIN
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        bench_guard(tmp, 200_000)
        tokens = tmp / "tokens.json"
        _, ADMIN = create_token(tokens, "admin", Role.ADMIN)
        _, producer = create_token(tokens, "producer", Role.PRODUCER, topics=("bench*",))
        off = store_app(tmp / "off", False, tokens)
        on = store_app(tmp / "on", True, tokens)
        run_requests(off, None, 1000)  # warm up both
        run_requests(on, producer, 1000)
        offs, ons = [], []
        for _ in range(args.rounds):
            offs.append(run_requests(off, None, args.requests))
            ons.append(run_requests(on, producer, args.requests))
        off_us, on_us = statistics.median(offs) * 1e6, statistics.median(ons) * 1e6
        print(f"fastpath auth off: {off_us:.1f} us/request ({1e6 / off_us:,.0f} req/s)   "
              f"auth on: {on_us:.1f} us/request ({1e6 / on_us:,.0f} req/s)   "
              f"difference: {on_us - off_us:+.1f} us ({(on_us / off_us - 1) * 100:+.1f} %)")
        for app in (off, on):
            app.extensions["clepsydra"].close()


if __name__ == "__main__":
    main()
