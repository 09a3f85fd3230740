"""The local stack's fork server, the "zygote" (DEC-stack-zygote): one single-threaded process
that imports the modules the stack's Python services share (:data:`PRELOAD`), freezes them
(``gc.freeze``) and forks each service on the supervisor's request, so the services share
those pages instead of each importing its own copy.

    python -m tools.zygote --fd N --room "<spaces>"      (started by tools/stack.py only)

Each service stays a process of its own, as when it is exec'd: the zygote forks a short-lived
middle process that forks the service and exits, so the service is adopted by the supervisor
(a child subreaper, ``PR_SET_CHILD_SUBREAPER``): its parent is the supervisor, which waits for
it (``waitpid``) and restarts it as any other child; a killed zygote leaves the services
running and is started again. The service then, before its module runs: has its own session
(process group), stdin /dev/null and stdout/stderr on its log file (sent by the supervisor with
the request), no other descriptor of the zygote's, SIGTERM when the supervisor dies, the
interpreter's own signal handlers, its environment (``/proc/<pid>/environ`` too: the
zygote keeps room in its own, :data:`ROOM_VAR`), working directory and ``sys.argv``, and
its command line (``/proc/<pid>/cmdline``, what ``ps`` shows and the tests and benches find
it by) written over the zygote's: ``python -m clepsydra_store``. Its module runs as
``__main__`` (``runpy``) and its exit is the interpreter's (atexit, threads joined).

The protocol, over a ``SOCK_SEQPACKET`` socket pair, one JSON object a message, each with
``"v": 1``: the zygote says ``{"pid", "modules"}`` once it has imported :data:`PRELOAD` (or
``{"error"}``); a request is ``{"argv", "env", "cwd"}`` with the log file's descriptor
attached (``SCM_RIGHTS``); the answer ``{"pid"}`` (the service's) or ``{"error"}``, and the
supervisor then starts that service as a new interpreter instead. The zygote exits when the
supervisor closes its end.

Once every service is ready the supervisor closes its end and the zygote exits
(:meth:`Zygote.retire`, DEC-zygote-retires): every page the services share stays mapped in
them, and the zygote's own copies of the pages each of them wrote to (most of its memory) are
given back. A service restarted after that is forked from a zygote started again for it, which
exits once it has forked (``CLEPSYDRA_STACK_KEEP_ZYGOTE=true``: the zygote stays, for
``bench.stack_memory --pages``, which compares the services' pages with its own).

``CLEPSYDRA_STACK_FORK=off`` (``python -m tools.stack --no-fork``): every service exec'd, as
the images and Kubernetes run them (one service per container: no zygote there).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tools.processes import REPO, Child, parent_death_signal

FORK_VAR = "CLEPSYDRA_STACK_FORK"
KEEP_VAR = "CLEPSYDRA_STACK_KEEP_ZYGOTE"
"""``true``: the zygote stays once the stack is ready (DEC-zygote-retires: it exits)."""
PROTOCOL = 1
PRELOAD = (
    # every service: the shared library (domain, wire types, settings, logging, telemetry,
    # the HTTP client), OpenTelemetry's SDK, Prometheus' client
    "clepsydra_core.auth", "clepsydra_core.groups", "clepsydra_core.runtime.health_http",
    "clepsydra_core.runtime.http", "clepsydra_core.runtime.logging", "clepsydra_core.msgid",
    "clepsydra_core.retry_rules", "clepsydra_core.settings", "clepsydra_core.runtime.telemetry",
    "clepsydra_core.validation", "clepsydra_core.wire.analytics", "clepsydra_core.wire.codec",
    "clepsydra_core.wire.copy", "clepsydra_core.wire.dlq", "clepsydra_core.wire.errors",
    "clepsydra_core.wire.groups", "clepsydra_core.wire.health", "clepsydra_core.wire.history",
    "clepsydra_core.wire.locks", "clepsydra_core.wire.messages", "clepsydra_core.wire.produce",
    "clepsydra_core.wire.retry", "clepsydra_core.wire.schedule", "clepsydra_core.wire.schema",
    "clepsydra_core.wire.timers", "clepsydra_core.wire.topics",
    "opentelemetry.sdk.trace", "prometheus_client", "prometheus_client.core", "encodings.idna",
    "runpy",
    # the HTTP services (store, retry, analytics API, console): gunicorn, Flask, Jinja
    "clepsydra_web.auth", "clepsydra_web.errors", "clepsydra_web.jsonio", "clepsydra_web.ops",
    "clepsydra_web.rate_limit", "clepsydra_web.server", "clepsydra_web.tracing",
    "gunicorn_h1c", "flask", "jinja2",
    # the callers of Redis (retry, scheduler, analytics, gateway)
    "redis",
    # the Celery workers with beat (scheduler, analytics)
    "clepsydra_core.runtime.celery_beat", "clepsydra_core.runtime.celery_worker", "celery.app.base",
    "celery.beat", "celery.worker.consumer", "celery.worker.control", "celery.worker.loops",
    "celery.worker.pidbox", "celery.events.receiver", "kombu.transport.redis", "kombu.pools",
    "celery.app.routes", "celery.backends.base", "celery.loaders.base", "kombu.mixins",
    "kombu.transport.native_delayed_delivery", "billiard.pool", "dbm.dumb",
    # what two services imported after the fork (DEC-memory-cow): the Celery workers' bootsteps
    # and beat's shelve's codec (scheduler, analytics), the shards' rules (store, scheduler)
    "celery.worker.components", "encodings.latin_1", "clepsydra_core.shards",
    # the SDK (analytics, console; the gateway its topics)
    "clepsydra_client",
)
"""What the zygote imports before it forks: modules at least two of ``make run``'s services
import at start, never one only one of them uses (grpcio, pyarrow, a service's own package).
Importing them starts no thread (the zygote refuses to start otherwise; tests/unit/tools/
test_zygote.py)."""

ROOM_VAR = "CLEPSYDRA_ZYGOTE_ROOM"
ENV_SLACK = 16384
"""Bytes of room in the zygote's environment beyond the services' own settings known when it
starts (the tokens the stack adds later)."""
MAX_MESSAGE = 1 << 20
REPLY_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0
PR_SET_CHILD_SUBREAPER = 36
_LIBC: Any = None


def _prctl(option: int, value: int) -> bool:
    global _LIBC
    if not sys.platform.startswith("linux"):
        return False
    try:
        _LIBC = _LIBC or ctypes.CDLL(None, use_errno=True)
        return int(_LIBC.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux); False where it cannot."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def forkable(argv: Sequence[str]) -> bool:
    """``argv`` is ``python -m module ...`` with this interpreter: what the zygote can run."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m"


def argv_bytes(argv: Sequence[str]) -> bytes:
    """A command line as the kernel keeps it: each argument NUL-terminated."""
    return b"".join(os.fsencode(arg) + b"\0" for arg in argv)


def env_bytes(env: Mapping[str, str]) -> bytes:
    """An environment as the kernel keeps it: each ``NAME=value`` NUL-terminated."""
    return b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in env.items())


def _area(first: int) -> tuple[int, int]:
    """This process's command-line (``first`` 45: arg_start, arg_end, /proc/pid/stat fields 48
    and 49) or environment area (47: env_start, env_end, fields 50 and 51)."""
    stat = Path("/proc/self/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[first]), int(fields[first + 1])


def area_room(first: int) -> int:
    """The bytes of this process's command-line (45) or environment (47) area; 0 unknown."""
    try:
        start, end = _area(first)
    except (OSError, ValueError, IndexError):
        return 0
    return end - start


def _write_area(first: int, raw: bytes) -> bool:
    try:
        start, end = _area(first)
        if len(raw) > end - start:
            return False
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(raw.ljust(end - start, b"\0"))
    except (OSError, ValueError, IndexError):
        return False
    return True


ARGS, ENVIRON = 45, 47


def write_command_line(argv: Sequence[str]) -> bool:
    """Write ``argv`` over this process's command-line area (``/proc/self/cmdline``, ``ps``),
    NUL-separated and NUL-padded, so it reads as that command line; False when it does not
    fit (the area is the size of the command line this process was started with)."""
    return _write_area(ARGS, argv_bytes(argv))


def write_environment(env: Mapping[str, str]) -> bool:
    """Write ``env`` over this process's environment area (``/proc/self/environ``: what
    ``ps e`` and the tests read a service's settings from, e.g. its store shard), NUL-padded;
    False when it does not fit. Only once the C library's environment no longer points into
    that area (``os.environ`` cleared and set again)."""
    return _write_area(ENVIRON, env_bytes(env))


def reap_orphans(known: Collection[int]) -> int:
    """Reap this subreaper's exited children that are none of ``known`` (what an adopted
    service left behind: a killed gunicorn master's worker, an analytics job); ``known`` are
    reaped by their owners. The number reaped."""
    reaped = 0
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if found is None or found.si_pid in known:
            return reaped
        try:
            os.waitpid(found.si_pid, 0)
        except ChildProcessError:
            pass
        reaped += 1


# ---- the supervisor's side ---------------------------------------------------------------


class Forked:
    """A service the zygote forked and the supervisor adopted: :class:`subprocess.Popen`'s
    ``pid``, ``returncode``, ``poll()`` and ``wait()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours (cannot happen once adopted): gone
                self.returncode = 255
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        from subprocess import TimeoutExpired

        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        return code


class Zygote(Child):
    """The zygote's process as the supervisor starts and watches it (its log
    ``logs/zygote.log``), and :meth:`spawn`, the :class:`tools.processes.Child` spawner of the
    services given to :meth:`adopt`: a forked service, or None (then the service is exec'd) when
    the zygote is not ready or refuses, each such fallback said through ``note``. A zygote
    that dies is started again (:meth:`heal`), up to :data:`MAX_DEATHS` times."""

    MAX_DEATHS = 3

    def __init__(self, log_path: Path, *, room: int, env_room: int = 0,
                 note: Callable[[str], None],
                 ready_timeout_s: float = 90.0,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        super().__init__("zygote", [], log_path, lambda child: child.exit_code() is None)
        self.room = room
        """Bytes of its command line: room for the longest service's command line."""
        self.env[ROOM_VAR] = " " * (env_room + ENV_SLACK)
        """Room in its environment for a service's own settings beside the stack's (its
        tokens, its store shard): a service's environment is written over the zygote's."""
        self.note = note
        self.ready_timeout_s = ready_timeout_s
        self.stopping = stopping
        """True once the supervisor is stopping: no more waiting for the zygote."""
        self.deaths = 0
        self.broken: str | None = None
        """Why it cannot fork now (None: it can, or may once it said hello)."""
        self.retired = False
        """It exited once the stack was ready (DEC-zygote-retires): a service restarted now is
        forked from a zygote started again for it, which exits once it has forked."""
        self._sock: socket.socket | None = None
        self._hello: dict[str, Any] | None = None
        self._launch: tuple[Mapping[str, str], Callable[[], None] | None] = ({}, None)

    def adopt(self, children: Sequence[Child]) -> None:
        """Start ``children`` that run a Python module (every service) through the zygote."""
        for child in children:
            if forkable(child.argv):
                child.spawner = self.spawn

    def launch(self, env: Mapping[str, str], cwd: Path,
               preexec: Callable[[], None] | None, *, restart: bool = False) -> None:
        """Start it (in the repository, where ``tools`` is importable); it imports while the
        stack starts Redis. ``cwd`` is the services' (each request carries its own)."""
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.argv = [sys.executable, "-m", "tools.zygote", "--fd", str(theirs.fileno()),
                     "--room", " " * self.room]
        self.pass_fds = (theirs.fileno(),)
        try:
            super().launch(env, REPO, preexec, restart=restart)
        finally:
            theirs.close()
        self._sock, self._hello, self.broken = ours, None, None
        self._launch = (env, preexec)

    def retire(self, why: str = "every service is ready") -> None:
        """Let it exit (close our end: it leaves its loop) and wait for it (DEC-zygote-retires);
        the services it forked keep every page they share with it."""
        if self.retired:
            return
        self.retired = True
        was_running = self.exit_code() is None
        self.close()
        if self.proc is not None:
            from subprocess import TimeoutExpired

            try:
                self.proc.wait(10)
            except TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.proc.wait(5)
        if was_running:
            self.note(f"clepsydra: the zygote exited: {why} (DEC-zygote-retires)")

    def heal(self) -> None:
        """Start it again if it died (the services it forked are the supervisor's children and
        keep running); after :data:`MAX_DEATHS` deaths the services are exec'd. Nothing once
        it is retired (:meth:`retire`): its exit is expected then."""
        if self.proc is None or self.deaths >= self.MAX_DEATHS or self.retired:
            return
        code = self.exit_code()
        if code is None:
            return
        self.deaths += 1
        self.close()
        if self.deaths >= self.MAX_DEATHS:
            self.broken = f"it died {self.deaths} times"
            self.note(f"clepsydra: the zygote exited with code {code} ({self.deaths} times); "
                      "services restart as new interpreters from now on")
            return
        self.note(f"clepsydra: the zygote exited with code {code}; restarting it")
        env, preexec = self._launch
        self.launch(env, REPO, preexec, restart=True)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self._sock is not None
        deadline = time.monotonic() + timeout_s
        while True:  # in slices: a stop signal is not kept waiting
            if self.stopping():
                raise ConnectionError("the stack is stopping")
            self._sock.settimeout(min(0.2, max(0.0, deadline - time.monotonic())) or 0.001)
            try:
                raw = self._sock.recv(MAX_MESSAGE)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        if not raw:
            raise ConnectionError("it exited")
        message: dict[str, Any] = json.loads(raw)
        if message.get("v") != PROTOCOL:
            raise ConnectionError(f"protocol {message.get('v')!r}, not {PROTOCOL}")
        return message

    def ready_to_fork(self) -> bool:
        """Its hello read (waiting for it up to ``ready_timeout_s``); False, and ``broken``
        says why, when it failed or is gone."""
        if self._hello is not None:
            return True
        if self.broken is not None or self._sock is None:
            return False
        try:
            hello = self._receive(self.ready_timeout_s)
        except (OSError, ValueError) as exc:
            return self._break(f"no hello: {exc}")
        if "error" in hello:
            return self._break(str(hello["error"]))
        self._hello = hello
        return True

    def _break(self, why: str) -> bool:
        self.broken = why
        self.close()
        self.signal_group(signal.SIGKILL)
        return False

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
              log: IO[bytes]) -> Forked | None:
        """Fork ``argv`` (``python -m module ...``) with ``env`` in ``cwd``, its output to
        ``log``: the adopted service, or None to exec it."""
        if not forkable(argv):
            return None
        if self.retired:
            return self._spawn_again(argv, env, cwd, log)
        return self._spawn(argv, env, cwd, log)

    def _spawn_again(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
                     log: IO[bytes]) -> Forked | None:
        """Once retired: a zygote started again for this one service, which exits once it has
        forked it (DEC-zygote-retires); after :data:`MAX_DEATHS` zygotes that failed, None
        (exec'd)."""
        name = argv[2]
        if self.deaths >= self.MAX_DEATHS:
            self.note(f"clepsydra: {name} started as a new interpreter: the zygote failed "
                      f"{self.deaths} times")
            return None
        self.prepare(name)
        try:
            forked = self._spawn(argv, env, cwd, log)
            if forked is None:
                self.deaths += 1
            return forked
        finally:
            self.retired = False
            self.retire(f"{name} forked")

    def prepare(self, name: str) -> None:
        """Once retired: start a zygote again for ``name``'s restart, unless one is starting
        already (the supervisor calls this when a service dies, so the zygote imports during
        the restart's back-off, DEC-zygote-retires)."""
        if not self.retired or self._sock is not None or self.deaths >= self.MAX_DEATHS:
            return
        self.note(f"clepsydra: starting a zygote again to fork {name}")
        launch_env, preexec = self._launch
        self.launch(launch_env, REPO, preexec, restart=True)

    def _spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
               log: IO[bytes]) -> Forked | None:
        name = argv[2]
        if not self.ready_to_fork():
            self.note(f"clepsydra: {name} started as a new interpreter: no zygote "
                      f"({self.broken})")
            return None
        assert self._sock is not None
        request = json.dumps({"v": PROTOCOL, "argv": list(argv), "env": dict(env),
                              "cwd": str(cwd)}).encode()
        try:
            socket.send_fds(self._sock, [request], [log.fileno()])
            answer = self._receive(REPLY_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            self._break(f"no answer: {exc}")
            self.note(f"clepsydra: {name} started as a new interpreter: the zygote gave no "
                      f"answer ({exc})")
            return None
        if "error" in answer:
            self.note(f"clepsydra: {name} started as a new interpreter: the zygote refused "
                      f"({answer['error']})")
            return None
        return Forked(int(answer["pid"]))


# ---- the zygote's side -------------------------------------------------------------------


def preload(modules: Sequence[str]) -> int:
    """Import ``modules`` with the collector off, then freeze every object there is, so the
    forked services' collections never write to these pages (each write would copy a page
    the zygote and every service share). The number of modules loaded."""
    import importlib

    gc.disable()
    for module in modules:
        importlib.import_module(module)
    gc.freeze()
    return len(sys.modules)


def threads() -> int:
    """This process's threads, the interpreter's own and any a C library started."""
    return len(os.listdir("/proc/self/task"))


def _send(sock: socket.socket, **message: Any) -> None:
    sock.send(json.dumps({"v": PROTOCOL, **message}).encode())


def _request(raw: bytes) -> tuple[list[str], dict[str, str], str]:
    message = json.loads(raw)
    if not isinstance(message, dict) or message.get("v") != PROTOCOL:
        raise ValueError(f"not a protocol {PROTOCOL} request")
    argv, env, cwd = message.get("argv"), message.get("env"), message.get("cwd")
    if not (isinstance(argv, list) and forkable([str(a) for a in argv])
            and isinstance(env, dict) and isinstance(cwd, str)):
        raise ValueError("a request is {argv: [python, -m, module, ...], env: {}, cwd: ''}")
    return [str(a) for a in argv], {str(k): str(v) for k, v in env.items()}, cwd


class Service:
    """What a forked child runs, once it is the service's process."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd

    @property
    def module(self) -> str:
        return self.argv[2]


def serve(sock: socket.socket, supervisor: int) -> Service | None:
    """Answer requests until the supervisor closes its end (None); in a forked service, the
    :class:`Service` it is to run (it returns out of this loop, the zygote's frames with it)."""
    pdeath = parent_death_signal()
    while True:
        raw, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 1)
        if not raw:
            return None
        try:
            argv, env, cwd = _request(raw)
            if len(fds) != 1:
                raise ValueError("a request carries its log file's descriptor")
            if threads() != 1:
                raise ValueError(f"the zygote has {threads()} threads: it forks only alone")
            for what, first, size in (("command line", ARGS, len(argv_bytes(argv))),
                                      ("environment", ENVIRON, len(env_bytes(env)))):
                if size > area_room(first):
                    raise ValueError(f"its {what} ({size} bytes) does not fit in the "
                                     f"zygote's ({area_room(first)})")
            forked = _fork(Service(argv, env, cwd), fds[0], sock, supervisor, pdeath)
        except (OSError, ValueError) as exc:
            _send(sock, error=str(exc))
            forked = None
        if isinstance(forked, Service):
            return forked
        for fd in fds:
            os.close(fd)
        if forked is not None:
            _send(sock, pid=forked)


def _fork(service: Service, log_fd: int, sock: socket.socket, supervisor: int,
          pdeath: Callable[[], None] | None) -> int | Service:
    """Fork the middle process, which forks the service and exits at once: the service's pid
    (adopted by the supervisor by then), or, in the service, the Service to run."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    middle = os.fork()
    if middle == 0:  # the middle process: never back into the zygote's loop
        try:
            os.close(read_end)
            write_command_line(service.argv)  # the service's own, from its first instant
            me = os.getpid()
            if os.fork() != 0:
                os._exit(0)
            # the service, a child of the middle process until it exits
            _become(service, log_fd, write_end, sock, supervisor, me, pdeath)
        except BaseException:
            traceback.print_exc()
            os._exit(70)
        return service
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], START_TIMEOUT_S)
        said = os.read(read_end, 32) if ready else b""
    finally:
        os.close(read_end)
        os.waitpid(middle, 0)
    if not said:
        raise OSError(f"{service.module}'s process died before it started")
    pid = int(said)
    stat = Path(f"/proc/{pid}/stat").read_text()
    if int(stat[stat.rindex(")") + 2:].split()[1]) != supervisor:
        os.kill(pid, signal.SIGKILL)
        raise OSError("the supervisor did not adopt the service (no child subreaper)")
    return pid


def _become(service: Service, log_fd: int, said: int, sock: socket.socket,
            supervisor: int, middle: int, pdeath: Callable[[], None] | None) -> None:
    """Make this forked process the service's, as an exec'd one would be (the module docs)."""
    os.setsid()
    os.write(said, str(os.getpid()).encode())
    os.close(said)
    sock.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    while os.getppid() == middle:  # until the middle process exited
        time.sleep(0.0005)
    if pdeath is not None:
        pdeath()  # SIGTERM when the supervisor dies, set once adopted by it
    if os.getppid() != supervisor:
        os._exit(1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGCHLD, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.chdir(service.cwd)
    os.environ.clear()
    os.environ.update(service.env)
    write_environment(service.env)  # /proc/<pid>/environ: the service's, as when exec'd
    if sys.path and sys.path[0] == str(REPO):  # python -m puts its working directory first
        sys.path[0] = service.cwd
    sys.argv = ["-m", *service.argv[3:]]  # runpy writes the module's path over "-m"
    sys.orig_argv = list(service.argv)
    _fresh_keys()
    gc.enable()


def _fresh_keys() -> None:
    """What a fresh interpreter draws at import and must not share with its siblings
    (``random`` is reseeded by Python itself after a fork): multiprocessing's and billiard's
    authentication keys."""
    for name in ("multiprocessing.process", "billiard.process"):
        module = sys.modules.get(name)
        current = getattr(module, "_current_process", None)
        config = getattr(current, "_config", None)
        if isinstance(config, dict) and "authkey" in config:
            config["authkey"] = type(config["authkey"])(os.urandom(32))


def run(service: Service) -> None:
    """Run the service's module as ``__main__``, as ``python -m`` does; its exit (SystemExit,
    an exception) is this process's."""
    import runpy

    runpy.run_module(service.module, run_name="__main__", alter_sys=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.zygote", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fd", type=int, required=True,
                        help="its end of the supervisor's socket pair")
    parser.add_argument("--room", default="",
                        help="padding: room in the command line for the services' own")
    args = parser.parse_args(argv)
    write_command_line([sys.executable, "-m", "tools.zygote"])
    sock = socket.socket(fileno=args.fd)
    supervisor = os.getppid()
    try:
        modules = preload(PRELOAD)
        if threads() != 1:
            raise RuntimeError(f"importing {PRELOAD} started {threads() - 1} threads")
    except Exception as exc:
        print(f"clepsydra zygote: {exc!r}", file=sys.stderr)
        _send(sock, error=repr(exc))
        return 1
    print(f"clepsydra zygote: {modules} modules loaded, pid {os.getpid()}", file=sys.stderr)
    _send(sock, pid=os.getpid(), modules=modules)
    service = serve(sock, supervisor)
    if service is None:
        return 0
    run(service)
    return 0


if __name__ == "__main__":
    sys.exit(main())
