"""Processes of the local stack: a child in its own process group with its output in a log
file, an echo of those logs to stdout, and the probes that tell when a part is ready."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

LOG_TAIL_LINES = 25


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def redis_ping(url: str) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when this process dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec


class Console:
    """stdout shared by the main thread and the log echo; a closed pipe is ignored."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            try:
                self._stream.write(text + "\n")
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass


class Child:
    """One process of the stack, in its own process group, output to its log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 ready: Callable[[Child], bool], *, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env or {})
        """Added to the stack's environment for this child only (its own token)."""
        self.log_path = log_path
        self.ready = ready
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str], cwd: Path, preexec: Callable[[], None] | None,
              *, restart: bool = False) -> None:
        """Start the process; a first start keeps the previous run's log as ``<log>.1``, a
        restart appends to the log (the lines before the crash stay beside the new ones)."""
        if self.log_path.exists() and not restart:
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
        with open(self.log_path, "ab" if restart else "wb") as log:
            self.proc = subprocess.Popen(self.argv, env={**env, **self.env}, cwd=cwd,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=preexec)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        """The leader or anything else of its process group is still there."""
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            return True
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def signal_group(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def log_bytes(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except FileNotFoundError:
            return b""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log_bytes().decode(errors="replace").splitlines()[-lines:]
        return "\n".join("    " + line for line in text) or "    (empty log)"


class LogEcho(threading.Thread):
    """Follows every child's log file and prints new lines as ``name | line``."""

    def __init__(self, children: Sequence[Child], console: Console) -> None:
        super().__init__(name="log-echo", daemon=True)
        self._children = children
        self._console = console
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        self._stop_event = threading.Event()
        self._width = max((len(c.name) for c in children), default=5)
        self._drain_lock = threading.Lock()

    def run(self) -> None:
        while not self._stop_event.wait(0.2):
            self.drain()
        self.drain()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(5)

    def drain(self) -> None:
        """Print what the logs gained since the last call (safe from any thread)."""
        with self._drain_lock:
            self._drain()

    def _drain(self) -> None:
        for child in self._children:
            chunk = self._read_new(child)
            if not chunk:
                continue
            *lines, rest = (self._partial.get(child.name, b"") + chunk).split(b"\n")
            self._partial[child.name] = rest
            for raw in lines:
                text = raw.decode(errors="replace").rstrip("\r")
                self._console.line(f"{child.name:<{self._width}} | {text}")

    def _read_new(self, child: Child) -> bytes:
        offset = self._offsets.get(child.name, 0)
        try:
            with open(child.log_path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read(1 << 20)
        except FileNotFoundError:
            return b""
        self._offsets[child.name] = offset + len(chunk)
        return chunk
