"""Store produce path, counted in Python bytecodes: a deterministic figure for a noisy machine.

    .venv/bin/python -m bench.bytecodes [--base /path/to/other/worktree] [--runs 3]
                                        [--functions poller_group4 [--top 30]]

Counts the bytecodes the interpreter executes (``sys.settrace`` with ``frame.f_trace_opcodes``
set: one ``opcode`` event per instruction of Python code; C functions such as ``orjson`` or
``bytes.join`` count nothing) for one call of each of:

  lean_batch100   a produce of a batch of 100 (1 KiB bodies, tags and keys) through the lean
                  WSGI path (``app.wsgi_app``), environ and ``start_response`` given
  poller_single   a single produce through the worker's poller handling
                  (``worker.InlineProduce.serve``: ``inline.py`` reads the bytes of a
                  kept-alive request, the lean path answers them)
  poller_group4   four such produces ready together on the poller (``InlineProduce.serve_group``:
                  one append for the four, DEC-poller-group-append), a message's share (how
                  ``procs4`` of ``bench.stack_produce`` is answered)
  put_batch100    in-process ``MessageStore.put_batch`` of 100 ``PutRequest`` (async flush)

Each is warmed up first (caches per topic and queue filled, topic created), then counted
``--runs`` times; the median is printed (the counts vary by a few bytecodes with the clock and
the message ids). With ``--base`` the same counts are taken in a child process whose
``PYTHONPATH`` puts that worktree's sources first (``services/store/src``, ``libs/*/src``), and
both columns are printed with new/base. The figures do not depend on the machine's load, so
they can be taken while other suites run; they are a proxy for CPU a message, not a timing:
``bench.store_produce`` measures the time. ``--functions SCENARIO`` prints, for this tree, where
that scenario's bytecodes go, by function, the ``--top`` most first (a message's share).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BODY_BYTES = 1024
BATCH = 100
TOPIC = "bench"
SCENARIOS = ("lean_batch100", "poller_single", "poller_group4", "put_batch100")
GROUP = 4


def count(fn: Callable[[], Any], by_function: Counter[str] | None = None) -> int:
    """The bytecodes executed by one call of ``fn`` on this thread; ``by_function``: each
    function's share added to it too (``file:function``)."""
    n = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal n
        if event == "opcode":
            n += 1
            if by_function is not None:
                code = frame.f_code
                by_function[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        return local

    def global_(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return local

    sys.settrace(global_)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def _message(i: int) -> dict[str, object]:
    return {"body": f"{i:08d}" + "x" * (BODY_BYTES - 8), "tags": "bench", "keys": f"k{i}"}


def _environ(path: str, payload: bytes) -> dict[str, Any]:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "",
            "SERVER_PROTOCOL": "HTTP/1.1", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8081",
            "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(payload)),
            "HTTP_HOST": "127.0.0.1:8081", "wsgi.input": BytesIO(payload),
            "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr}


def measure(runs: int, functions: str | None = None, top: int = 30) -> dict[str, int]:
    """The median count of each scenario in this process (its sources: ``sys.path``'s);
    ``functions``: a scenario whose ``top`` functions by bytecodes are printed (stderr)."""
    from clepsydra_store.app import create_app
    from clepsydra_store.engine.config import EngineConfig
    from clepsydra_store.engine.message_store import MessageStore
    from clepsydra_store.engine.types import PutRequest
    from clepsydra_store.settings import StoreSettings
    from clepsydra_store.worker import InlineProduce

    out: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bytecodes-") as home:
        settings = StoreSettings.from_env({"CLEPSYDRA_HOME": home, "CLEPSYDRA_FLUSH": "async"})
        app = create_app(settings)
        store = app.extensions["clepsydra"].store
        store.create_topic(TOPIC, 4)
        wsgi: Any = app.wsgi_app
        batch = json.dumps({"messages": [_message(i) for i in range(BATCH)]}).encode()
        path = f"/v1/topics/{TOPIC}/messages/batch"
        seen: list[str] = []

        def lean() -> None:
            body = b"".join(wsgi(_environ(path, batch), lambda s, h: seen.append(s)))
            if not seen[-1].startswith("201"):
                raise RuntimeError(f"{seen[-1]} {body[:300]!r}")

        poller = InlineProduce.of(app)
        if poller is None:
            raise RuntimeError("the app does not answer on the poller (settings?)")
        single = json.dumps(_message(0)).encode()
        raw = (f"POST /v1/topics/{TOPIC}/messages HTTP/1.1\r\nHost: 127.0.0.1:8081\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(single)}\r\n\r\n"
               ).encode() + single

        def poll() -> None:
            served = poller.serve(raw, ("127.0.0.1", 50000))
            if served.count != 1 or not served.out.startswith(b"HTTP/1.1 201"):
                raise RuntimeError(served.out[:300].decode(errors="replace"))

        group = [(raw, ("127.0.0.1", 50000 + i)) for i in range(GROUP)]

        def poll_group() -> None:
            answers: list[Any] = []
            poller.serve_group(group, lambda i, served: answers.append(served.out))
            if len(answers) != GROUP or not all(a.startswith(b"HTTP/1.1 201") for a in answers):
                raise RuntimeError(f"{answers!r:.300}")

        for name, fn, per in (("lean_batch100", lean, 1), ("poller_single", poll, 1),
                              ("poller_group4", poll_group, GROUP)):
            for _ in range(3):
                fn()
            out[name] = int(statistics.median(count(fn) for _ in range(runs))) // per
            if name == functions:
                by: Counter[str] = Counter()
                count(fn, by)
                for where, n in by.most_common(top):
                    print(f"{n / per:>8,.0f}  {where}", file=sys.stderr)
        app.extensions["clepsydra"].store.close()

        engine = MessageStore(EngineConfig(data_dir=Path(home) / "inproc", flush="async"))
        try:
            engine.create_topic(TOPIC, 4)
            requests = [PutRequest(topic=TOPIC, body=b"x" * BODY_BYTES, tags="bench",
                                   keys=f"k{i}") for i in range(BATCH)]
            for _ in range(3):
                engine.put_batch(requests)
            out["put_batch100"] = int(statistics.median(
                count(lambda: engine.put_batch(requests)) for _ in range(runs)))
        finally:
            engine.close()
    return out


def tree_path(tree: Path) -> str:
    """PYTHONPATH putting ``tree``'s store and libs sources first."""
    parts = [tree / "services/store/src", *sorted((tree / "libs").glob("*/src")), tree]
    return os.pathsep.join(str(p) for p in parts)


def in_child(tree: Path, runs: int) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=tree_path(tree))
    done = subprocess.run([sys.executable, __file__, "--json", "--runs", str(runs)],
                          env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"counting in {tree} failed:\n{done.stderr}")
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another worktree to count against")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print this tree's counts as JSON")
    parser.add_argument("--functions", choices=SCENARIOS[:3],
                        help="print this tree's bytecodes of one scenario by function")
    parser.add_argument("--top", type=int, default=30, help="how many functions --functions "
                        "prints")
    args = parser.parse_args()
    if args.json or args.functions:
        print(json.dumps(measure(args.runs, args.functions, args.top)))
        return 0
    new = in_child(REPO, args.runs)
    base = in_child(args.base.resolve(), args.runs) if args.base else None
    print(f"{'scenario':<16} {'base':>10} {'new':>10} {'new/base':>9}" if base
          else f"{'scenario':<16} {'bytecodes':>10}")
    for name in SCENARIOS:
        if base:
            print(f"{name:<16} {base[name]:>10,} {new[name]:>10,} "
                  f"{new[name] / base[name]:>9.3f}")
        else:
            print(f"{name:<16} {new[name]:>10,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
