"""The stack from its container images, end to end on a real Docker engine:
``make images`` (built once per run; a second build must reuse every layer), the stack up on
host networking with its own compose project, CLEPSYDRA_* ports and a short level table, then
messages through the containerised store and SDK consumers, a dead letter, and a kill -9 of the
store container's main process from the host (a crash, which ``restart: unless-stopped``
recovers, unlike ``docker kill``). Everything is torn down, volumes included.

Needs a Docker engine (docker/engine.sh starts Debian's dockerd as root); ``make test`` runs
this suite only when one can be had and says why when not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from clepsydra_client import (
    AdminClient,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
)
from tests.helpers import store_disk_quota
from tools.processes import REPO, free_port, wait_until

pytestmark = pytest.mark.images

PROJECT = "clepsydra-imagetest"
PYTHON_IMAGES = ("store", "scheduler-worker", "scheduler-beat", "retry", "console", "gateway")
ANALYTICS = (REPO / "services" / "analytics" / "pyproject.toml").is_file()
ANALYTICS_IMAGES = ("analytics-exporter", "analytics-spark") if ANALYTICS else ()
STACK_SERVICES = ("redis", "store", "retry", "console", "scheduler-worker", "scheduler-beat",
                  "gateway",
                  *(("analytics-exporter",) if ANALYTICS else ()))
TOPIC = "orders"
MAX_IMAGE_BYTES = 300_000_000
"""The Python service images stay under 300 MB (docker/README.md has each size). The
shared service image carries the kubernetes client the scheduler's autoscaler needs, without
its unused asyncio copy (service.Dockerfile). The analytics images are over it (pyarrow,
PySpark): the README says why."""
MAX_EXPORTER_BYTES = 400_000_000
"""The exporter image's own bound: the service image plus the part of pyarrow it writes Parquet
with (no numpy, no Arrow Flight: service.Dockerfile)."""


def images(*args: str, env: dict[str, str] | None = None,
           timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "tools.images", *args], cwd=REPO,
                          env=env or os.environ.copy(), capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    assert proc.returncode == 0, f"tools.images {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def image_ids() -> dict[str, str]:
    names = [*PYTHON_IMAGES, "redis", *ANALYTICS_IMAGES]
    return {n: docker("image", "inspect", "-f", "{{.Id}}", f"clepsydra/{n}:dev") for n in names}


def present_ids() -> dict[str, str]:
    """The ids of those of our images present now (none on a fresh machine)."""
    found = {}
    for name in [*PYTHON_IMAGES, "redis", *ANALYTICS_IMAGES]:
        proc = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}",
                               f"clepsydra/{name}:dev"], capture_output=True, text=True,
                              check=False)
        if proc.returncode == 0:
            found[name] = proc.stdout.strip()
    return found


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """Every image built (cold or from the cache); their ids. An image a rebuild replaced is
    removed by the build (it would be left untagged, filling the disk run after run)."""
    before = present_ids()
    proc = images("build", timeout_s=1500)
    sys.stdout.write(proc.stdout)
    ids = image_ids()
    for name, old in before.items():
        if old != ids[name]:
            gone = subprocess.run(["docker", "image", "inspect", old], capture_output=True,
                                  check=False).returncode != 0
            assert gone, f"the replaced clepsydra/{name} image {old[:19]} was left behind"
    return ids


@pytest.fixture(scope="module")
def stack(built: dict[str, str]) -> Iterator[dict[str, str]]:
    """The stack up on free ports; its URLs. Down with its volumes at the end."""
    ports = {name: free_port() for name in ("STORE", "RETRY", "SCHEDULER", "SCHEDULER_BEAT",
                                            "REDIS", "ANALYTICS", "CONSOLE", "GATEWAY",
                                            "GATEWAY_HEALTH")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEPSYDRA_")}
    env.update({
        "CLEPSYDRA_COMPOSE_PROJECT": PROJECT,
        "CLEPSYDRA_DELAY_LEVELS": "1s 2s 3s",
        "CLEPSYDRA_STORE_PORT": str(ports["STORE"]),
        "CLEPSYDRA_RETRY_PORT": str(ports["RETRY"]),
        "CLEPSYDRA_SCHEDULER_PORT": str(ports["SCHEDULER"]),
        "CLEPSYDRA_SCHEDULER_BEAT_PORT": str(ports["SCHEDULER_BEAT"]),
        "CLEPSYDRA_REDIS_PORT": str(ports["REDIS"]),
        "CLEPSYDRA_CONSOLE_PORT": str(ports["CONSOLE"]),
        "CLEPSYDRA_GATEWAY_PORT": str(ports["GATEWAY"]),
        "CLEPSYDRA_GATEWAY_HEALTH_PORT": str(ports["GATEWAY_HEALTH"]),
        # the exporter's /healthz (and its HEALTHCHECK) follow the API's port
        "CLEPSYDRA_ANALYTICS_PORT": str(ports["ANALYTICS"]),
        **store_disk_quota(),
    })
    images("down", "--volumes", env=env)  # a previous run's leftovers
    try:
        images("up", "--timeout-s", "180", env=env)
        yield {"store": f"http://127.0.0.1:{ports['STORE']}",
               "retry": f"http://127.0.0.1:{ports['RETRY']}",
               "scheduler": f"http://127.0.0.1:{ports['SCHEDULER']}",
               "project": PROJECT, **{f"env_{k}": v for k, v in env.items()
                                      if k.startswith("CLEPSYDRA_")}}
    finally:
        subprocess.run(["docker-compose", "-p", PROJECT, "-f", str(REPO / "docker/compose.yaml"),
                        "-f", str(REPO / "docker/compose.loopback.yaml"), "logs", "--tail=40"],
                       env=env, check=False, timeout=60)
        images("down", "--volumes", env=env)


def container(service: str) -> str:
    return docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}",
                  "--filter", f"label=com.docker.compose.service={service}")


def state(cid: str) -> dict[str, Any]:
    return dict(json.loads(docker("inspect", "-f", "{{json .State}}", cid)))


# ---- the images ---------------------------------------------------------------------------

@pytest.mark.timeout(1800)
def test_images_are_small_and_a_second_build_reuses_every_layer(built: dict[str, str]) -> None:
    for name in PYTHON_IMAGES:
        size = int(docker("image", "inspect", "-f", "{{.Size}}", f"clepsydra/{name}:dev"))
        assert size < MAX_IMAGE_BYTES, f"clepsydra/{name} is {size / 1e6:.0f} MB"
        version = docker("image", "inspect", "-f", "{{.Id}}", f"clepsydra/{name}:0.1.0")
        assert version == built[name]  # :<version> and :dev are one image
        config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}",
                                   f"clepsydra/{name}:dev"))
        assert config["User"] == "10001:10001" and config["Healthcheck"]["Test"]
    for name in ANALYTICS_IMAGES:  # over the size bound (pyarrow, PySpark): docker/README.md
        config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}",
                                   f"clepsydra/{name}:dev"))
        assert config["User"] == "10001:10001"
        if name == "analytics-exporter":  # a process that serves /healthz
            assert config["Healthcheck"]["Test"]
            size = int(docker("image", "inspect", "-f", "{{.Size}}", f"clepsydra/{name}:dev"))
            assert size < MAX_EXPORTER_BYTES, f"clepsydra/{name} is {size / 1e6:.0f} MB"
    images("build", timeout_s=900)
    assert image_ids() == built


# ---- the stack ----------------------------------------------------------------------------

@pytest.mark.timeout(600)
def test_messages_retries_and_dead_letters_through_the_containers(
        stack: dict[str, str]) -> None:
    for service in STACK_SERVICES:
        cid = container(service)
        assert state(cid)["Status"] == "running"
        assert state(cid)["Health"]["Status"] == "healthy", service  # its HEALTHCHECK
        config = json.loads(docker("inspect", "-f", "{{json .HostConfig}}", cid))
        assert config["ReadonlyRootfs"] is True and config["NetworkMode"] == "host"
        assert config["RestartPolicy"]["Name"] == "unless-stopped"
        assert docker("exec", cid, "id", "-u") == "10001"
    health = requests.get(stack["scheduler"] + "/healthz", timeout=10).json()
    assert [lv["level"] for lv in health["levels"]] == [1, 2, 3]  # CLEPSYDRA_DELAY_LEVELS

    admin = AdminClient(stack["store"], stack["retry"])
    admin.create_topic(TOPIC, 2)
    admin.set_group_settings("billing", retry_max_times=2)
    producer = Producer(stack["store"])
    sent = {f"now-{i}": producer.send(TOPIC, f"now-{i}") for i in range(20)}
    sent |= {f"later-{i}": producer.send(TOPIC, f"later-{i}", delay_level=2) for i in range(10)}
    sent["poison"] = producer.send(TOPIC, "poison")
    assert {r.topic for k, r in sent.items() if k.startswith("later")} == {"SCHEDULE_TOPIC_XXXX"}

    seen: dict[str, list[Message]] = {}
    lock = threading.Lock()

    def listener(messages: list[Message], _context: object) -> ConsumeResult:
        with lock:
            for m in messages:
                seen.setdefault(m.text, []).append(m)
        return (ConsumeResult.RECONSUME_LATER if messages[0].text == "poison"
                else ConsumeResult.SUCCESS)

    consumer = PushConsumer("billing", stack["store"], stack["retry"], consume_threads=4,
                            pull_idle_max_s=0.05, persist_interval_s=0.3,
                            consume_from_where=ConsumeFromWhere.FIRST)
    consumer.subscribe(TOPIC).register_concurrent(listener)
    consumer.start()
    try:
        wait_until(lambda: set(sent) - {"poison"} <= set(seen), 60,
                   what="every message consumed")
        wait_until(lambda: any(m.text == "poison" for m in admin.dlq_messages("billing")), 90,
                   what="poison dead-lettered")
    finally:
        consumer.shutdown()
        producer.close()
    for key, result in sent.items():
        first = seen[key][0]
        if key.startswith("later"):  # delivered after its 2 s, never before
            assert first.store_timestamp >= result.store_timestamp + 2_000
    assert [m.reconsume_times for m in seen["poison"]] == [0, 1, 2]  # then the DLQ
    [dead] = [m for m in admin.dlq_messages("billing") if m.text == "poison"]
    assert dead.reconsume_times >= 2
    admin.close()


@pytest.mark.timeout(600)
def test_store_killed_from_the_host_comes_back_with_every_acknowledged_message(
        stack: dict[str, str]) -> None:
    admin = AdminClient(stack["store"], stack["retry"])
    producer = Producer(stack["store"])
    acked = [producer.send(TOPIC, f"before-crash-{i}") for i in range(100)]
    delayed = [producer.send(TOPIC, f"due-after-restart-{i}", delay_level=3) for i in range(5)]
    store = container("store")
    before = state(store)
    os.kill(int(before["Pid"]), signal.SIGKILL)  # the main process, from the host: a crash

    def restarted() -> bool:
        now = state(store)
        return (now["Pid"] not in (0, before["Pid"]) and now["Running"] is True
                and (now.get("Health") or {}).get("Status") == "healthy")

    wait_until(restarted, 120, what="store container restarted on its own and healthy")
    assert int(docker("inspect", "-f", "{{.RestartCount}}", store)) >= 1
    texts = [m.text for m in pull_all(admin, stack["store"])]
    for result, i in zip(acked, range(100), strict=True):
        assert f"before-crash-{i}" in texts, f"acknowledged {result.msg_id} lost"
    assert texts.count("before-crash-0") == 1
    wait_until(lambda: sum(t.startswith("due-after-restart-")
                           for t in (m.text for m in pull_all(admin, stack["store"]))) == 5,
               60, what="the delayed messages delivered after the restart")
    assert len(delayed) == 5
    producer.close()
    admin.close()


def pull_all(admin: AdminClient, store_url: str) -> list[Message]:
    from clepsydra_client import PullConsumer

    consumer = PullConsumer(None, store_url)
    out: list[Message] = []
    try:
        for queue in consumer.queues(TOPIC):
            offset = 0
            while True:
                page = consumer.pull(queue, offset, 256)
                out += page.messages
                if not page.messages or page.next_offset >= page.max_offset:
                    break
                offset = page.next_offset
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(900)
def test_the_analytics_job_runs_once_over_the_export(stack: dict[str, str]) -> None:
    if not ANALYTICS:
        pytest.skip("services/analytics does not exist on this branch: its images are not "
                    "built (tools/images.py)")
    env = {**os.environ, **{k[4:]: v for k, v in stack.items() if k.startswith("env_")}}
    admin = AdminClient(stack["store"], stack["retry"])
    in_store = len(pull_all(admin, stack["store"]))
    dead = sum(1 for _ in admin.dlq_messages("billing"))
    admin.close()
    # -T: no pseudo-terminal, so the result JSON (stdout) stays apart from Spark's log (stderr)
    proc = subprocess.run(["docker-compose", "-p", PROJECT,
                           "-f", str(REPO / "docker/compose.yaml"),
                           "-f", str(REPO / "docker/compose.loopback.yaml"),
                           "--profile", "jobs", "run", "--rm", "-T", "analytics-report",
                           "python", "-m", "clepsydra_analytics", "jobs", "run",
                           "--format", "json"],
                          env=env, capture_output=True, text=True, timeout=800, check=False)
    causes = [line for line in (proc.stdout + proc.stderr).splitlines()
              if "Caused by" in line or "Error" in line or "Exception" in line]
    assert proc.returncode == 0, "\n".join(causes[:20]) + proc.stderr[-2000:]
    # over the exported data: the job container read what the exporter container
    # wrote from the store container, every message of the topic and the dead letter
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert in_store > 0
    assert sum(r["messages"] for r in result["jobs"]["throughput"]
               if r["topic"] == TOPIC) == in_store
    assert sum(r["count"] for r in result["jobs"]["dead-letters"]
               if r["group"] == "billing" and r["topic"] == TOPIC) == dead
