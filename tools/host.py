"""One process serving the local stack's retry service and web console (DEC-stack-console-hosted).

    python -m tools.host clepsydra_retry clepsydra_console      (started by tools/stack.py)

``make run`` only: each service stays its own package, app factory, image and Kubernetes
Deployment, and neither imports the other; this module, in ``tools/``, is where they meet. The
console's process was one more interpreter holding its own copy of what the retry service's
already holds (Flask, Jinja, gunicorn, the SDK, and the pages each copies from the zygote):
served by the retry service's process instead, the stack holds ~20 MiB PSS less at rest.

Each service builds its gunicorn server as its own ``python -m`` does (its settings from the
environment, its options: bind, threads, timeouts; :func:`hosted`). This process runs one
gunicorn worker (CLEPSYDRA_SINGLE_PROCESS: no master) listening on every service's address,
with the threads of all of them, and hands each request to the app of the port it arrived on
(:class:`ByPort`): each service's routes, ``/healthz`` and ``/metrics`` answer on its own port as
before. Log lines say which service wrote them (its logger's package; gunicorn's own lines are
the first service's). The tracer provider is the process's, the first service's name
(``clepsydra_core.runtime.telemetry``: first call wins): the console's spans carry the retry
service's name here. A crash of one takes down both, and the supervisor restarts them together.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clepsydra_core.errors import ConfigError
from clepsydra_core.runtime import logging as clogging
from clepsydra_web.server import GunicornServer

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Hosted:
    """One service as this process serves it: its log name, package and gunicorn server."""

    service: str
    package: str
    server: GunicornServer
    single_process: bool


def _retry() -> Hosted:
    from clepsydra_core.naming import RETRY_SERVICE
    from clepsydra_retry.__main__ import server
    from clepsydra_retry.settings import RetrySettings

    settings = RetrySettings.from_env()
    return Hosted(RETRY_SERVICE, "clepsydra_retry", server(settings),
                  settings.common.single_process)


def _console() -> Hosted:
    from clepsydra_console.__main__ import server
    from clepsydra_console.settings import ConsoleSettings
    from clepsydra_core.naming import CONSOLE_SERVICE

    settings = ConsoleSettings.from_env()
    return Hosted(CONSOLE_SERVICE, "clepsydra_console", server(settings),
                  settings.common.single_process)


HOSTABLE: Mapping[str, Callable[[], Hosted]] = {"clepsydra_retry": _retry,
                                                 "clepsydra_console": _console}
"""The services one process may serve together: gunicorn apps with one worker each."""


def hosted(modules: Sequence[str]) -> list[Hosted]:
    """Each of ``modules``' servers, built from the environment as its ``python -m`` builds it;
    ConfigError on a bad setting, ValueError on a module that cannot be hosted."""
    unknown = [m for m in modules if m not in HOSTABLE]
    if unknown or len(set(modules)) != len(modules) or len(modules) < 2:
        raise ValueError(f"hosts two or more of {sorted(HOSTABLE)}, each once: not {modules}")
    services = [HOSTABLE[m]() for m in modules]
    for each in services:
        if each.server.cfg.workers != 1 or not each.single_process:
            raise ValueError(f"{each.package} is hosted with one worker and "
                             "CLEPSYDRA_SINGLE_PROCESS=true only")
    return services


def port_of(bind: str) -> str:
    """The port of a gunicorn bind address (``host:port``, ``[v6]:port``)."""
    return bind.rsplit(":", 1)[1]


class ByPort:
    """A WSGI app handing each request to the app of the port it arrived on (``SERVER_PORT``:
    gunicorn sets it from the listener's address)."""

    def __init__(self, apps: Mapping[str, WsgiApp]) -> None:
        self.apps = dict(apps)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        app = self.apps.get(str(environ.get("SERVER_PORT")))
        if app is None:  # no listener but ours reaches this process
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no service on this port\n"]
        return app(environ, start_response)


def combined(services: Sequence[Hosted]) -> GunicornServer:
    """One gunicorn server listening on every service's address, with their threads summed, the
    longest of their timeouts, each request to its port's app (built in the worker, in order)."""
    cfgs = [s.server.cfg for s in services]
    ports = [[port_of(b) for b in cfg.bind] for cfg in cfgs]

    def factory() -> Any:
        apps: dict[str, WsgiApp] = {}
        for each, own in zip(services, ports, strict=True):
            app = each.server.load()
            apps.update({port: app for port in own})
        return ByPort(apps)

    return GunicornServer(factory, {
        "bind": [b for cfg in cfgs for b in cfg.bind],
        "workers": 1,
        "threads": sum(cfg.threads for cfg in cfgs),
        "timeout": max(cfg.timeout for cfg in cfgs),
        "graceful_timeout": max(cfg.graceful_timeout for cfg in cfgs),
        "keepalive": max(cfg.keepalive for cfg in cfgs),
        "loglevel": cfgs[0].loglevel,
        "proc_name": "+".join(cfg.proc_name for cfg in cfgs),
    })


class ByLogger(logging.Formatter):
    """Each line named by the service whose package logged it; others by the first's."""

    def __init__(self, services: Sequence[Hosted]) -> None:
        super().__init__()
        self.by_package = [(s.package, clogging.formatter(s.service)) for s in services]

    def format(self, record: logging.LogRecord) -> str:
        for package, fmt in self.by_package:
            if record.name == package or record.name.startswith(package + "."):
                return fmt.format(record)
        return self.by_package[0][1].format(record)


def name_lines(services: Sequence[Hosted]) -> None:
    """The root logger's handlers name each line's service (:class:`ByLogger`)."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(ByLogger(services))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.host", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="+", help=f"two or more of {sorted(HOSTABLE)}")
    args = parser.parse_args(argv)
    try:
        services = hosted(args.modules)
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"clepsydra host: {exc.message}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"clepsydra host: {exc}", file=sys.stderr)
        return 2
    from clepsydra_core.settings import CommonSettings

    clogging.configure_from(CommonSettings.from_env(), services[0].service)
    name_lines(services)
    return combined(services).serve(in_process=True)


if __name__ == "__main__":
    sys.exit(main())
