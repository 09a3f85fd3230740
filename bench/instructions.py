"""Machine instructions the store's worker spends a single produce, counted by callgrind: the
CPU a message, deterministic on a busy machine (``bench.bytecodes`` counts Python bytecodes only;
this counts everything in user space: the interpreter, its C objects, ``orjson``, the kernel
excluded).

    .venv/bin/python -m bench.instructions [--base /path/to/other/worktree] [--sends 2000]
                                           [--shape raw|sdk|sdk-delay] [--keep FILE]

Starts ``python -m clepsydra_store`` under ``valgrind --tool=callgrind`` (apt's ``valgrind``)
with a temporary CLEPSYDRA_HOME, creates a topic of 4 queues, sends 300 single 1 KiB produces
from one raw keep-alive socket (``bench.raw_client.RawConnection``: the poller's path) to warm
up, zeroes the counters, sends ``--sends`` more, and prints the worker's instructions a send.
``--shape`` says what a send is: ``raw`` (default) the produce bench's message (1 KiB body, tags,
keys); ``sdk`` what ``Producer.send`` puts on the wire (a 16-byte body, its own ``UNIQ_KEY`` and
an unsampled ``traceparent`` in the properties and in the header); ``sdk-delay`` the same with
``delayMs`` (a timer, as ``send(delay=)`` sends it: the peers workload's producer).
With ``--base`` the same is counted with another worktree's store and libs sources first on
``PYTHONPATH``, and new/base is printed. Two runs of one tree agreed within 0.15 % here.
``--keep FILE`` copies callgrind's dump of this tree's counted sends to ``FILE``:
``callgrind_annotate FILE`` then says which C functions (the interpreter's, its objects', the
extensions') the instructions went to.

gunicorn's C request parser (``gunicorn-h1c``) uses an SSE 4.2 instruction valgrind cannot run:
it is hidden for the count (gunicorn then parses in Python; the poller's path does not use it).
A send is ~50 times slower under callgrind: 2,000 take about 20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.bytecodes import tree_path
from bench.raw_client import RawConnection
from bench.store_produce import TOPIC, message

REPO = Path(__file__).resolve().parents[1]
WARM_UP = 300
NO_H1C = "raise ImportError('hidden from callgrind: SSE 4.2')\n"


SHAPES = ("raw", "sdk", "sdk-delay")


def requests_of(shape: str, host: str, sends: int) -> list[bytes]:
    """The request bytes of ``sends`` single produces of ``shape`` (one each: the SDK's ids and
    trace ids differ from one message to the next)."""
    path = f"/v1/topics/{TOPIC}/messages"
    if shape == "raw":
        payload = json.dumps(message(0)).encode()
        return [RawConnection.request_bytes(host, path, payload)] * sends
    out = []
    for i in range(sends):
        traceparent = f"00-{i + 1:032x}-{i + 1:016x}-00"
        fields: dict[str, object] = {"body": "x" * 16, "properties": {
            "UNIQ_KEY": f"C0000202{i:024X}", "traceparent": traceparent}}
        if shape == "sdk-delay":
            fields["delayMs"] = 5000
        out.append(RawConnection.request_bytes(host, path, json.dumps(fields).encode(),
                                               {"traceparent": traceparent}))
    return out


def count(tree: Path, sends: int, shape: str = "raw", keep: Path | None = None) -> float:
    """The store worker's instructions a single produce of ``shape``, ``tree``'s sources;
    ``keep``: where to copy callgrind's dump of the counted sends (``callgrind_annotate``)."""
    with tempfile.TemporaryDirectory(prefix="clepsydra-instructions-") as tmp:
        hide = Path(tmp) / "hide" / "gunicorn_h1c"
        hide.mkdir(parents=True)
        (hide / "__init__.py").write_text(NO_H1C)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hide.parent), tree_path(tree)]),
                   CLEPSYDRA_HOME=str(Path(tmp) / "home"), CLEPSYDRA_STORE_PORT=str(port),
                   CLEPSYDRA_FLUSH="async", CLEPSYDRA_LOG_LEVEL="WARNING")
        out = Path(tmp) / "cg"
        out.mkdir()
        store = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=yes",
                                  f"--callgrind-out-file={out}/cg.%p", sys.executable, "-m",
                                  "clepsydra_store"], env=env, cwd=tree,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_up(url)
            requests.post(f"{url}/v1/topics", json={"name": TOPIC, "queues": 4}, timeout=120)
            conn = RawConnection(url, f"/v1/topics/{TOPIC}/messages", b"")
            warm = requests_of(shape, conn.host, WARM_UP + sends)
            for request in warm[:WARM_UP]:
                conn.send(request)
            worker = Path(f"/proc/{store.pid}/task/{store.pid}/children").read_text().split()[0]
            subprocess.run(["callgrind_control", "-z", worker], check=True, capture_output=True)
            for request in warm[WARM_UP:]:
                conn.send(request)
            subprocess.run(["callgrind_control", "-d", worker], check=True, capture_output=True)
            conn.close()
            dumps = sorted(out.glob(f"cg.{worker}.*"))
            if keep is not None:
                keep.write_bytes(dumps[-1].read_bytes())
            totals = [line for line in dumps[-1].read_text().splitlines()
                      if line.startswith("totals:")]
            return int(totals[0].split()[1]) / sends
        finally:
            store.terminate()
            store.wait(120)


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/healthz", timeout=5).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit(f"the store under callgrind did not answer at {url}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another worktree to count against")
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--shape", choices=SHAPES, default="raw")
    parser.add_argument("--keep", type=Path, help="copy callgrind's dump of this tree's sends "
                        "here (read it with callgrind_annotate)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt-get install valgrind")
    new = count(REPO, args.sends, args.shape, args.keep)
    what = f"single produce, {args.shape} (poller path)"
    if args.base is None:
        print(f"{what}: {new:,.0f} instructions a send")
        return 0
    base = count(args.base.resolve(), args.sends, args.shape)
    print(f"{what}: base {base:,.0f}, new {new:,.0f} instructions a send, "
          f"new/base {new / base:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
