"""Clepsydra on a Kubernetes cluster, through the Kubernetes API with the user's kubeconfig (the
``kubernetes`` package: ``pip install 'clepsydra-client[k8s]'``). What ``clepsydra k8s``
shows and does: the workloads (k8s/base) with their replicas and ready pods, the report
CronJob, the store's per-level backlog (read through the API server's service proxy, so no
port-forward is needed), scaling the scheduler workers, and a report run now (a Job from the
CronJob, as ``kubectl create job --from=cronjob/...`` makes it).
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from clepsydra_core.errors import ClepsydraError, ConfigError
from clepsydra_core.wire.schedule import LevelTable

try:
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import OpenApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import list_kube_config_contexts, new_client_from_config
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ConfigError("the k8s commands need the kubernetes package: "
                      "pip install 'clepsydra-client[k8s]'") from exc

PART_OF = "app.kubernetes.io/part-of=clepsydra"
"""The label every Clepsydra object of k8s/base carries."""
WORKER_DEPLOYMENT = "clepsydra-scheduler-worker"
AUTOSCALER_DEPLOYMENT = "clepsydra-scheduler-autoscaler"
REPORT_CRONJOB = "clepsydra-analytics-report"
STORE_SERVICE_PORT = "clepsydra-store:http"
"""The store's Service and its port name, as the API server's proxy addresses them."""
MERGE_PATCH = "application/merge-patch+json"
_T = TypeVar("_T")


class ClusterError(ClepsydraError):
    """The Kubernetes API refused a call (RBAC, a missing object), did not answer, or there is no
    kubeconfig to reach it with."""

    code = "CLUSTER_ERROR"


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str
    name: str
    replicas: int
    ready: int


@dataclass(frozen=True, slots=True)
class CronJobInfo:
    name: str
    schedule: str
    suspended: bool
    last_schedule: str | None
    active: int


@dataclass(frozen=True, slots=True)
class LevelBacklog:
    level: int
    delay_ms: int
    backlog: int
    """Entries of the level not yet handed over to their real topic."""


class Cluster:
    """One namespace of one cluster, through one API client."""

    def __init__(self, api: client.ApiClient, namespace: str, *,
                 timeout_s: float = 10.0) -> None:
        self.api = api
        self.namespace = namespace
        self._timeout_s = timeout_s
        self._apps = client.AppsV1Api(api)
        self._batch = client.BatchV1Api(api)
        self._core = client.CoreV1Api(api)

    @classmethod
    def connect(cls, *, kubeconfig: str | None = None, context: str | None = None,
                namespace: str | None = None, timeout_s: float = 10.0) -> Cluster:
        """From a kubeconfig (KUBECONFIG or ~/.kube/config when None), its current context or
        ``context``, and that context's namespace unless ``namespace`` is given."""
        try:
            api: client.ApiClient = new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context)
            if namespace is None:
                contexts, current = list_kube_config_contexts(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig)
                chosen = next((c for c in contexts if c["name"] == context), current) \
                    if context else current
                namespace = (chosen or {}).get("context", {}).get("namespace") or "default"
        except (ConfigException, OSError) as exc:
            raise ClusterError(f"no usable kubeconfig: {exc}") from exc
        return cls(api, namespace, timeout_s=timeout_s)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, _request_timeout=self._timeout_s, **kwargs)
        except (OpenApiException, urllib3.exceptions.HTTPError) as exc:
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or type(exc).__name__
            detail = f"{status} {reason}" if status else str(exc)
            raise ClusterError(f"{what} in namespace {self.namespace}: {detail}") from exc

    # ---- reading ----------------------------------------------------------------------------
    def workloads(self) -> list[Workload]:
        """The Clepsydra StatefulSets and Deployments: desired replicas and ready pods."""
        sets = self._call("list statefulsets", self._apps.list_namespaced_stateful_set,
                          self.namespace, label_selector=PART_OF)
        deployments = self._call("list deployments", self._apps.list_namespaced_deployment,
                                 self.namespace, label_selector=PART_OF)
        out = []
        for kind, items in (("StatefulSet", sets.items), ("Deployment", deployments.items)):
            for item in items:
                replicas = item.spec.replicas if item.spec and item.spec.replicas is not None \
                    else 1
                ready = (item.status.ready_replicas or 0) if item.status else 0
                out.append(Workload(kind, _name(item.metadata), replicas, ready))
        return out

    def cron_jobs(self) -> list[CronJobInfo]:
        jobs = self._call("list cronjobs", self._batch.list_namespaced_cron_job, self.namespace,
                          label_selector=PART_OF)
        out = []
        for item in jobs.items:
            status = item.status
            last = status.last_schedule_time.isoformat() \
                if status and status.last_schedule_time else None
            out.append(CronJobInfo(_name(item.metadata), item.spec.schedule,
                                   bool(item.spec.suspend), last,
                                   len(status.active or []) if status else 0))
        return out

    def level_backlog(self) -> list[LevelBacklog]:
        """Per-level backlog from the store's GET /v1/schedule/levels, through the API server's
        proxy to the store Service."""
        # the raw answer: the client would otherwise turn the JSON into a Python repr string
        response: Any = self._call("read the store's levels through the service proxy",
                                   self._core.connect_get_namespaced_service_proxy_with_path,
                                   STORE_SERVICE_PORT, self.namespace, "v1/schedule/levels",
                                   _preload_content=False)
        try:
            table = LevelTable.from_json(json.loads(response.data))
        except (ValueError, ClepsydraError) as exc:
            raise ClusterError(f"unexpected answer from the store's levels: {exc}") from exc
        out = []
        for info in table.levels:
            out.append(LevelBacklog(info.level, info.delay_ms, info.backlog))
        return out

    # ---- changing ---------------------------------------------------------------------------
    def scale(self, deployment: str, replicas: int) -> int:
        """Set a Deployment's replicas through its scale subresource; returns the new value."""
        scale = self._call(f"scale deployment {deployment}",
                           self._apps.patch_namespaced_deployment_scale, deployment,
                           self.namespace, {"spec": {"replicas": replicas}},
                           _content_type=MERGE_PATCH)
        return int(scale.spec.replicas or 0) if scale.spec else 0

    def create_job_from_cron_job(self, cron_job: str, job_name: str | None = None) -> str:
        """A Job with the CronJob's job template, owned by the CronJob and annotated as a manual
        run, as ``kubectl create job NAME --from=cronjob/CRON_JOB`` makes it. Returns its
        name."""
        cron = self._call(f"read cronjob {cron_job}", self._batch.read_namespaced_cron_job,
                          cron_job, self.namespace)
        template = cron.spec.job_template if cron.spec else None
        if template is None or template.spec is None or cron.metadata is None:
            raise ClusterError(f"cronjob {cron_job} has no job template")
        name = job_name or manual_job_name(cron_job)
        labels = dict(template.metadata.labels or {}) if template.metadata else {}
        annotations = dict(template.metadata.annotations or {}) if template.metadata else {}
        annotations["cronjob.kubernetes.io/instantiate"] = "manual"
        job = client.V1Job.from_dict({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                                     "name": cron.metadata.name, "uid": cron.metadata.uid,
                                     "controller": True}],
            },
            "spec": template.spec.to_dict(),
        })
        created = self._call(f"create job {name}", self._batch.create_namespaced_job,
                             self.namespace, job)
        return _name(created.metadata)


def _name(meta: client.V1ObjectMeta | None) -> str:
    return str(meta.name) if meta is not None else ""


def manual_job_name(cron_job: str) -> str:
    """``<cronjob>-manual-<5 random letters and digits>``, as kubectl names a manual run."""
    alphabet = string.ascii_lowercase + string.digits
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{cron_job[:63 - 12]}-manual-{suffix}"
