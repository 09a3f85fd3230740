"""Static checks of docker/: hadolint finds nothing at warning level in any Dockerfile, and the
compose files validate against the Compose specification's JSON schema (the copy vendored in
check-jsonschema: no network), and say what the images and the manifests agree on."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise AssertionError(f"{name} not found next to {sys.executable}: run `make setup` "
                             "(requirements/dev.txt pins it)")
    return str(path)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing_at_warning_level(dockerfile: Path) -> None:
    proc = subprocess.run([tool("hadolint"), "--failure-threshold", "warning", str(dockerfile)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_files_follow_the_compose_specification() -> None:
    files = [str(DOCKER / "compose.yaml"), str(DOCKER / "compose.loopback.yaml")]
    proc = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                           *files], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_service_target_runs_as_uid_10001_with_its_command() -> None:
    text = (DOCKER / "service.Dockerfile").read_text()
    targets = re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.M)
    assert targets == ["builder", "runtime-base", "runtime", "store", "scheduler-worker",
                       "scheduler-beat", "retry", "console", "gateway", "builder-analytics",
                       "analytics-exporter"]
    runtime = text[text.index("AS runtime-base"):text.index("AS store")]
    assert "USER 10001:10001" in runtime and "COPY --from=builder /opt/venv" in runtime
    assert "/wheels" not in runtime  # the wheelhouse stays in the builder
    commands = re.findall(r'^CMD \["python", "-m", (.+)\]$', text, flags=re.M)
    assert commands == ['"clepsydra_store"', '"clepsydra_scheduler", "worker"',
                        '"clepsydra_scheduler", "beat"', '"clepsydra_retry"',
                        '"clepsydra_console"', '"clepsydra_gateway"',
                        '"clepsydra_analytics", "export"']


def test_every_service_target_has_a_healthcheck() -> None:
    """Images: a HEALTHCHECK where the process serves one; every service target does,
    the analytics exporter included (its own /healthz)."""
    text = (DOCKER / "service.Dockerfile").read_text()
    stages = re.split(r"^(?=FROM )", text, flags=re.M)
    for stage in stages:
        if not re.search(r"^CMD ", stage, flags=re.M):
            continue
        target = re.match(r"FROM \S+ AS (\S+)", stage)
        assert target is not None
        assert re.search(r'^HEALTHCHECK .*\n\s+CMD \["python", "/opt/clepsydra/healthcheck\.py"',
                         stage, flags=re.M), f"target {target.group(1)} has no HEALTHCHECK"


def _healthcheck_port(argv: list[str], env: dict[str, str],
                      monkeypatch: pytest.MonkeyPatch) -> str:
    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("CLEPSYDRA_ANALYTICS_EXPORTER_PORT", "CLEPSYDRA_ANALYTICS_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return str(module.port(argv))


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "8085"),
    ({"CLEPSYDRA_ANALYTICS_PORT": "9001"}, "9001"),
    ({"CLEPSYDRA_ANALYTICS_PORT": "9001", "CLEPSYDRA_ANALYTICS_EXPORTER_PORT": "9002"}, "9002"),
])
def test_healthcheck_port_follows_the_services_own_settings(
        env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter listens on CLEPSYDRA_ANALYTICS_EXPORTER_PORT, else on the API's port
    (clepsydra_analytics.settings): the probe looks where it listens."""
    argv = ["CLEPSYDRA_ANALYTICS_EXPORTER_PORT", "CLEPSYDRA_ANALYTICS_PORT", "8085"]
    assert _healthcheck_port(argv, env, monkeypatch) == expected


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            pins[re.sub(r"[-_.]+", "-", name.strip().lower())] = version.strip()
    return pins


def test_every_analytics_dependency_is_pinned_for_the_images() -> None:
    # the images are reproducible from the pinned requirements -- the analytics
    # images' wheelhouse is made from requirements/images-analytics.txt, beside images.txt
    import tomllib

    pins = {**_pins(REPO / "requirements" / "images.txt"),
            **_pins(REPO / "requirements" / "images-analytics.txt")}
    project = tomllib.loads((REPO / "services" / "analytics" / "pyproject.toml").read_text())
    for spec in project["project"]["dependencies"]:
        match = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(==\s*([^\s;,]+))?", spec)
        assert match, spec
        name = re.sub(r"[-_.]+", "-", match.group(1).lower())
        if name.startswith("clepsydra-"):
            continue
        assert name in pins, f"{spec}: not pinned in requirements/images*.txt"
        if match.group(4):
            assert pins[name] == match.group(4), f"{spec}: the lock pins {pins[name]}"
    analytics_only = set(_pins(REPO / "requirements" / "images-analytics.txt"))
    assert not analytics_only & set(_pins(REPO / "requirements" / "images.txt")), \
        "a package pinned in both locks"
