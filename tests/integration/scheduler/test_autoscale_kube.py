"""The worker autoscaler against the Kubernetes API: the real ``kubernetes`` client over real
HTTP, configured by a kubeconfig file, against the stand-in API server of
tests/fixtures/kube_api.py (no API server can run here; see its docstring), and a real store
process for the levels' load."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clepsydra_core.levels import DelayLevels
from clepsydra_scheduler.autoscale import ScalePolicy, ScaleReason
from clepsydra_scheduler.autoscaler import Autoscaler
from clepsydra_scheduler.handover_client import HttpHandoverApi
from clepsydra_scheduler.kube import DeploymentScale, KubeCallFailed, api_client
from tests.fixtures.kube_api import KubeApi, deployment, start_kube_api
from tests.fixtures.scheduler import STORE_LEVELS, TOPIC, StoreApi
from tools.processes import HttpService, free_port, wait_until

pytestmark = pytest.mark.integration

WORKER = "clepsydra-scheduler-worker"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeApi]:
    yield from start_kube_api(tmp_path)


@pytest.fixture
def worker_scale(kube: KubeApi) -> Iterator[DeploymentScale]:
    kube.state.put(deployment(kube.namespace, WORKER, replicas=1))
    api = api_client(kubeconfig=str(kube.kubeconfig))
    yield DeploymentScale(api, kube.namespace, WORKER)
    api.close()  # type: ignore[no-untyped-call]


def test_scale_is_read_and_patched_through_the_scale_subresource(
        kube: KubeApi, worker_scale: DeploymentScale) -> None:
    assert worker_scale.read_replicas() == 1
    assert worker_scale.set_replicas(3) == 3
    assert worker_scale.read_replicas() == 3
    stored = kube.state.get("Deployment", kube.namespace, WORKER)
    assert stored is not None and stored["spec"]["replicas"] == 3
    scale_path = f"/apis/apps/v1/namespaces/{kube.namespace}/deployments/{WORKER}/scale"
    assert [(m, p) for m, p, _ in kube.state.requests] == \
        [("GET", scale_path), ("PATCH", scale_path), ("GET", scale_path)]
    assert kube.state.requests[1][2] == "application/merge-patch+json"


def test_a_missing_deployment_is_a_kube_call_failed_naming_it(kube: KubeApi) -> None:
    api = api_client(kubeconfig=str(kube.kubeconfig))
    scale = DeploymentScale(api, kube.namespace, "no-such-workers")
    with pytest.raises(KubeCallFailed, match=r"no-such-workers.*404"):
        scale.read_replicas()
    api.close()  # type: ignore[no-untyped-call]


def test_rbac_refusal_is_a_kube_call_failed(kube: KubeApi,
                                           worker_scale: DeploymentScale) -> None:
    kube.state.forbidden.add(("PATCH", r".*/scale"))
    with pytest.raises(KubeCallFailed, match="403"):
        worker_scale.set_replicas(2)
    assert worker_scale.read_replicas() == 1


def test_kubeconfig_credentials_are_what_the_calls_carry(kube: KubeApi, tmp_path: Path) -> None:
    kube.state.put(deployment(kube.namespace, WORKER, replicas=1))
    wrong = tmp_path / "wrong-kubeconfig"
    wrong.write_text(kube.kubeconfig.read_text().replace("test-token", "stolen"))
    api = api_client(kubeconfig=str(wrong))
    with pytest.raises(KubeCallFailed, match="401"):
        DeploymentScale(api, kube.namespace, WORKER).read_replicas()
    api.close()  # type: ignore[no-untyped-call]


def test_no_credentials_at_all_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeCallFailed, match="no Kubernetes credentials"):
        api_client(kubeconfig=str(tmp_path / "missing"))


def test_due_backlog_in_the_store_scales_the_workers_up(
        tmp_path: Path, start_store: Callable[..., HttpService], kube: KubeApi,
        worker_scale: DeploymentScale) -> None:
    store = start_store(tmp_path / "store-home", env={"CLEPSYDRA_DELAY_LEVELS": STORE_LEVELS})
    api = StoreApi(store.url)
    api.create_topic(TOPIC, 1)
    # no scheduler runs: the 2,500 level-1 messages stay in the schedule topic and fall due
    api.produce(TOPIC, [{"body": f"m{i}", "delayLevel": 1} for i in range(2_500)])
    client = HttpHandoverApi(store.url)
    policy = ScalePolicy(min_replicas=1, max_replicas=5, cooldown_s=300.0,
                         backlog_per_worker=1_000, levels_per_worker=4, lag_target_ms=60_000)
    autoscaler = Autoscaler(policy, DelayLevels.parse(STORE_LEVELS), client, worker_scale,
                            now_s=lambda: 0.0)
    try:
        decision = autoscaler.step()
        assert decision is not None and decision.reason == ScaleReason.STEADY  # not due yet
        deadline = time.monotonic() + 30
        while decision is not None and decision.reason == ScaleReason.STEADY \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            decision = autoscaler.step()
    finally:
        client.close()
        api.close()
    assert decision is not None and decision.reason == ScaleReason.UP
    assert decision.needed == 3
    assert worker_scale.read_replicas() == 3


def test_autoscale_command_scales_from_the_store_and_stops_on_sigterm(
        tmp_path: Path, start_store: Callable[..., HttpService], kube: KubeApi) -> None:
    """``python -m clepsydra_scheduler autoscale`` as the pod runs it: its settings from the
    environment, the kubeconfig (KUBECONFIG) outside a pod, /healthz, exit 0 on SIGTERM."""
    store = start_store(tmp_path / "store-home", env={"CLEPSYDRA_DELAY_LEVELS": STORE_LEVELS})
    api = StoreApi(store.url)
    api.create_topic(TOPIC, 1)
    api.produce(TOPIC, [{"body": f"m{i}", "delayLevel": 1} for i in range(1_500)])
    api.close()
    kube.state.put(deployment(kube.namespace, WORKER, replicas=1))
    port = free_port()
    env = {"KUBECONFIG": str(kube.kubeconfig), "CLEPSYDRA_STORE_URL": store.url,
           "CLEPSYDRA_DELAY_LEVELS": STORE_LEVELS, "CLEPSYDRA_AUTOSCALE_NAMESPACE": kube.namespace,
           "CLEPSYDRA_AUTOSCALE_INTERVAL_S": "0.2", "CLEPSYDRA_AUTOSCALE_BACKLOG_PER_WORKER": "500",
           "CLEPSYDRA_AUTOSCALE_MAX": "5", "CLEPSYDRA_AUTOSCALE_PORT": str(port)}
    autoscaler = HttpService("autoscaler", [sys.executable, "-m", "clepsydra_scheduler",
                                            "autoscale"], port=port, env=env,
                             log_dir=tmp_path / "logs").start()
    try:
        def scaled() -> bool:
            obj = kube.state.get("Deployment", kube.namespace, WORKER)
            return obj is not None and obj["spec"]["replicas"] == 3

        wait_until(scaled, 30, what="the workers scaled to 3")
    finally:
        code = autoscaler.stop()
    assert code == 0, autoscaler.log()[-2000:]
    assert "autoscale workers replicas=1->3" in autoscaler.log()
