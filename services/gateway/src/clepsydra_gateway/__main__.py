"""`python -m clepsydra_gateway`: the RocketMQ 5 gRPC gateway on ``CLEPSYDRA_GATEWAY_PORT``
(health and metrics on ``CLEPSYDRA_GATEWAY_HEALTH_PORT``), until SIGTERM or SIGINT: then it
stops taking calls, lets those under way finish (5 s) and exits 0. Exit 2: a bad setting or a
port it cannot bind."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

from clepsydra_core.errors import ConfigError
from clepsydra_core.naming import GATEWAY_SERVICE
from clepsydra_core.runtime import logging as clogging
from clepsydra_gateway.settings import GatewaySettings


def main() -> int:
    try:
        settings = GatewaySettings.from_env()
    except ConfigError as exc:  # a bad setting stops start-up, naming the variable
        print(f"clepsydra gateway: {exc.message}", file=sys.stderr)
        return 2
    clogging.configure_from(settings.common, GATEWAY_SERVICE)
    from clepsydra_gateway.server import create_server  # grpc and the stubs: only to serve

    gateway = create_server(settings)
    try:
        gateway.start()
    except OSError as exc:
        print(f"clepsydra gateway: {exc} (CLEPSYDRA_GATEWAY_PORT / "
              "CLEPSYDRA_GATEWAY_HEALTH_PORT)", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
