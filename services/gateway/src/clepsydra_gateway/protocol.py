"""The RocketMQ 5 protocol's generated modules (``apache.rocketmq.v2``), taken from the pinned
``rocketmq-python-client`` dependency (its ``rocketmq.grpc_protocol``), never copied here.

Importing ``rocketmq.grpc_protocol`` the ordinary way runs ``rocketmq/__init__.py``, which
imports the whole client (its producer, consumers, OpenTelemetry exporters and log set-up):
~25 MiB and 0.2 s that a server never uses (DEC-gateway-lean-stubs). So the three generated
modules are loaded under their own names with the two packages above them stood in for while
they load; the stand-ins are removed afterwards, so a process that later imports the client
(a test, a benchmark) gets the real packages, which find these modules already loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

_PACKAGE = "rocketmq"
_PROTOCOL = "rocketmq.grpc_protocol"


def _load() -> tuple[Any, Any, Any]:
    if _PROTOCOL in sys.modules and hasattr(sys.modules[_PROTOCOL], "MessagingServiceStub"):
        real = sys.modules[_PROTOCOL]  # the client is loaded already: its modules serve
        return (real.definition_pb2, real.service_pb2,  # type: ignore[attr-defined]
                importlib.import_module(f"{_PROTOCOL}.service_pb2_grpc"))
    spec = importlib.util.find_spec(_PACKAGE)  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("rocketmq-python-client is not installed (the gateway takes the "
                          "protocol's generated modules from it)")
    root = Path(next(iter(spec.submodule_search_locations)))
    stood_in = []
    for name, path in ((_PACKAGE, root), (_PROTOCOL, root / "grpc_protocol")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module
            stood_in.append(name)
    try:
        definition = importlib.import_module(f"{_PROTOCOL}.definition_pb2")
        service = importlib.import_module(f"{_PROTOCOL}.service_pb2")
        grpc_service = importlib.import_module(f"{_PROTOCOL}.service_pb2_grpc")
    finally:
        for name in stood_in:
            sys.modules.pop(name, None)
    return definition, service, grpc_service


definition_pb2, service_pb2, service_pb2_grpc = _load()
Code: Any = definition_pb2.Code
"""The protocol's status codes (``Code.OK``, ``Code.NOT_IMPLEMENTED``, ...)."""
