"""The container images and the stack from them (docker/README.md):

    python -m tools.images build     engine, base images, wheelhouse, every image; sizes
    python -m tools.images up        the stack from docker/compose.yaml + compose.loopback.yaml,
                                     returns once every service is healthy
    python -m tools.images down      stops it (--volumes / VOLUMES=1: also removes the volumes)

``build`` needs no network past the host's package index: when ``python:3.11-slim`` is not
present it builds a local base from Debian's packages (docker/base.sh), and the images install
the project's wheels and their pinned dependencies (requirements/images.txt) from a wheelhouse
made here on the host (build/wheelhouse, the only part of the build context). The wheelhouse
is byte-stable: a wheel whose content did not change is not rewritten, so a second build of an
unchanged tree reuses every cached layer (same image ids). The analytics images are built only
when services/analytics exists.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
WHEELHOUSE = REPO / "build" / "wheelhouse"
LOCK = REPO / "requirements" / "images.txt"
ANALYTICS_LOCK = REPO / "requirements" / "images-analytics.txt"
PYTHON_IMAGE = "python:3.11-slim"
LOCAL_PYTHON_BASE = "clepsydra/base-python:bookworm"
LOCAL_JAVA_BASE = "clepsydra/base-java:bookworm"
LOCAL_REDIS_BASE = "clepsydra/base-redis:bookworm"
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01: the earliest a zip file can say
ANALYTICS = "services/analytics"


def _project_packages() -> tuple[str, ...]:
    """Every package of requirements/packages.txt (its ``-e`` lines, in order) but analytics,
    which has images of its own: one list of the repository's packages, not a second."""
    lines = (REPO / "requirements" / "packages.txt").read_text().splitlines()
    paths = [line.split(None, 1)[1].strip() for line in lines if line.startswith("-e ")]
    return tuple(p.split("[", 1)[0] for p in paths if p != ANALYTICS)


PACKAGES = _project_packages()
COMPOSE_FILES = ("compose.yaml", "compose.loopback.yaml")
COMPOSE_PROJECT = "clepsydra"
"""The compose project (volume and container names' prefix); CLEPSYDRA_COMPOSE_PROJECT
overrides it (the image tests use their own)."""


@dataclass(frozen=True, slots=True)
class Image:
    name: str
    dockerfile: str
    target: str | None
    analytics: bool = False

    def tag(self, version: str) -> str:
        return f"clepsydra/{self.name}:{version}"


IMAGES = (
    Image("store", "service.Dockerfile", "store"),
    Image("scheduler-worker", "service.Dockerfile", "scheduler-worker"),
    Image("scheduler-beat", "service.Dockerfile", "scheduler-beat"),
    Image("retry", "service.Dockerfile", "retry"),
    Image("console", "service.Dockerfile", "console"),
    Image("gateway", "service.Dockerfile", "gateway"),
    Image("analytics-exporter", "service.Dockerfile", "analytics-exporter", analytics=True),
    Image("analytics-spark", "spark.Dockerfile", None, analytics=True),
    Image("redis", "redis.Dockerfile", None),
)


class ImagesError(Exception):
    """A step failed: the message says which and why (exit 1)."""


def say(line: str) -> None:
    print(f"images: {line}", flush=True)


def run(argv: Sequence[str], *, env: dict[str, str] | None = None, quiet: bool = False,
        cwd: Path = REPO) -> str:
    proc = subprocess.run(list(argv), cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").splitlines()[-30:])
        raise ImagesError(f"{' '.join(argv[:4])} ... failed ({proc.returncode})"
                          + (f":\n{tail}" if tail else ""))
    return proc.stdout or ""


def version() -> str:
    with open(REPO / "libs" / "core" / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def analytics_present() -> bool:
    return (REPO / ANALYTICS / "pyproject.toml").is_file()


def docker_env() -> dict[str, str]:
    # the classic builder: the engine here has no buildx, and it needs no registry
    return {**os.environ, "DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}


def ensure_engine() -> None:
    run([str(DOCKER / "engine.sh")])


def image_present(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


def image_id(ref: str) -> str | None:
    proc = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", ref],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def remove_superseded(old_id: str) -> bool:
    """Remove an image a rebuild replaced (its tags moved to the new one), so repeated builds
    do not fill the disk with untagged images; one still tagged elsewhere or used by a
    container is kept (docker refuses without ``--force``)."""
    return subprocess.run(["docker", "image", "rm", old_id], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


def python_base() -> str:
    """python:3.11-slim when present, else the local Debian base (built once)."""
    override = os.environ.get("PYTHON_IMAGE")
    if override:
        return override
    if image_present(PYTHON_IMAGE):
        return PYTHON_IMAGE
    run([str(DOCKER / "base.sh"), "python", LOCAL_PYTHON_BASE])
    return LOCAL_PYTHON_BASE


# ---- the wheelhouse ----------------------------------------------------------------------

def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def _sync(built: Path, dest: Path) -> list[str]:
    """Move the wheels of ``built`` into ``dest``, leaving byte-identical ones untouched (so
    their mtime and the build cache stay), and drop wheels of ``dest`` not built again."""
    dest.mkdir(parents=True, exist_ok=True)
    changed = []
    names = {p.name for p in built.glob("*.whl")}
    for wheel in sorted(built.glob("*.whl")):
        target = dest / wheel.name
        if not (target.exists() and filecmp.cmp(wheel, target, shallow=False)):
            shutil.copyfile(wheel, target)
            changed.append(wheel.name)
    for stale in dest.glob("*.whl"):
        if stale.name not in names:
            stale.unlink()
            changed.append(f"-{stale.name}")
    return changed


def wheelhouse() -> None:
    """build/wheelhouse/deps: the pinned third-party wheels (pip wheel: a package published
    only as source is built here, for this machine's Python 3.11 and glibc, which the Debian
    bookworm base shares); build/wheelhouse/project: the project's own packages."""
    deps = WHEELHOUSE / "deps"
    stamp = deps / "images.txt"
    if not (stamp.exists() and filecmp.cmp(stamp, LOCK, shallow=False)):
        say(f"wheelhouse: the pinned dependencies ({LOCK.relative_to(REPO)})")
        with tempfile.TemporaryDirectory() as tmp:
            run(_pip("wheel", "-q", "--no-deps", "-r", str(LOCK), "-w", tmp),
                env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}, quiet=True)
            _sync(Path(tmp), deps)
        shutil.copyfile(LOCK, stamp)
    with tempfile.TemporaryDirectory() as tmp:
        run(_pip("wheel", "-q", "--no-deps", *[str(REPO / p) for p in PACKAGES], "-w", tmp),
            env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}, quiet=True)
        changed = _sync(Path(tmp), WHEELHOUSE / "project")
    say("wheelhouse: project wheels " + (", ".join(changed) if changed else "unchanged"))
    if analytics_present():
        analytics_wheels()
    else:  # out of the build context (PySpark alone is ~460 MB)
        for sub in ("analytics", "analytics-deps"):
            shutil.rmtree(WHEELHOUSE / sub, ignore_errors=True)


def analytics_wheels() -> None:
    """build/wheelhouse/analytics: the analytics package's wheel (rebuilt like the others);
    build/wheelhouse/analytics-deps: its pinned dependencies beyond requirements/images.txt
    (requirements/images-analytics.txt), made again only when that lock changes. Kept apart
    from project/ so the analytics package never changes a layer of the service images."""
    sde = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
    with tempfile.TemporaryDirectory() as tmp:
        run(_pip("wheel", "-q", "--no-deps", str(REPO / ANALYTICS), "-w", tmp), env=sde,
            quiet=True)
        changed = _sync(Path(tmp), WHEELHOUSE / "analytics")
    say("wheelhouse: analytics wheel " + (", ".join(changed) if changed else "unchanged"))
    dest = WHEELHOUSE / "analytics-deps"
    stamp = dest / ANALYTICS_LOCK.name
    if stamp.exists() and filecmp.cmp(stamp, ANALYTICS_LOCK, shallow=False):
        return
    say(f"wheelhouse: the analytics dependencies ({ANALYTICS_LOCK.relative_to(REPO)})")
    with tempfile.TemporaryDirectory() as tmp:
        run(_pip("wheel", "-q", "--no-deps", "-r", str(ANALYTICS_LOCK), "-w", tmp), env=sde,
            quiet=True)
        _sync(Path(tmp), dest)
    for old in dest.glob("*.toml"):  # the stamp of the unpinned way, before the lock
        old.unlink()
    shutil.copyfile(ANALYTICS_LOCK, stamp)


# ---- build -------------------------------------------------------------------------------

def build() -> int:
    started = time.monotonic()
    ensure_engine()
    base = python_base()
    wheelhouse()
    tag = version()
    images = [i for i in IMAGES if not i.analytics or analytics_present()]
    if not analytics_present():
        say(f"{ANALYTICS} does not exist on this branch: analytics-exporter and "
            "analytics-spark are not built")
    for image in images:
        args = ["docker", "build", "-q", "--network", "none", "-f",
                str(DOCKER / image.dockerfile), "-t", image.tag(tag), "-t", image.tag("dev")]
        if image.dockerfile == "spark.Dockerfile":
            run([str(DOCKER / "base.sh"), "java", LOCAL_JAVA_BASE])
            args += ["--build-arg", f"JAVA_IMAGE={LOCAL_JAVA_BASE}"]
        elif image.dockerfile == "redis.Dockerfile":
            run([str(DOCKER / "base.sh"), "redis", LOCAL_REDIS_BASE])
            args += ["--build-arg", f"REDIS_BASE_IMAGE={LOCAL_REDIS_BASE}"]
        else:
            args += ["--build-arg", f"PYTHON_IMAGE={base}"]
        if image.target:
            args += ["--target", image.target]
        before = image_id(image.tag("dev"))
        built = run([*args, str(REPO)], env=docker_env(), quiet=True).strip().splitlines()[-1]
        say(f"built {image.tag(tag)} (+ :dev) {built[:19]}")
        if before and before != built and remove_superseded(before):
            say(f"removed the image it replaced, {before[:19]}")
    print(sizes(images, tag), flush=True)
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0


def sizes(images: Sequence[Image], tag: str) -> str:
    rows = []
    for image in images:
        raw = run(["docker", "image", "inspect", "-f", "{{.Size}} {{.Id}}", image.tag(tag)],
                  quiet=True).split()
        rows.append(f"  {image.tag(tag):<40} {int(raw[0]) / 1e6:7.1f} MB  {raw[1][7:19]}")
    return "\n".join(["images:", *rows])


# ---- the stack ---------------------------------------------------------------------------

def compose(*args: str) -> list[str]:
    files = [a for f in COMPOSE_FILES for a in ("-f", str(DOCKER / f))]
    project = os.environ.get("CLEPSYDRA_COMPOSE_PROJECT") or COMPOSE_PROJECT
    return ["docker-compose", "-p", project, *files, *args]


STACK = ("redis", "store", "retry", "console", "scheduler-worker", "scheduler-beat", "gateway")
"""The services `up` starts (the profiles `jobs` and `telemetry` stay off)."""


def services() -> list[str]:
    """The stack; the analytics exporter too when its image can be built."""
    return [*STACK, "analytics-exporter"] if analytics_present() else list(STACK)


def up(timeout_s: float) -> int:
    ensure_engine()
    names = services()
    run(compose("up", "-d", "--no-build", *names), env=docker_env())
    deadline = time.monotonic() + timeout_s
    while True:
        states = {name: health(name) for name in names}
        if all(s in ("healthy", "running") for s in states.values()):
            say("every service is healthy: " + ", ".join(names))
            return 0
        if time.monotonic() > deadline:
            run(compose("ps"), env=docker_env())
            raise ImagesError(f"not healthy after {timeout_s:.0f} s: " + ", ".join(
                f"{n}={s}" for n, s in states.items() if s not in ("healthy", "running")))
        time.sleep(1.0)


def container_id(service: str) -> str:
    return run(compose("ps", "-q", service), env=docker_env(), quiet=True).strip()


def health(service: str) -> str:
    cid = container_id(service)
    if not cid:
        return "absent"
    # a container without a HEALTHCHECK counts once it runs
    return run(["docker", "inspect", "-f",
                "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                cid], quiet=True).strip()


def down(volumes: bool) -> int:
    if subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      check=False).returncode != 0:
        say("no Docker engine answers: nothing to stop")
        return 0
    run(compose("--profile", "telemetry", "down", "--remove-orphans",
                *(["--volumes"] if volumes else [])), env=docker_env())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.images", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="engine, bases, wheelhouse, every image; print sizes")
    sub.add_parser("wheelhouse", help="only build/wheelhouse")
    p_up = sub.add_parser("up", help="start the stack; return once every service is healthy")
    p_up.add_argument("--timeout-s", type=float, default=180.0)
    p_down = sub.add_parser("down", help="stop the stack")
    p_down.add_argument("--volumes", action="store_true",
                        default=os.environ.get("VOLUMES", "") not in ("", "0"),
                        help="also remove the named volumes (or VOLUMES=1)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return build()
        if args.command == "wheelhouse":
            wheelhouse()
            return 0
        if args.command == "up":
            return up(args.timeout_s)
        return down(args.volumes)
    except ImagesError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
