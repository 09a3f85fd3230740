"""Policy over what every overlay renders (k8s/overlays/*): the rules of k8s/README.md,
checked on the objects a cluster would receive, not on the source files."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.conftest import ROOT, Obj, Rendered, pod_spec, tool
from tools import images

pytestmark = pytest.mark.k8s

KUBERNETES_VERSION = "1.37.0"
"""The newest version kubernetes-validate 1.37 ships schemas for."""

WORKLOADS = {
    ("StatefulSet", "clepsydra-store"),
    ("StatefulSet", "clepsydra-redis"),
    ("Deployment", "clepsydra-scheduler-beat"),
    ("Deployment", "clepsydra-scheduler-worker"),
    ("Deployment", "clepsydra-retry"),
    ("Deployment", "clepsydra-console"),
    ("Deployment", "clepsydra-gateway"),
    ("Deployment", "clepsydra-analytics-exporter"),
    ("CronJob", "clepsydra-analytics-report"),
}

CRD_KINDS = {"ScaledObject"}
"""Custom resources kubernetes-validate has no schema for (it warns and passes them)."""

def known_settings() -> set[str]:
    """Every CLEPSYDRA_* name the configuration tables document (docs/configuration.md, the
    services' and libraries' READMEs)."""
    names: set[str] = set()
    for readme in [ROOT / "docs" / "configuration.md", *ROOT.glob("services/*/README.md"),
                   *ROOT.glob("libs/*/README.md")]:
        names |= set(re.findall(r"\bCLEPSYDRA_[A-Z0-9_]*[A-Z0-9]\b", readme.read_text()))
    return names


def package_versions() -> set[str]:
    return {tomllib.loads(p.read_text())["project"]["version"]
            for p in [*ROOT.glob("services/*/pyproject.toml"), *ROOT.glob("libs/*/pyproject.toml")]}


def containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def is_clepsydra_image(image: str) -> bool:
    return image.startswith("clepsydra/")


def settings_data(rendered: Rendered) -> dict[str, str]:
    maps = [m for m in rendered.of_kind("ConfigMap")
            if m["metadata"]["name"].startswith("clepsydra-settings")]
    assert len(maps) == 1, f"{rendered.overlay}: one clepsydra-settings ConfigMap"
    return maps[0]["data"]  # type: ignore[no-any-return]


def container_env(rendered: Rendered, container: Obj) -> dict[str, str]:
    """The plain values a container sees (ConfigMap first, then its own env)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        env.update(next(m for m in rendered.of_kind("ConfigMap")
                        if m["metadata"]["name"] == name)["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "")
    return env


# ---- the build --------------------------------------------------------------------------------

def test_overlay_validates_strictly(rendered: Rendered, tmp_path: Path) -> None:
    path = tmp_path / f"{rendered.overlay}.yaml"
    path.write_text(rendered.text)
    result = subprocess.run([tool("kubernetes-validate"), "--strict", "--quiet",
                             "-k", KUBERNETES_VERSION, str(path)],
                            capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for line in output.splitlines():
        assert any(f"kind {kind} " in line for kind in CRD_KINDS), line


def test_every_workload_is_there_by_its_name(rendered: Rendered) -> None:
    present = {(o["kind"], o["metadata"]["name"]) for o in rendered.objects}
    assert present >= WORKLOADS


def test_every_object_carries_the_environment_label(rendered: Rendered) -> None:
    for obj in rendered.objects:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("clepsydra.io/environment") == rendered.overlay, obj["metadata"]["name"]
    for name, spec in rendered.pod_specs():
        del spec
        obj = next(o for o in rendered.objects
                   if f"{o['kind']}/{o['metadata']['name']}" == name)
        template = (obj["spec"]["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob"
                    else obj["spec"]["template"])
        assert template["metadata"]["labels"]["clepsydra.io/environment"] == rendered.overlay


# ---- pods -------------------------------------------------------------------------------------

def test_nothing_runs_as_root(rendered: Rendered) -> None:
    for name, spec in rendered.pod_specs():
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("runAsNonRoot") is True, name
        assert pod_sc.get("runAsUser", 1) != 0, name
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), name
        for c in containers(spec):
            sc = c.get("securityContext", {})
            where = f"{name} container {c['name']}"
            assert sc.get("runAsUser", 1) != 0 and sc.get("runAsNonRoot", True), where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert not sc.get("privileged"), where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where


def test_writable_mounts_only_where_data_lives(rendered: Rendered) -> None:
    for name, spec in rendered.pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in containers(spec):
            for mount in c.get("volumeMounts", []):
                if mount.get("readOnly"):
                    continue
                where = f"{name} {c['name']} {mount['mountPath']}"
                assert mount["mountPath"] == "/tmp" or mount["mountPath"] == "/data" \
                    or mount["mountPath"].startswith("/data/"), where
                volume = volumes.get(mount["name"])
                # a volume claim template, a claim, or scratch space
                assert volume is None or "emptyDir" in volume or \
                    "persistentVolumeClaim" in volume, where


def test_every_container_has_requests_and_limits(rendered: Rendered) -> None:
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert set(resources.get(kind, {})) >= {"cpu", "memory"}, \
                    f"{name} {c['name']} {kind}"


def test_every_long_running_container_has_probes(rendered: Rendered) -> None:
    for obj in rendered.objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "CronJob":
            # a run ends by itself; it is bounded by a deadline instead of probed
            assert obj["spec"]["jobTemplate"]["spec"].get("activeDeadlineSeconds", 0) > 0, name
            continue
        for c in spec["containers"]:
            assert "livenessProbe" in c and "readinessProbe" in c, f"{name} {c['name']}"


def test_images_are_pinned_to_the_package_version(rendered: Rendered) -> None:
    versions = package_versions()
    assert len(versions) == 1, f"the packages disagree on their version: {versions}"
    (version,) = versions
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            image = c["image"]
            repo, _, tag = image.rpartition(":")
            assert repo and tag and tag != "latest" and "/" not in tag, f"{name}: {image}"
            if is_clepsydra_image(image):
                assert tag == version, f"{name}: {image} is not {version}"


def test_clepsydra_images_are_the_ones_make_images_builds(rendered: Rendered) -> None:
    """The overlays reference the same image names and tags as
    `make images` builds (tools/images.py: clepsydra/<name>:<version>)."""
    built = {image.tag(images.version()) for image in images.IMAGES}
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            if is_clepsydra_image(c["image"]):
                assert c["image"] in built, f"{name}: {c['image']} is not built by make images"


def test_clepsydra_containers_use_only_known_settings(rendered: Rendered) -> None:
    known = known_settings()
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            if not is_clepsydra_image(c["image"]):
                continue
            env = container_env(rendered, c)
            values = " ".join(env.values())
            for var in env:
                if var.startswith("OTEL_"):
                    continue  # OpenTelemetry's own variables (README)
                if not var.startswith("CLEPSYDRA_"):
                    # a helper (downward API, Secret) that a setting's value is built from
                    assert f"$({var})" in values, f"{name}: {var} is neither a setting nor used"
                    continue
                assert var in known, f"{name}: {var} is not a documented setting"


def test_secrets_are_referenced_never_inlined(rendered: Rendered) -> None:
    assert not rendered.of_kind("Secret"), "a Secret in the manifests is a secret in git"
    for key, value in settings_data(rendered).items():
        if key.endswith("_FILE"):  # where a mounted Secret is (CLEPSYDRA_AUTH_TOKENS_FILE)
            assert value.startswith("/"), f"{key} is a path, not a value"
            continue
        assert not re.search(r"PASSWORD|TOKEN|SECRET", key), key
        assert "@" not in value, f"{key} carries credentials"
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            for item in c.get("env", []):
                if re.search(r"PASSWORD|AUTH|TOKEN", item["name"]):
                    assert "secretKeyRef" in item.get("valueFrom", {}), f"{name}: {item['name']}"


def test_settings_configmap_exists_for_every_reference(rendered: Rendered) -> None:
    maps = {m["metadata"]["name"] for m in rendered.of_kind("ConfigMap")}
    for name, spec in rendered.pod_specs():
        for c in containers(spec):
            for source in c.get("envFrom", []):
                assert source["configMapRef"]["name"] in maps, name
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in maps, name


# ---- the store, beat and the workers ----------------------------------------------------------

def test_store_is_a_pod_per_shard_with_its_own_commitlog_and_consumequeue_volumes(
        rendered: Rendered) -> None:
    store = rendered.get("StatefulSet", "clepsydra-store")
    claims = [t["metadata"]["name"] for t in store["spec"]["volumeClaimTemplates"]]
    assert claims == ["commitlog", "consumequeue"]
    (container,) = store["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = container_env(rendered, container)
    # each claim is mounted where the store's settings put that data
    assert mounts["commitlog"] == env["CLEPSYDRA_STORE_DIR"]
    assert mounts["consumequeue"] == env["CLEPSYDRA_STORE_CONSUMEQUEUE_DIR"]
    assert not env["CLEPSYDRA_STORE_CONSUMEQUEUE_DIR"].startswith(
        env["CLEPSYDRA_STORE_DIR"].rstrip("/") + "/")
    service = rendered.get("Service", "clepsydra-store")
    assert service["spec"]["clusterIP"] == "None"
    assert store["spec"]["serviceName"] == "clepsydra-store"
    pdb = rendered.get("PodDisruptionBudget", "clepsydra-store")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        store["spec"]["template"]["metadata"]["labels"].items()


def test_store_shards_are_the_statefulsets_replicas_found_through_the_headless_service(
        rendered: Rendered) -> None:  # DEC-store-shards
    store = rendered.get("StatefulSet", "clepsydra-store")
    (container,) = store["spec"]["template"]["spec"]["containers"]
    env = container_env(rendered, container)
    settings = settings_data(rendered)
    shards = int(settings["CLEPSYDRA_STORE_SHARDS"])
    assert store["spec"]["replicas"] == shards
    if rendered.overlay == "prod":
        assert shards == 3
    # a pod's shard id is its ordinal: its own name (clepsydra-store-2 is shard 2)
    (shard_id,) = [e for e in container["env"] if e["name"] == "CLEPSYDRA_STORE_SHARD_ID"]
    assert shard_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # its peers: each pod by ordinal behind the headless Service
    peers = env["CLEPSYDRA_STORE_PEERS"]
    assert peers.startswith(f"http://{store['metadata']['name']}-{{id}}."
                            f"{store['spec']['serviceName']}")
    assert rendered.get("Service", store["spec"]["serviceName"])["spec"]["clusterIP"] == "None"
    # own volumes per pod; a disruption takes at most one shard down at a time
    assert store["spec"]["volumeClaimTemplates"]
    assert rendered.get("PodDisruptionBudget", "clepsydra-store")["spec"]["maxUnavailable"] == 1
    assert "until topics can be sharded" not in (ROOT / "k8s/base/store.yaml").read_text()


def test_redis_keeps_an_append_only_file_on_its_volume(rendered: Rendered) -> None:
    redis = rendered.get("StatefulSet", "clepsydra-redis")
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    data_dir = args[args.index("--dir") + 1]
    claims = {t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]}
    assert any(m["mountPath"] == data_dir and m["name"] in claims
               for m in container["volumeMounts"])


def test_beat_runs_exactly_one_replica_recreated(rendered: Rendered) -> None:
    beat = rendered.get("Deployment", "clepsydra-scheduler-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"
    assert not [h for h in rendered.of_kind("HorizontalPodAutoscaler")
                if h["spec"]["scaleTargetRef"]["name"] == "clepsydra-scheduler-beat"]


def test_worker_scaling_has_exactly_one_driver(rendered: Rendered) -> None:
    scaled = [s for s in rendered.of_kind("ScaledObject")
              if s["spec"]["scaleTargetRef"]["name"] == "clepsydra-scheduler-worker"]
    autoscaler = [d for d in rendered.of_kind("Deployment")
                  if d["metadata"]["name"] == "clepsydra-scheduler-autoscaler"]
    assert len(scaled) + len(autoscaler) == 1
    assert not [h for h in rendered.of_kind("HorizontalPodAutoscaler")
                if h["spec"]["scaleTargetRef"]["name"] == "clepsydra-scheduler-worker"]


def test_autoscaler_may_only_read_and_scale_the_worker_deployment(rendered: Rendered) -> None:
    if not any(d["metadata"]["name"] == "clepsydra-scheduler-autoscaler"
               for d in rendered.of_kind("Deployment")):
        pytest.skip("KEDA scales the workers in this overlay")
    deployment = rendered.get("Deployment", "clepsydra-scheduler-autoscaler")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [b for b in rendered.of_kind("RoleBinding")
                if any(s["kind"] == "ServiceAccount" and s["name"] == account
                       for s in b["subjects"])]
    assert len(bindings) == 1
    assert bindings[0]["roleRef"]["kind"] == "Role"
    role = rendered.get("Role", bindings[0]["roleRef"]["name"])
    granted = {(group, resource, name, verb)
               for rule in role["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"]
               for name in rule.get("resourceNames", ["*"]) for verb in rule["verbs"]}
    worker = "clepsydra-scheduler-worker"
    assert granted == {("apps", "deployments", worker, "get"),
                       ("apps", "deployments/scale", worker, "get"),
                       ("apps", "deployments/scale", worker, "patch")}
    assert not rendered.of_kind("ClusterRoleBinding")
    # the account's token is mounted only where it is needed
    for name, spec in rendered.pod_specs():
        if spec.get("serviceAccountName") != account:
            assert spec.get("automountServiceAccountToken") is False, name


# ---- network policies -------------------------------------------------------------------------

def _selects(policy: Obj, labels: dict[str, Any]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return bool(wanted.items() <= labels.items())


POLICY_OVERLAYS = {"prod", "staging"}
"""Overlays that must have network policies on (optional in dev)."""


def test_network_policies_deny_by_default_and_open_each_service(rendered: Rendered) -> None:
    policies = rendered.of_kind("NetworkPolicy")
    if rendered.overlay in POLICY_OVERLAYS:
        assert policies, f"{rendered.overlay} runs without network policies"
    if not policies:
        return
    deny = [p for p in policies
            if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")]
    assert deny and "Ingress" in deny[0]["spec"]["policyTypes"]
    for service in rendered.of_kind("Service"):
        selector = service["spec"]["selector"]
        pods = [o for o in rendered.objects if pod_spec(o) is not None and o["kind"] != "CronJob"
                and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()]
        assert pods, f"Service {service['metadata']['name']} selects no workload"
        labels = pods[0]["spec"]["template"]["metadata"]["labels"]
        allowing = [p for p in policies if p["spec"].get("ingress") and _selects(p, labels)]
        assert allowing, f"nothing may reach {service['metadata']['name']}"
        open_ports = {port["port"] for p in allowing for rule in p["spec"]["ingress"]
                      for port in rule.get("ports", [])}
        service_ports = {port["port"] for port in service["spec"]["ports"]}
        assert open_ports & service_ports, service["metadata"]["name"]
        for policy in allowing:
            for rule in policy["spec"]["ingress"]:
                assert rule.get("from"), f"{policy['metadata']['name']} admits everyone"


TOKEN_USERS = {
    ("StatefulSet", "clepsydra-store"): None,
    ("Deployment", "clepsydra-retry"): "retry-token",
    ("Deployment", "clepsydra-gateway"): "gateway-token",
    ("Deployment", "clepsydra-scheduler-worker"): "scheduler-token",
    ("Deployment", "clepsydra-scheduler-beat"): "scheduler-token",
    ("Deployment", "clepsydra-analytics-exporter"): "analytics-token",
    ("CronJob", "clepsydra-analytics-report"): "analytics-token",
}


def test_prod_turns_access_control_on_with_tokens_from_a_secret(rendered: Rendered) -> None:
    """Access control on in the prod overlays (staging builds on prod),
    the tokens file a mounted Secret, each service's own token from that Secret; dev keeps it
    off like `make run`."""
    settings = settings_data(rendered)
    if rendered.overlay == "dev":
        assert settings.get("CLEPSYDRA_AUTH", "off") == "off"
        return
    assert settings["CLEPSYDRA_AUTH"] == "on"
    folder = settings["CLEPSYDRA_AUTH_TOKENS_FILE"].rpartition("/")[0]
    for (kind, name), key in TOKEN_USERS.items():
        spec = pod_spec(rendered.get(kind, name))
        assert spec is not None
        main = spec["containers"][0]
        env = {e["name"]: e for e in main.get("env", [])}
        if key is not None:
            ref = env["CLEPSYDRA_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("clepsydra-auth", key), name
        if name in ("clepsydra-store", "clepsydra-retry", "clepsydra-gateway"):
            mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
            assert mounts[folder].get("readOnly") and "subPath" not in mounts[folder], name
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert volumes[mounts[folder]["name"]]["secret"]["secretName"] == "clepsydra-auth"
