"""The one stack builder: the parts of the stack, each defined once -- its
command, the variable of its port, the address the others reach it at, when it is ready, where
its data and log go -- and :class:`Stack`, which starts the parts one asks for. ``make run``
(tools/stack.py) supervises a Stack of every part; the integration tests, the e2e and fault
suites (through ``make run``) and the benches build theirs with ``with_store()``,
``with_retry()``, ``with_scheduler()``, ``with_analytics()``, ``with_console()``.

    with Stack(tmp / "stack").with_store(CLEPSYDRA_DELAY_LEVELS="1s").with_retry().start() as s:
        s.store.url, s.retry.url, s.redis_url

Layout under the stack's home (CLEPSYDRA_HOME of every part): ``redis/`` (its own Redis),
``logs/<name>.log``, and each service's own folder (``store/``, ``scheduler/``, ...).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

from tools.processes import (
    REPO,
    Child,
    HttpService,
    Process,
    RedisServer,
    free_port,
    http_ok,
)


@dataclass(frozen=True, slots=True)
class Part:
    """One kind of process of the stack."""

    name: str
    command: tuple[str, ...]
    """``python -m`` and this."""
    port_var: str | None
    """Where it answers /healthz; ``0`` there means no health server (then ``ready_log``)."""
    url_var: str | None = None
    """The variable the other parts read its address from."""
    ready_log: str | None = None
    """Without a health port: a pattern of the log line that says it is ready (None: running
    is ready)."""
    hosts: tuple[Part, ...] = ()
    """Parts this one's process serves beside its own (tools/host.py: the local stack's
    console in the retry service's process, DEC-stack-console-hosted), each on its own port:
    ready when every one answers /healthz."""

    def argv(self) -> list[str]:
        return [sys.executable, "-m", *self.command]

    def health_url(self, env: Mapping[str, str]) -> str | None:
        """Where it answers /healthz under ``env``; None when it has no health server."""
        if self.url_var and env.get(self.url_var):
            return env[self.url_var]
        port = env.get(self.port_var or "", "0") or "0"
        return None if port == "0" else f"http://127.0.0.1:{port}"

    def ready(self, env: Mapping[str, str]) -> Callable[[Child], bool]:
        """The readiness check of one of its processes started with ``env``."""
        if self.hosts:
            checks = [part.ready(env) for part in (replace(self, hosts=()), *self.hosts)]
            return lambda child: all(check(child) for check in checks)
        url = self.health_url(env)
        if url is not None:
            return lambda _child: http_ok(url + "/healthz")
        if self.ready_log is not None:
            pattern = re.compile(self.ready_log.encode())
            return lambda child: pattern.search(child.log_bytes()) is not None
        return lambda child: child.exit_code() is None

    def describe_ready(self, env: Mapping[str, str]) -> str:
        if self.hosts:
            return " and ".join(part.describe_ready(env)
                                for part in (replace(self, hosts=()), *self.hosts))
        url = self.health_url(env)
        if url is not None:
            return f"{self.name} at {url}/healthz"
        if self.ready_log is not None:
            return f"{self.name} logging {self.ready_log!r}"
        return f"{self.name} running"


STORE = Part("store", ("clepsydra_store",), "CLEPSYDRA_STORE_PORT", "CLEPSYDRA_STORE_URL")
RETRY = Part("retry", ("clepsydra_retry",), "CLEPSYDRA_RETRY_PORT", "CLEPSYDRA_RETRY_URL")
SCHEDULER_WORKER = Part("scheduler-worker", ("clepsydra_scheduler", "worker"),
                        "CLEPSYDRA_SCHEDULER_PORT", ready_log="scheduler worker ready")
SCHEDULER_BEAT = Part("scheduler-beat", ("clepsydra_scheduler", "beat"),
                      "CLEPSYDRA_SCHEDULER_BEAT_PORT")
SCHEDULER_WITH_BEAT = Part("scheduler", ("clepsydra_scheduler", "worker", "--beat"),
                           "CLEPSYDRA_SCHEDULER_PORT", ready_log="scheduler worker ready")
"""The worker with beat on a thread of it (one process; it serves beat's health port too):
what ``make run`` starts. Kubernetes, the images and the fault matrix keep beat a process."""
ANALYTICS_EXPORT = Part("analytics-export", ("clepsydra_analytics", "export"),
                        "CLEPSYDRA_ANALYTICS_EXPORTER_PORT")
ANALYTICS_API = Part("analytics-api", ("clepsydra_analytics", "serve"),
                     "CLEPSYDRA_ANALYTICS_PORT", "CLEPSYDRA_ANALYTICS_URL")
ANALYTICS_SCHEDULE = Part("analytics-schedule", ("clepsydra_analytics", "schedule"), None,
                          ready_log=r"\bready\b")
ANALYTICS_LOCAL = Part("analytics", ("clepsydra_analytics", "serve", "--schedule", "--export"),
                       "CLEPSYDRA_ANALYTICS_PORT", "CLEPSYDRA_ANALYTICS_URL")
"""The API with the schedule's worker and the exporter on threads of it (one process, ready
when the API answers /healthz; the exporter answers its own port): what ``make run`` starts.
Kubernetes keeps the three apart."""
CONSOLE = Part("console", ("clepsydra_console",), "CLEPSYDRA_CONSOLE_PORT",
               "CLEPSYDRA_CONSOLE_URL")
"""The web console (services/console): reads the store, retry and analytics APIs."""
RETRY_WITH_CONSOLE = Part("retry", ("tools.host", "clepsydra_retry", "clepsydra_console"),
                          "CLEPSYDRA_RETRY_PORT", "CLEPSYDRA_RETRY_URL", hosts=(CONSOLE,))
"""``make run``'s retry service with the web console served by its process (tools/host.py,
DEC-stack-console-hosted): one process, each on its own port, the log ``retry.log``."""
GATEWAY = Part("gateway", ("clepsydra_gateway",), "CLEPSYDRA_GATEWAY_HEALTH_PORT")
"""The RocketMQ 5 gRPC gateway: gRPC on CLEPSYDRA_GATEWAY_PORT, ready when its health port
answers /healthz (Redis and the store answer)."""
EXTRA_PORTS = {GATEWAY.name: ("CLEPSYDRA_GATEWAY_PORT",)}
"""Ports a part listens on besides its health port (each given a free port like it)."""
SCHEDULER = (SCHEDULER_WORKER, SCHEDULER_BEAT)
ANALYTICS = (ANALYTICS_EXPORT, ANALYTICS_API, ANALYTICS_SCHEDULE)
LOCAL_ANALYTICS = (ANALYTICS_LOCAL,)
EVERYTHING = (STORE, RETRY, SCHEDULER_WITH_BEAT, GATEWAY, *LOCAL_ANALYTICS, CONSOLE)
"""What ``make run`` starts (Redis aside), in start order: the scheduler one process, the
gateway, the analytics one process (the stack's memory at rest), the console."""
HOSTED = {CONSOLE: RETRY_WITH_CONSOLE}
"""``make run``'s parts served by another's process (DEC-stack-console-hosted): the part, and
the process that serves it in place of its own (its own process with
``CLEPSYDRA_STACK_HOST_CONSOLE=false``, ``CLEPSYDRA_AUTH=on``, or as deployed:
``tools.stack.Supervisor.hosted``)."""
EVERYTHING_SEPARATE_BEAT = (STORE, RETRY, *SCHEDULER, GATEWAY, *LOCAL_ANALYTICS, CONSOLE)
"""The same with the scheduler's worker and beat two processes, as deployed
(``python -m tools.stack --separate-beat``: the fault matrix kills each)."""
PARTS = (STORE, RETRY, SCHEDULER_WORKER, SCHEDULER_BEAT, SCHEDULER_WITH_BEAT, GATEWAY,
         *ANALYTICS, ANALYTICS_LOCAL, CONSOLE)
"""Every kind of part but Redis."""
BY_NAME = {part.name: part for part in PARTS}
PORT_VARS = tuple(dict.fromkeys((*(p.port_var for p in PARTS if p.port_var),
                                 *(v for extra in EXTRA_PORTS.values() for v in extra),
                                 "CLEPSYDRA_REDIS_PORT")))
"""Every port a whole stack listens on."""


class Stack:
    """The parts asked for, under one home, on free ports (or those given), every one told
    the others' addresses; ``start()`` starts them in order and waits until each is ready,
    ``stop()`` (or leaving the ``with``) stops them in reverse. ``env`` is given to every
    part; each ``with_*`` adds that part's own. ``add()`` starts one more process of a part
    (a second retry service, more scheduler workers)."""

    def __init__(self, home: Path, *, env: Mapping[str, str] | None = None,
                 redis_url: str | None = None, base_env: Mapping[str, str] | None = None,
                 ports: Mapping[str, int] | None = None, timeout_s: float = 60.0) -> None:
        self.home = home
        self.log_dir = home / "logs"
        self.env = dict(env or {})
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.timeout_s = timeout_s
        self.ports: dict[str, int] = dict(ports or {})
        """port variable -> port of the parts asked for."""
        self.redis: RedisServer | None = None
        self._redis_url = redis_url
        self._plan: list[tuple[Part, str | None, dict[str, str]]] = []
        self.processes: list[Process] = []
        """Every process started, in order (redis first)."""
        self.by_name: dict[str, Process] = {}
        self.shard_urls: list[str] = []
        """Every store shard's URL, index = shard id (:meth:`with_store` with ``shards``)."""
        self._shard_env: dict[str, dict[str, str]] = {}
        """A store shard's own settings (its id, peers, port, folder), by process name: a
        restart keeps them."""

    # ---- what to start -------------------------------------------------------------------

    def with_redis(self, *, appendonly: bool = False) -> Stack:
        """Its own redis-server in ``home/redis`` (the default unless a ``redis_url`` is given;
        ``make run`` asks for the append-only file)."""
        port = self.ports.setdefault("CLEPSYDRA_REDIS_PORT", free_port())
        self.redis = RedisServer(self.home / "redis", port=port, appendonly=appendonly,
                                 name="redis", log_dir=self.log_dir, base_env=self.base_env)
        return self

    def with_part(self, part: Part, *, name: str | None = None, **env: str) -> Stack:
        for var in (part.port_var, *EXTRA_PORTS.get(part.name, ()),
                    *(hosted.port_var for hosted in part.hosts)):
            if var and var not in self.ports:
                self.ports[var] = free_port()
        self._plan.append((part, name, env))
        return self

    def with_store(self, *, shards: int = 1, shard_ports: list[int] | None = None,
                   **env: str) -> Stack:
        """The store; with ``shards`` > 1 a cluster of that many store shards
        (DEC-store-shards): shard 0 is the process ``store`` on CLEPSYDRA_STORE_PORT (every
        other part's address), shard ``i`` the process ``store-<i>`` on a port of its own
        (``shard_ports``, else a free one) with its data in ``home/store-<i>``."""
        if shards == 1:
            return self.with_part(STORE, **env)
        # imported here: tools/parts stays importable without the packages (the k8s env)
        from clepsydra_core import shards as shard_rules

        port0 = self.ports.setdefault(STORE.port_var or "", free_port())
        ports = list(shard_ports or [port0] + [free_port() for _ in range(shards - 1)])
        ports[0] = port0
        self.shard_urls = [f"http://127.0.0.1:{p}" for p in ports]
        self.env.setdefault(shard_rules.SHARDS_VAR, str(shards))
        for shard, port in enumerate(ports):
            own = {shard_rules.SHARD_ID_VAR: str(shard),
                   shard_rules.PEERS_VAR: ",".join(self.shard_urls), **env}
            if shard:
                own.update({STORE.port_var or "": str(port),
                            STORE.url_var or "": self.shard_urls[shard],
                            "CLEPSYDRA_STORE_DIR": str(self.home / shard_name(shard))})
            self._shard_env[shard_name(shard)] = {k: v for k, v in own.items() if k not in env}
            self._plan.append((STORE, shard_name(shard), own))
        return self

    def with_retry(self, **env: str) -> Stack:
        return self.with_part(RETRY, **env)

    def with_scheduler(self, env: Mapping[str, str] | None = None, *, beat: bool = True,
                       health: bool = False, **more: str) -> Stack:
        """The scheduler's worker (and beat) with ``env`` and ``more``; their health servers
        only with ``health`` (several workers on one machine would want the same port)."""
        for part in SCHEDULER if beat else SCHEDULER[:1]:
            if not health and part.port_var:
                self.ports.setdefault(part.port_var, 0)
            self.with_part(part, **{**(env or {}), **more})
        return self

    def with_gateway(self, **env: str) -> Stack:
        """The RocketMQ 5 gateway (gRPC on ``ports["CLEPSYDRA_GATEWAY_PORT"]``)."""
        return self.with_part(GATEWAY, **env)

    def with_analytics(self, *parts: Part, **env: str) -> Stack:
        """The analytics parts asked for (default: all three)."""
        for part in parts or ANALYTICS:
            self.with_part(part, **env)
        return self

    def with_console(self, **env: str) -> Stack:
        return self.with_part(CONSOLE, **env)

    def with_everything(self, *, appendonly: bool = True, separate_beat: bool = False,
                        analytics: bool = True, shard_ports: list[int] | None = None,
                        hosted: bool = False) -> Stack:
        """What ``make run`` starts: every part (its own Redis unless ``redis_url``), the
        scheduler's beat inside its worker unless ``separate_beat``; without the analytics
        parts unless ``analytics`` (``make run-core``); with ``shard_ports`` (more than one),
        a store shard on each (DEC-store-shards); with ``hosted``, the parts of
        :data:`HOSTED` served by another's process (DEC-stack-console-hosted)."""
        if self._redis_url is None:
            self.with_redis(appendonly=appendonly)
        hosts = {host.name: host for host in HOSTED.values()} if hosted else {}
        for part in EVERYTHING_SEPARATE_BEAT if separate_beat else EVERYTHING:
            if hosted and part in HOSTED:
                continue
            part = hosts.get(part.name, part)
            if part is STORE and shard_ports and len(shard_ports) > 1:
                self.with_store(shards=len(shard_ports), shard_ports=shard_ports)
            elif analytics or part not in LOCAL_ANALYTICS:
                self.with_part(part)
        if not separate_beat:  # the one scheduler process serves beat's health port too
            self.ports.setdefault("CLEPSYDRA_SCHEDULER_BEAT_PORT", free_port())
        return self

    # ---- addresses -----------------------------------------------------------------------

    @property
    def redis_url(self) -> str:
        if self._redis_url is not None:
            return self._redis_url
        if self.redis is None:
            raise RuntimeError("this stack has no Redis: with_redis() or redis_url=")
        return self.redis.url

    def url(self, part: Part) -> str:
        """Where ``part`` answers (its URL variable in ``env``, else its port on loopback)."""
        if part.url_var and part.url_var in self.env:
            return self.env[part.url_var]
        assert part.port_var is not None, f"{part.name} has no address"
        return f"http://127.0.0.1:{self.ports[part.port_var]}"

    def shared_env(self) -> dict[str, str]:
        """What every part is given: the home, every address and port, then ``env``."""
        env = {"CLEPSYDRA_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        if self._redis_url is not None or self.redis is not None:
            env["CLEPSYDRA_REDIS_URL"] = self.redis_url
        for var, port in self.ports.items():
            env[var] = str(port)
        for part in PARTS:
            if part.url_var and part.port_var in self.ports:
                env[part.url_var] = self.url(part)
        return {**env, **self.env}

    # ---- processes -----------------------------------------------------------------------

    def process(self, part: Part | str, *, name: str | None = None, **env: str) -> Process:
        """The one way a part becomes a process (not started): its argv, the shared
        environment with ``env`` over it, its log in ``home/logs/<name>.log``, its readiness
        check; an HttpService when it answers on a port of its own."""
        part = BY_NAME[part] if isinstance(part, str) else part
        full = {**self.shared_env(), **env}
        name = name or part.name
        if part.command[:2] == SCHEDULER_WORKER.command:
            self._name_worker(full, name)
        if part.command[0].startswith("tools."):  # a module of this repository, not installed
            full["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), full.get("PYTHONPATH", "")) if p)
        url = part.health_url(full)
        if url is not None and part.port_var and not part.hosts:
            return HttpService(name, part.argv(), port=int(full[part.port_var]), env=full,
                               log_dir=self.log_dir, health_url=url, base_env=self.base_env)
        return Process(name, part.argv(), env=full, log_dir=self.log_dir,
                       ready=part.ready(full), base_env=self.base_env)

    def _name_worker(self, env: dict[str, str], name: str) -> None:
        """A scheduler worker's identity in the leases: its slot in the stack, the same when the
        stack restarts it, so it takes its own levels back at once (DEC-scheduler-lease); unless
        the caller or the environment names it."""
        # imported here: tools/parts stays importable without the packages (the k8s env)
        from clepsydra_scheduler.settings import WORKER_ID_VAR

        if WORKER_ID_VAR not in env and WORKER_ID_VAR not in self.base_env:
            env[WORKER_ID_VAR] = name

    def planned_part(self, name: str) -> Part:
        """The part the process ``name`` was asked for as (a hosting part: its own)."""
        for part, as_name, _env in self._plan:
            if (as_name or part.name) == name:
                return part
        return part_named(name)

    def children(self) -> list[Process]:
        """Every process asked for, not started, Redis first (``make run`` launches them)."""
        planned: list[Process] = [self.redis] if self.redis is not None else []
        return planned + [self.process(part, name=name, **env)
                          for part, name, env in self._plan]

    def start(self) -> Stack:
        """Start every part asked for, in order, each once the one before is ready; on a
        failure stop what started and raise."""
        try:
            for child in self.children():
                self._track(child).start(self.timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def add(self, part: Part | str, *, name: str | None = None, **env: str) -> Process:
        """Start one more process of ``part`` now (stopped with the stack)."""
        proc = self._track(self.process(part, name=name, **env))
        proc.start(self.timeout_s)
        return proc

    def restart(self, name: str, *, stop: bool = True, **env: str) -> Process:
        """Stop (SIGTERM, unless ``stop`` is False: a test killed it) a started process and
        start its part again on the same port and data, with ``env`` over the stack's."""
        old = self.by_name[name]
        if stop:
            old.stop()
        part = next(p for p in PARTS if old.argv[2:] == list(p.command))
        return self.add(part, name=name, **{**self._shard_env.get(name, {}), **env})

    def _track(self, proc: Process) -> Process:
        self.processes.append(proc)
        self.by_name[proc.name] = proc
        return proc

    def __getitem__(self, name: str) -> Process:
        return self.by_name[name]

    def http(self, name: str) -> HttpService:
        proc = self.by_name[name]
        assert isinstance(proc, HttpService), f"{name} has no HTTP address"
        return proc

    @property
    def store(self) -> HttpService:
        return self.http(STORE.name)

    @property
    def retry(self) -> HttpService:
        return self.http(RETRY.name)

    @property
    def gateway(self) -> HttpService:
        """The gateway's process (its ``url`` is the health port's)."""
        return self.http(GATEWAY.name)

    @property
    def gateway_endpoint(self) -> str:
        """Where RocketMQ clients reach the gateway: ``127.0.0.1:<gRPC port>``."""
        return f"127.0.0.1:{self.ports['CLEPSYDRA_GATEWAY_PORT']}"

    @property
    def analytics(self) -> HttpService:
        return self.http(ANALYTICS_API.name)

    @property
    def console(self) -> HttpService:
        return self.http(CONSOLE.name)

    def stop(self) -> None:
        """SIGTERM every process, newest first (Redis last); SIGKILL what lingers."""
        for proc in reversed(self.processes):
            proc.stop()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, _type: type[BaseException] | None, _exc: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.stop()


def part_named(name: str) -> Part:
    """The part a process of the stack runs, by the process's name (``store-2``: a store)."""
    part = BY_NAME.get(name)
    if part is None and name.startswith(f"{STORE.name}-"):
        return STORE
    if part is None:
        raise KeyError(name)
    return part


def shard_name(shard: int) -> str:
    """The process name (and log file) of a store shard: ``store``, ``store-1``, ..., the name
    of its data folder."""
    from clepsydra_core.naming import store_dir_name  # (tools/parts without the packages)

    return store_dir_name(shard)


def service(part: Part, home: Path, *, port: int | None = None, name: str | None = None,
            redis_url: str | None = None, store_url: str | None = None,
            env: Mapping[str, str] | None = None) -> HttpService:
    """One HTTP part on its own, not started: the process of a one-part :class:`Stack` under
    ``home`` (on ``port``, default a free one), told where Redis and the store are."""
    addresses = {"CLEPSYDRA_STORE_URL": store_url} if store_url else {}
    ports = {part.port_var: port} if port and part.port_var else None
    stack = Stack(home, env=addresses, redis_url=redis_url, ports=ports).with_part(part)
    proc = stack.process(part, name=name, **(env or {}))
    assert isinstance(proc, HttpService), f"{part.name} has no HTTP address"
    return proc


def store_service(home: Path, *, port: int | None = None, env: Mapping[str, str] | None = None,
                  name: str = "store") -> HttpService:
    """The store alone (``python -m clepsydra_store``), data under ``home``, not started."""
    return service(STORE, home, port=port, name=name, env=env)
