"""The local stack behind ``make run``: Redis, the store, the retry service, the scheduler (its
Celery worker with beat on a thread) and the analytics, as processes on this machine, with
every file under CLEPSYDRA_HOME.

    python -m tools.stack [--quiet] [--separate-beat] [--without-analytics]
                          [--ready-timeout-s 90] [--grace-s 30] [--no-fork]

The parts are those of the one stack builder, tools/parts.py (their commands, ports and
readiness checks are defined there); this module supervises them. Each child runs in its own
process group, with its output in ``CLEPSYDRA_HOME/logs/<name>.log`` (the previous run's log is
kept as ``<name>.log.1``) and echoed to stdout as ``name | line``. The Python services are
forked from the zygote, a process that imported what they share, and adopted by this one (a
child subreaper), so each is still this process's child with its own command line; the zygote
exits once every service is ready, and a service restarted later is forked from a zygote
started again for it (DEC-zygote-retires; ``CLEPSYDRA_STACK_KEEP_ZYGOTE=true`` keeps it); with
``--no-fork`` (``CLEPSYDRA_STACK_FORK=off``) each is exec'd (tools/zygote.py, DEC-stack-zygote):

    redis             redis-server on CLEPSYDRA_REDIS_PORT, append-only file in HOME/redis
                      (not started when CLEPSYDRA_REDIS_URL names an existing Redis)
    store             python -m clepsydra_store               ready: GET /healthz answers 200
    retry             python -m clepsydra_retry               ready: GET /healthz answers 200
                      (both, and the analytics: one process each, gunicorn's worker run
                      without its master, CLEPSYDRA_SINGLE_PROCESS=true unless set)
    scheduler         python -m clepsydra_scheduler worker --beat
                                                              ready: GET /healthz answers 200
                      on CLEPSYDRA_SCHEDULER_PORT (0: its log says "scheduler worker ready");
                      beat runs on a thread of the worker, which also answers beat's
                      /healthz on CLEPSYDRA_SCHEDULER_BEAT_PORT (one process)
    gateway           python -m clepsydra_gateway             ready: GET /healthz answers 200
                      on CLEPSYDRA_GATEWAY_HEALTH_PORT (8089); RocketMQ 5 gRPC on
                      CLEPSYDRA_GATEWAY_PORT (8088)
    (--separate-beat: instead, as deployed on Kubernetes and in the images)
    scheduler-worker  python -m clepsydra_scheduler worker    ready: as the scheduler's
    scheduler-beat    python -m clepsydra_scheduler beat      ready: GET /healthz answers 200
                      on CLEPSYDRA_SCHEDULER_BEAT_PORT (0: running)
    analytics         python -m clepsydra_analytics serve --schedule --export
                                                              ready: GET /healthz answers 200
                      on CLEPSYDRA_ANALYTICS_PORT: the API (gunicorn's worker in its own
                      process, as above), with the schedule's Celery worker (beat on a thread
                      of it) and the exporter (/healthz on CLEPSYDRA_ANALYTICS_EXPORTER_PORT,
                      default the API's port + 1) on threads of it (one process)
    (--without-analytics, ``make run-core``: no analytics; the core alone)
    console           python -m clepsydra_console             ready: GET /healthz answers 200
                      on CLEPSYDRA_CONSOLE_PORT (default 8087): the web console; by default
                      served by the retry service's process instead, ``retry`` being then
                      python -m tools.host clepsydra_retry clepsydra_console, ready when both
                      ports answer (tools/host.py, DEC-stack-console-hosted;
                      its own process with CLEPSYDRA_STACK_HOST_CONSOLE=false, CLEPSYDRA_AUTH=on,
                      CLEPSYDRA_SINGLE_PROCESS=false or CLEPSYDRA_RETRY_WORKERS above 1)

Once all are ready it prints exactly one line ``clepsydra: ready`` and a table of addresses.
SIGINT, SIGTERM or SIGHUP: SIGTERM to every child group (services first, Redis last), wait,
SIGKILL what is left, exit 0; a second signal kills at once.

A child that dies once the stack is ready is restarted, alone, the others keep running (issue
18.5): its exit is logged, what is left of its process group is killed (so the port and the
store's files are free), and it starts again after a back-off (0.5 s, doubling, at most 8 s),
its log continuing in the same file. A child that dies ``--max-restarts`` times (default 5)
within ``--restart-window-s`` (default 60) is given up on: its name and log tail are printed,
the others are stopped, exit 3. Exit 1: a child died or was not ready while the stack was
starting. Exit 2: bad settings, a port in use, or CLEPSYDRA_HOME held by another running stack.
Children get SIGTERM if this process is killed outright (Linux parent-death signal), so no
orphan keeps a port.

With ``CLEPSYDRA_AUTH=on`` the stack gives the children that call other services a fresh token
of their role each start (tools/stack_auth.py); off (the default), every service logs one
warning line that it answers anyone.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO

from clepsydra_core import shards as shard_rules
from clepsydra_core.errors import ConfigError
from clepsydra_core.settings import SINGLE_PROCESS, CommonSettings, Env, env_bool, env_int
from tools import parts
from tools.parts import ANALYTICS_API, CONSOLE
from tools.processes import (
    Child,
    Console,
    LogEcho,
    parent_death_signal,
    port_free,
    redis_ping,
)
from tools.zygote import (
    FORK_VAR,
    KEEP_VAR,
    Zygote,
    argv_bytes,
    become_subreaper,
    env_bytes,
    forkable,
    reap_orphans,
)

READY_LINE = "clepsydra: ready"
HOST_CONSOLE_VAR = "CLEPSYDRA_STACK_HOST_CONSOLE"
POLL_S = 0.1


class StackFailure(Exception):
    """The stack could not start or a child died: exit 1."""


class StackRefused(Exception):
    """The stack will not start here (a port in use, HOME held by another stack): exit 2."""


class Interrupted(Exception):
    """A stop signal arrived while starting."""


class StackGaveUp(Exception):
    """A child kept dying after the stack was ready: exit 3."""


EXIT_GAVE_UP = 3
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 8.0


class RestartPolicy:
    """When to restart a child that died: after a back-off that doubles with each death inside
    the window, or never (None) once it died ``max_restarts`` times within ``window_s``."""

    def __init__(self, max_restarts: int = 5, window_s: float = 60.0) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._deaths: list[float] = []

    def on_exit(self, now_s: float) -> float | None:
        """Record a death at ``now_s`` (monotonic); the delay before the restart, or None."""
        self._deaths = [t for t in self._deaths if now_s - t < self.window_s] + [now_s]
        if len(self._deaths) > self.max_restarts:
            return None
        return min(RESTART_BACKOFF_S * float(1 << (len(self._deaths) - 1)), RESTART_BACKOFF_MAX_S)

    @property
    def recent_deaths(self) -> int:
        return len(self._deaths)


@dataclass(frozen=True, slots=True)
class StackSettings:
    """The shared settings (README.md, Configuration) plus the ports the stack's services
    listen on (the scheduler's two health ports: None when set to 0)."""

    common: CommonSettings
    store_port: int
    retry_port: int
    scheduler_port: int | None = 8083
    scheduler_beat_port: int | None = 8084
    console_port: int = 8087
    gateway_port: int = 8088
    """The RocketMQ 5 gateway's gRPC port (``CLEPSYDRA_GATEWAY_PORT``)."""
    gateway_health_port: int = 8089
    shards: int = 1
    """CLEPSYDRA_STORE_SHARDS: store shards to start (DEC-store-shards)."""
    shard_port_step: int = shard_rules.DEFAULT_PORT_STEP
    fork: bool = True
    """The Python services forked by the zygote (``CLEPSYDRA_STACK_FORK``, DEC-stack-zygote);
    False: each exec'd, a new interpreter."""
    host_console: bool = True
    """The web console served by the retry service's process (``CLEPSYDRA_STACK_HOST_CONSOLE``,
    DEC-stack-console-hosted; never with ``CLEPSYDRA_AUTH=on``); False: its own process."""
    keep_zygote: bool = False
    """The zygote stays once the stack is ready (``CLEPSYDRA_STACK_KEEP_ZYGOTE``); False: it
    exits then, and a restart is forked from one started again (DEC-zygote-retires)."""

    @classmethod
    def from_env(cls, env: Env) -> StackSettings:
        settings = cls(
            common=CommonSettings.from_env(env),
            store_port=env_int(env, "CLEPSYDRA_STORE_PORT", 8081, minimum=1),
            retry_port=env_int(env, "CLEPSYDRA_RETRY_PORT", 8082, minimum=1),
            scheduler_port=env_int(env, "CLEPSYDRA_SCHEDULER_PORT", 8083, minimum=0) or None,
            scheduler_beat_port=env_int(env, "CLEPSYDRA_SCHEDULER_BEAT_PORT", 8084,
                                        minimum=0) or None,
            console_port=env_int(env, "CLEPSYDRA_CONSOLE_PORT", 8087, minimum=1),
            gateway_port=env_int(env, "CLEPSYDRA_GATEWAY_PORT", 8088, minimum=1),
            gateway_health_port=env_int(env, "CLEPSYDRA_GATEWAY_HEALTH_PORT", 8089, minimum=1),
            shards=shard_rules.shard_count(env),
            shard_port_step=shard_rules.port_step(env),
            fork=env_bool(env, FORK_VAR, True),
            host_console=env_bool(env, HOST_CONSOLE_VAR, True),
            keep_zygote=env_bool(env, KEEP_VAR, False),
        )
        settings.shard_ports()  # a port past 65535: ConfigError, exit 2
        return settings

    def shard_ports(self) -> list[int]:
        """Every store shard's port, by the ports rule (clepsydra_core.shards): shard 0 on
        CLEPSYDRA_STORE_PORT, shard i CLEPSYDRA_STORE_SHARD_PORT_STEP x i above it."""
        return [shard_rules.shard_port(self.store_port, i, self.shard_port_step)
                for i in range(self.shards)]

    @property
    def own_redis(self) -> bool:
        return self.common.redis_url is None

    @property
    def log_dir(self) -> Path:
        return self.common.home / "logs"

    @property
    def redis_dir(self) -> Path:
        return self.common.home / "redis"

    def child_env(self, base: Env) -> dict[str, str]:
        """The environment of every child: the caller's, with the resolved shared settings
        written out so each service sees the same addresses and folder."""
        c = self.common
        env = dict(base)
        # the one-worker services without gunicorn's master unless told otherwise
        # (DEC-memory-at-rest)
        env.setdefault(SINGLE_PROCESS, "true")
        env.update({
            "CLEPSYDRA_HOME": str(c.home),
            "CLEPSYDRA_STORE_PORT": str(self.store_port),
            "CLEPSYDRA_STORE_URL": c.store_url,
            "CLEPSYDRA_RETRY_PORT": str(self.retry_port),
            "CLEPSYDRA_RETRY_URL": c.retry_url,
            "CLEPSYDRA_REDIS_URL": c.effective_redis_url,
            "CLEPSYDRA_REDIS_PORT": str(c.redis_port),
            "CLEPSYDRA_SCHEDULER_PORT": str(self.scheduler_port or 0),
            "CLEPSYDRA_SCHEDULER_BEAT_PORT": str(self.scheduler_beat_port or 0),
            "CLEPSYDRA_CONSOLE_PORT": str(self.console_port),
            "CLEPSYDRA_GATEWAY_PORT": str(self.gateway_port),
            "CLEPSYDRA_GATEWAY_HEALTH_PORT": str(self.gateway_health_port),
            shard_rules.SHARDS_VAR: str(self.shards),
            "PYTHONUNBUFFERED": "1",
            "PATH": os.pathsep.join(p for p in (str(Path(sys.executable).parent),
                                                base.get("PATH", "")) if p),
        })
        return env


class Supervisor:
    """Starts the children of a whole :class:`tools.parts.Stack`, waits until they are ready,
    watches them (restarting one that dies), stops them."""

    def __init__(self, settings: StackSettings, *, env: Env, console: Console,
                 ready_timeout_s: float = 90.0, grace_s: float = 30.0,
                 echo: bool = True, max_restarts: int = 5,
                 restart_window_s: float = 60.0, separate_beat: bool = False,
                 analytics: bool = True) -> None:
        self.settings = settings
        self.separate_beat = separate_beat
        self.analytics = analytics
        self.env = settings.child_env(env)
        # the exporter answers /healthz on its own port: beside the analytics API's by default
        analytics_port = int(self.env.get("CLEPSYDRA_ANALYTICS_PORT") or 8085)
        self.env.setdefault("CLEPSYDRA_ANALYTICS_EXPORTER_PORT", str(analytics_port + 1))
        c = settings.common
        addresses = {part.url_var: self.env[part.url_var] for part in parts.PARTS
                     if part.url_var and part.url_var in self.env}
        self.parts = parts.Stack(c.home, env=addresses, base_env=self.env,
                                 redis_url=c.redis_url, ports={
            "CLEPSYDRA_STORE_PORT": settings.store_port,
            "CLEPSYDRA_RETRY_PORT": settings.retry_port,
            "CLEPSYDRA_SCHEDULER_PORT": settings.scheduler_port or 0,
            "CLEPSYDRA_SCHEDULER_BEAT_PORT": settings.scheduler_beat_port or 0,
            "CLEPSYDRA_GATEWAY_PORT": settings.gateway_port,
            "CLEPSYDRA_GATEWAY_HEALTH_PORT": settings.gateway_health_port,
            "CLEPSYDRA_ANALYTICS_PORT": analytics_port,
            "CLEPSYDRA_ANALYTICS_EXPORTER_PORT":
                int(self.env["CLEPSYDRA_ANALYTICS_EXPORTER_PORT"]),
            "CLEPSYDRA_CONSOLE_PORT": settings.console_port,
            "CLEPSYDRA_REDIS_PORT": c.redis_port})
        self.console = console
        self.ready_timeout_s = ready_timeout_s
        self.grace_s = grace_s
        self.echo_enabled = echo
        self.children: list[Child] = []
        self.zygote: Zygote | None = None
        """The fork server of the services (DEC-stack-zygote); None with ``--no-fork``."""
        self.signals: list[int] = []
        self._lock_file: IO[str] | None = None
        self._echo: LogEcho | None = None
        self._preexec = parent_death_signal()
        self._policy = partial(RestartPolicy, max_restarts, restart_window_s)
        self._restarts: dict[str, RestartPolicy] = {}
        self._restart_at: dict[str, float] = {}
        """Children waiting for their restart: name -> monotonic time."""

    # ---- signals -------------------------------------------------------------------------

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals.append(signum)

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)

    # ---- the whole life ------------------------------------------------------------------

    def run(self) -> int:
        """Start, wait until ready, watch; always stop every child. The exit code."""
        try:
            self.start()
            if self.zygote is not None and not self.settings.keep_zygote:
                self.zygote.retire()  # its own pages given back (DEC-zygote-retires)
            if self._echo is not None:
                self._echo.drain()
            self.console.line(READY_LINE)
            self.console.line(self.address_table())
            self.watch()
            return 0
        except Interrupted:
            return 0
        except StackRefused as exc:
            self.console.line(f"clepsydra: {exc}")
            return 2
        except StackFailure as exc:
            self.console.line(f"clepsydra: {exc}")
            return 1
        except StackGaveUp as exc:
            self.console.line(f"clepsydra: {exc}")
            return EXIT_GAVE_UP
        finally:
            self.stop()

    def start(self) -> None:
        s = self.settings
        for folder in (s.common.home, s.log_dir, s.redis_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._take_home_lock()
        self._check_ports()
        preexec = self._preexec
        try:
            children = self.planned()
        except RuntimeError as exc:  # no redis-server binary
            raise StackRefused(f"{exc}, or set CLEPSYDRA_REDIS_URL to an existing Redis") \
                from exc
        self._start_zygote(children)
        if s.own_redis:
            redis = children.pop(0)
            self.children.append(redis)
            redis.launch(self.env, s.common.home, preexec)
            self._wait_until(lambda: redis.ready(redis), 20.0,
                             f"redis-server on port {s.common.redis_port} (PING)")
        else:
            self._wait_until(lambda: redis_ping(s.common.effective_redis_url),
                             self.ready_timeout_s,
                             f"Redis at CLEPSYDRA_REDIS_URL={s.common.redis_url} (PING)")
        services = self._with_tokens(children)
        for child in services:
            self.children.append(child)
            child.launch(self.env, s.common.home, preexec)
        if self.echo_enabled:
            self._echo = LogEcho([*self.children, *self._zygote()], self.console)
            self._echo.start()
        for child in services:
            self._wait_until(partial(child.ready, child), self.ready_timeout_s,
                             self._ready_what(child))

    def planned(self) -> list[Child]:
        """Every child to start, not started: Redis (unless CLEPSYDRA_REDIS_URL), then the
        parts of ``make run`` (tools/parts.py)."""
        return list(self.parts.with_everything(appendonly=True, separate_beat=self.separate_beat,
                                               analytics=self.analytics,
                                               shard_ports=self.settings.shard_ports(),
                                               hosted=self.hosted)
                    .children())

    @property
    def hosted(self) -> bool:
        """The console served by the retry service's process (DEC-stack-console-hosted): by
        default, not with access control on (each service's own token and secret stay in
        its own process), nor when the services run as deployed (``CLEPSYDRA_SINGLE_PROCESS=
        false``: gunicorn's masters, the fault matrix) or the retry service has more than one
        worker (one gunicorn worker serves both)."""
        return (self.settings.host_console and not self.settings.common.auth.enabled
                and env_bool(self.env, SINGLE_PROCESS, False)
                and env_int(self.env, "CLEPSYDRA_RETRY_WORKERS", 1, minimum=1) == 1)

    def watch(self) -> None:
        """Until a stop signal, restarting children that die; StackGaveUp when one keeps
        dying."""
        while not self.signals:
            self._heal(time.monotonic())
            time.sleep(POLL_S)

    def _start_zygote(self, children: Sequence[Child]) -> None:
        """The fork server of the services that run a Python module (DEC-stack-zygote), started
        before Redis so it imports meanwhile; the services' parent stays this process (a child
        subreaper adopts them)."""
        forked = [child for child in children if forkable(child.argv)]
        if not self.settings.fork or not forked:
            return
        if not become_subreaper():
            self.console.line("clepsydra: services start as new interpreters: this system "
                              "cannot make the stack adopt forked ones")
            return
        self.zygote = Zygote(self.settings.log_dir / "zygote.log",
                             room=max(len(argv_bytes(child.argv)) for child in forked),
                             env_room=max(len(env_bytes(child.env)) for child in forked),
                             note=self.console.line, ready_timeout_s=self.ready_timeout_s,
                             stopping=lambda: bool(self.signals))
        self.zygote.launch(self.env, self.settings.common.home, self._preexec)
        self.zygote.adopt(forked)

    def _zygote(self) -> list[Child]:
        return [] if self.zygote is None else [self.zygote]

    def _reap(self) -> None:
        """What forked services leave behind is this process's to reap (a subreaper's)."""
        if self.zygote is not None:
            reap_orphans({c.proc.pid for c in [*self.children, self.zygote] if c.proc})

    def _heal(self, now_s: float) -> None:
        if self.zygote is not None:
            self.zygote.heal()
        self._reap()
        for child in self.children:
            due = self._restart_at.get(child.name)
            if due is not None:
                if now_s >= due and not child.running():
                    del self._restart_at[child.name]
                    child.launch(self.env, self.settings.common.home, self._preexec,
                                restart=True)
                    self.console.line(f"clepsydra: {child.name} restarted (pid {child.pid})")
                continue
            code = child.exit_code()
            if code is None:
                continue
            child.signal_group(signal.SIGKILL)  # what the dead leader left (workers, pools)
            if self.zygote is not None and self.zygote.retired and forkable(child.argv):
                self.zygote.prepare(child.argv[2])  # it imports during the back-off
            policy = self._restarts.setdefault(child.name, self._policy())
            delay_s = policy.on_exit(now_s)
            if delay_s is None:
                raise StackGaveUp(
                    f"{child.name} died {policy.recent_deaths} times within "
                    f"{policy.window_s:.0f}s (last exit code {code}); giving up. Last lines of "
                    f"{child.log_path}:\n{child.log_tail()}")
            self.console.line(f"clepsydra: {child.name} exited with code {code}; restarting "
                              f"in {delay_s:.1f}s ({policy.recent_deaths} of "
                              f"{policy.max_restarts} restarts allowed within "
                              f"{policy.window_s:.0f}s)")
            self._restart_at[child.name] = now_s + delay_s

    def stop(self) -> None:
        """SIGTERM the services' groups, then Redis's; SIGKILL what outlives the grace time."""
        if self.signals:
            self.console.line(f"clepsydra: stopping ({signal.Signals(self.signals[0]).name})")
        services = [c for c in self.children if c.name != "redis"]
        self._terminate([*self._zygote(), *services])
        if self.zygote is not None:
            self.zygote.close()
        self._terminate([c for c in self.children if c.name == "redis"])
        if self._echo is not None:
            self._echo.stop()
        if self.children:
            self.console.line("clepsydra: stopped")
        if self._lock_file is not None:
            self._lock_file.close()

    # ---- parts ---------------------------------------------------------------------------

    def _with_tokens(self, children: Sequence[Child]) -> list[Child]:
        auth = self.settings.common.auth
        tokens: dict[str, dict[str, str]] = {}
        if auth.enabled:  # hashlib and the token file's code only then (DEC-memory-at-rest)
            from tools.stack_auth import console_secret, service_tokens

            tokens = service_tokens(auth, shards=self.settings.shards)
            tokens[CONSOLE.name] = console_secret(self.env)
        for child in children:
            child.env.update(tokens.get(child.name, {}))
        return list(children)

    @property
    def analytics_url(self) -> str:
        """Where the analytics API answers (CLEPSYDRA_ANALYTICS_URL / _PORT, as it reads them)."""
        return self.env.get("CLEPSYDRA_ANALYTICS_URL") or self.parts.url(ANALYTICS_API)

    @property
    def console_url(self) -> str:
        """Where the web console answers (CLEPSYDRA_CONSOLE_URL / _PORT)."""
        return self.env.get("CLEPSYDRA_CONSOLE_URL") or self.parts.url(CONSOLE)

    def _ready_what(self, child: Child) -> str:
        return self.parts.planned_part(child.name).describe_ready(child.env)

    def address_table(self) -> str:
        c = self.settings.common
        shards = [(parts.shard_name(i), f"http://127.0.0.1:{port} (store shard {i})")
                  for i, port in enumerate(self.settings.shard_ports()) if i]
        rows = [("store", c.store_url + (" (store shard 0: the address every part uses)"
                                         if shards else "")), *shards, ("retry", c.retry_url),
                ("gateway", f"127.0.0.1:{self.settings.gateway_port} (RocketMQ 5 gRPC)"),
                ("analytics", self.analytics_url if self.analytics else "not started"),
                ("console", self.console_url),
                ("redis", c.effective_redis_url + ("" if self.settings.own_redis
                                                   else " (CLEPSYDRA_REDIS_URL)")),
                ("home", str(c.home)), ("logs", str(self.settings.log_dir))]
        width = max(9, *(len(name) for name, _ in rows))
        table = "\n".join(f"  {name:<{width}} {value}" for name, value in rows)
        return f"{table}\n  Ctrl-C stops every process of the stack."

    def _take_home_lock(self) -> None:
        path = self.settings.common.home / "stack.lock"
        lock_file = open(path, "a+")  # noqa: SIM115 - held for the stack's whole life
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "?"
            lock_file.close()
            raise StackRefused(f"CLEPSYDRA_HOME={self.settings.common.home} is used by another "
                               f"running stack (pid {holder}); stop it or choose another "
                               "CLEPSYDRA_HOME") from exc
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
        self._lock_file = lock_file

    def _check_ports(self) -> None:
        s = self.settings
        ports = [("CLEPSYDRA_STORE_PORT", s.store_port), ("CLEPSYDRA_RETRY_PORT", s.retry_port),
                 ("CLEPSYDRA_CONSOLE_PORT", s.console_port),
                 ("CLEPSYDRA_GATEWAY_PORT", s.gateway_port),
                 ("CLEPSYDRA_GATEWAY_HEALTH_PORT", s.gateway_health_port)]
        ports += [(f"store shard {i}'s port (CLEPSYDRA_STORE_PORT + {i} x "
                   f"{shard_rules.PORT_STEP_VAR})", port)
                  for i, port in enumerate(s.shard_ports()) if i]
        for name, port in (("CLEPSYDRA_SCHEDULER_PORT", s.scheduler_port),
                           ("CLEPSYDRA_SCHEDULER_BEAT_PORT", s.scheduler_beat_port)):
            if port is not None:
                ports.append((name, port))
        if s.own_redis:
            ports.append(("CLEPSYDRA_REDIS_PORT", s.common.redis_port))
        seen: dict[int, str] = {}
        for name, port in ports:
            if port in seen:
                raise StackRefused(f"{name} and {seen[port]} are both {port}")
            seen[port] = name
            if not port_free(port):
                raise StackRefused(f"port {port} ({name}) is in use: stop what listens there "
                                   f"or set {name} to a free port")

    def _wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.signals:
                raise Interrupted
            self._reap()
            self._check_children()
            if ready():
                return
            if time.monotonic() > deadline:
                raise StackFailure(f"{what} not ready after {timeout_s:.0f}s"
                                   + self._tails(self.children))
            time.sleep(POLL_S)

    def _check_children(self) -> None:
        for child in self.children:
            code = child.exit_code()
            if code is not None:
                raise StackFailure(f"{child.name} exited unexpectedly with code {code}; "
                                   f"last lines of {child.log_path}:\n{child.log_tail()}")

    def _tails(self, children: Sequence[Child]) -> str:
        return "".join(f"\n  {c.name} ({c.log_path}):\n{c.log_tail(10)}" for c in children)

    def _terminate(self, children: Sequence[Child]) -> None:
        live = [c for c in children if c.running()]
        for child in live:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while (any(c.running() for c in live) and time.monotonic() < deadline
               and len(self.signals) < 2):
            time.sleep(0.05)
            self._reap()
        for child in live:
            if child.running():
                self.console.line(f"clepsydra: {child.name} did not stop in "
                                  f"{self.grace_s:.0f}s: SIGKILL")
                child.signal_group(signal.SIGKILL)
        for child in live:
            assert child.proc is not None
            try:
                child.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.console.line(f"clepsydra: {child.name} (pid {child.pid}) would not die")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", action="store_true",
                        help="do not echo the services' logs (they stay in HOME/logs)")
    parser.add_argument("--separate-beat", action="store_true",
                        help="run the scheduler's beat as a process of its own, beside its "
                             "worker, as deployed (default: a thread of the worker)")
    parser.add_argument("--without-analytics", action="store_true",
                        help="do not start the analytics (make run-core: "
                             "the core alone, lighter, no Java needed)")
    parser.add_argument("--ready-timeout-s", type=float, default=90.0,
                        help="how long each service may take to become ready (default 90)")
    parser.add_argument("--grace-s", type=float, default=30.0,
                        help="how long children may take to stop before SIGKILL (default 30)")
    parser.add_argument("--no-fork", action="store_true",
                        help="start every service as a new interpreter (python -m ...), not "
                             f"forked by the zygote ({FORK_VAR}=off; DEC-stack-zygote)")
    parser.add_argument("--max-restarts", type=int, default=5,
                        help="restarts of one child within the window before giving up, exit 3 "
                             "(default 5)")
    parser.add_argument("--restart-window-s", type=float, default=60.0,
                        help="the window of --max-restarts (default 60)")
    args = parser.parse_args(argv)
    console = Console(sys.stdout)
    try:
        settings = StackSettings.from_env(os.environ)
    except ConfigError as exc:
        console.line(f"clepsydra: {exc.message}")
        return 2
    if args.no_fork:
        settings = replace(settings, fork=False)
    stack = Supervisor(settings, env=os.environ, console=console, echo=not args.quiet,
                  ready_timeout_s=args.ready_timeout_s, grace_s=args.grace_s,
                  max_restarts=args.max_restarts, restart_window_s=args.restart_window_s,
                  separate_beat=args.separate_beat, analytics=not args.without_analytics)
    stack.install_signal_handlers()
    return stack.run()


if __name__ == "__main__":
    sys.exit(main())
