"""``clepsydra k8s status | scale workers N | report-now``: the CLI's real ``kubernetes`` client
over real HTTP, configured by a kubeconfig file written here, against the stand-in API server
of tests/fixtures/kube_api.py (no API server can run on these machines; it is the one stand-in
the project allows), whose service proxy reaches a real store process."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clepsydra_client.cli.main import main as cli_main
from tests.fixtures.kube_api import (
    KubeApi,
    cron_job,
    deployment,
    start_kube_api,
    stateful_set,
)
from tests.fixtures.scheduler import STORE_LEVELS, TOPIC, StoreApi
from tools.processes import HttpService, free_port

pytestmark = pytest.mark.integration

REPORT_JOB_SPEC = {
    "backoffLimit": 1,
    "activeDeadlineSeconds": 3000,
    "template": {
        "metadata": {"labels": {"app.kubernetes.io/name": "clepsydra-analytics-report"}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "report", "image": "clepsydra/analytics-spark:0.1.0",
                                 "args": ["python", "-m", "clepsydra_analytics", "jobs",
                                          "run"]}]},
    },
}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


K8sCli = Callable[..., Result]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeApi]:
    yield from start_kube_api(tmp_path)


@pytest.fixture
def k8s(kube: KubeApi) -> K8sCli:
    """k8s(*args, json=False) runs ``clepsydra [--json] k8s --kubeconfig <stand-in> *args``."""

    def run(*args: str, as_json: bool = False) -> Result:
        out, err = io.StringIO(), io.StringIO()
        argv = [*(["--json"] if as_json else []), "k8s", "--kubeconfig", str(kube.kubeconfig),
                *args]
        code = cli_main(argv, out=out, err=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def cluster(kube: KubeApi) -> KubeApi:
    """The workloads of k8s/base as the stand-in holds them, in the kubeconfig's namespace."""
    ns = kube.namespace
    kube.state.put(stateful_set(ns, "clepsydra-store", 1, ready=1))
    kube.state.put(stateful_set(ns, "clepsydra-redis", 1, ready=0))
    kube.state.put(deployment(ns, "clepsydra-scheduler-worker", 2, ready=1))
    kube.state.put(deployment(ns, "clepsydra-scheduler-beat", 1))
    kube.state.put(deployment(ns, "clepsydra-scheduler-autoscaler", 1))
    kube.state.put(cron_job(ns, "clepsydra-analytics-report", REPORT_JOB_SPEC))
    # not Clepsydra's: never listed
    kube.state.put(deployment(ns, "someone-else", 3, labels={"app.kubernetes.io/part-of": "x"}))
    return kube


def test_status_lists_workloads_ready_pods_and_the_backlog_per_level(
        tmp_path: Path, start_store: Callable[..., HttpService], cluster: KubeApi,
        k8s: K8sCli) -> None:
    store = start_store(tmp_path / "store-home", env={"CLEPSYDRA_DELAY_LEVELS": STORE_LEVELS})
    cluster.state.services[(cluster.namespace, "clepsydra-store")] = store.url
    api = StoreApi(store.url)
    api.create_topic(TOPIC, 1)
    api.produce(TOPIC, [{"body": f"m{i}", "delayLevel": 3} for i in range(4)])
    api.produce(TOPIC, [{"body": "x", "delayLevel": 2}])
    api.close()

    data = k8s("status", as_json=True).json()
    assert data["namespace"] == cluster.namespace
    assert {(w["kind"], w["name"], w["ready"], w["replicas"]) for w in data["workloads"]} == {
        ("StatefulSet", "clepsydra-store", 1, 1), ("StatefulSet", "clepsydra-redis", 0, 1),
        ("Deployment", "clepsydra-scheduler-worker", 1, 2),
        ("Deployment", "clepsydra-scheduler-beat", 1, 1),
        ("Deployment", "clepsydra-scheduler-autoscaler", 1, 1)}
    assert [c["name"] for c in data["cronJobs"]] == ["clepsydra-analytics-report"]
    assert [(lv["level"], lv["backlog"]) for lv in data["levels"]] == [(1, 0), (2, 1), (3, 4)]
    assert data["levelsError"] is None

    text = k8s("status")
    assert text.code == 0
    assert "clepsydra-scheduler-worker" in text.out and "1/2" in text.out
    assert "total backlog 5" in text.out and "someone-else" not in text.out


def test_status_still_shows_workloads_when_the_store_does_not_answer(
        cluster: KubeApi, k8s: K8sCli) -> None:
    result = k8s("status")
    assert result.code == 0
    assert "clepsydra-store" in result.out
    assert "levels: the store did not answer" in result.out and "503" in result.out


def test_scale_workers_patches_the_scale_and_reads_back(cluster: KubeApi, k8s: K8sCli) -> None:
    result = k8s("scale", "workers", "4", as_json=True)
    assert result.code == 0
    assert result.json() == {"deployment": "clepsydra-scheduler-worker",
                             "namespace": cluster.namespace, "replicas": 4, "autoscaled": True}
    stored = cluster.state.get("Deployment", cluster.namespace, "clepsydra-scheduler-worker")
    assert stored is not None and stored["spec"]["replicas"] == 4
    text = k8s("scale", "workers", "1")
    assert "scaled to 1" in text.out and "autoscaler" in text.out
    status = k8s("status", as_json=True).json()
    assert {w["name"]: w["replicas"] for w in status["workloads"]}[
        "clepsydra-scheduler-worker"] == 1


def test_scale_refuses_what_it_may_not_scale_and_negative_counts(
        cluster: KubeApi, k8s: K8sCli) -> None:
    assert k8s("scale", "store", "2").code == 2
    negative = k8s("scale", "workers", "-1")
    assert negative.code == 1 and "0 or more" in negative.err
    assert not [r for r in cluster.state.requests if r[0] == "PATCH"]


def test_report_now_creates_a_job_from_the_cronjob_as_kubectl_does(
        cluster: KubeApi, k8s: K8sCli) -> None:
    result = k8s("report-now", as_json=True)
    assert result.code == 0
    name = result.json()["job"]
    assert name.startswith("clepsydra-analytics-report-manual-")
    job = cluster.state.get("Job", cluster.namespace, name)
    assert job is not None
    cron = cluster.state.get("CronJob", cluster.namespace, "clepsydra-analytics-report")
    assert cron is not None
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "CronJob", "name": "clepsydra-analytics-report",
        "uid": cron["metadata"]["uid"], "controller": True}]
    assert job["metadata"]["labels"] == cron["spec"]["jobTemplate"]["metadata"]["labels"]
    assert job["spec"] == REPORT_JOB_SPEC

    named = k8s("report-now", "--name", "report-by-hand")
    assert named.code == 0 and "job report-by-hand started" in named.out
    again = k8s("report-now", "--name", "report-by-hand")
    assert again.code == 1 and "409" in again.err and "CLUSTER_ERROR" in again.err


def test_a_namespace_without_clepsydra_says_so(kube: KubeApi, k8s: K8sCli) -> None:
    result = k8s("-n", "elsewhere", "status")
    assert result.code == 0
    assert "namespace elsewhere" in result.out
    assert "no Clepsydra workloads" in result.out


def test_rbac_refusal_is_an_error_with_what_to_do(cluster: KubeApi, k8s: K8sCli) -> None:
    cluster.state.forbidden.add(("PATCH", r".*/scale"))
    result = k8s("scale", "workers", "3")
    assert result.code == 1
    assert "403" in result.err and "kubectl auth can-i" in result.err
    assert "Traceback" not in result.err


def test_missing_kubeconfig_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["k8s", "--kubeconfig", str(tmp_path / "none"), "status"], out=out, err=err)
    assert code == 1
    assert "no usable kubeconfig" in err.getvalue() and "Traceback" not in err.getvalue()


def test_an_api_server_that_does_not_answer_is_an_error_not_a_traceback(
        kube: KubeApi, tmp_path: Path) -> None:
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(kube.kubeconfig.read_text().replace(kube.url,
                                                        f"http://127.0.0.1:{free_port()}"))
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["k8s", "--kubeconfig", str(dead), "status"], out=out, err=err)
    assert code == 1
    assert "CLUSTER_ERROR" in err.getvalue() and "Connection refused" in err.getvalue()
    assert "Traceback" not in err.getvalue()
