"""The scale of one Deployment through the Kubernetes API (the ``kubernetes`` client): read and
set ``spec.replicas`` of its ``apps/v1`` scale subresource, which is all the autoscaler's Role
allows (get and patch on ``deployments/scale`` of the worker Deployment).

In a pod the client authenticates with the pod's ServiceAccount; elsewhere with a kubeconfig
(``KUBECONFIG`` or ``~/.kube/config``, as kubectl does).
"""

from __future__ import annotations

import logging

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import OpenApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import load_incluster_config
from kubernetes.config.kube_config import new_client_from_config

from clepsydra_core.errors import ClepsydraError

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class KubeCallFailed(ClepsydraError):
    """The Kubernetes API refused a call (RBAC, missing object) or did not answer; the
    autoscaler keeps the replicas as they are and tries again on its next tick."""

    code = "KUBE_CALL_FAILED"
    http_status = 503


def api_client(*, kubeconfig: str | None = None, context: str | None = None,
               in_cluster: bool | None = None) -> client.ApiClient:
    """A client from the pod's ServiceAccount when running in a pod (``in_cluster`` None: if
    there is one), else from the kubeconfig. KubeCallFailed when neither is there."""
    try:
        if kubeconfig is None and in_cluster is not False:
            configuration = client.Configuration()
            try:
                load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                return client.ApiClient(configuration)
            except ConfigException:
                if in_cluster:
                    raise
        api: client.ApiClient = new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context)
        return api
    except (ConfigException, OSError) as exc:
        raise KubeCallFailed(f"no Kubernetes credentials: {exc}") from exc


class DeploymentScale:
    """``apps/v1`` scale subresource of one Deployment."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, *,
                 timeout_s: float = 10.0) -> None:
        self._apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.name = name
        self._timeout_s = timeout_s

    def read_replicas(self) -> int:
        """spec.replicas as the API server has it now."""
        try:
            scale = self._apps.read_namespaced_deployment_scale(
                self.name, self.namespace, _request_timeout=self._timeout_s)
        except (OpenApiException, urllib3.exceptions.HTTPError) as exc:
            raise KubeCallFailed(f"read scale of deployment {self.namespace}/{self.name}: "
                                 f"{_describe(exc)}") from exc
        return int(scale.spec.replicas or 0) if scale.spec else 0

    def set_replicas(self, replicas: int) -> int:
        """Patch spec.replicas; returns what the API server answered."""
        try:
            scale = self._apps.patch_namespaced_deployment_scale(
                self.name, self.namespace, {"spec": {"replicas": replicas}},
                _content_type=MERGE_PATCH, _request_timeout=self._timeout_s)
        except (OpenApiException, urllib3.exceptions.HTTPError) as exc:
            raise KubeCallFailed(f"scale deployment {self.namespace}/{self.name} to "
                                 f"{replicas}: {_describe(exc)}") from exc
        return int(scale.spec.replicas or 0) if scale.spec else 0


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        return f"{status} {reason or ''}".strip()
    return str(exc) or type(exc).__name__
