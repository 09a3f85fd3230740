"""The cluster's routes (DEC-store-shards; clepsydra_core.wire.cluster): membership and each
shard's share, a topic's route over every shard, and a shard's drain (its write permission
off, DEC-shard-drain). Any shard answers them; with one shard they describe that one store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Blueprint, Response, request

from clepsydra_core import validation
from clepsydra_core.errors import (
    ClepsydraError,
    NotFound,
    TopicNotFound,
    Unavailable,
    ValidationError,
)
from clepsydra_core.http import segment
from clepsydra_core.wire.cluster import (
    SHARDS_HEADER,
    UNREACHABLE,
    ClusterAnswer,
    RouteAnswer,
    RouteQueue,
    ShardStatus,
)
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.topics import TopicAnswer
from clepsydra_store.api.context import StoreContext, ctx
from clepsydra_store.api.web import json_response, trace_topic
from clepsydra_store.cluster import Cluster
from clepsydra_web import jsonio

bp = Blueprint("cluster", __name__)
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ShardsHeader:
    """WSGI: the cluster's size on every answer (``X-Clepsydra-Shards``), installed with more
    than one shard only: a client learns from any answer that it talks to a cluster (the
    produce fast path adds it to its own answers, the poller's included)."""

    def __init__(self, app: WsgiApp, shards: int) -> None:
        self.app = app
        self.header = (SHARDS_HEADER, str(shards))

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, self.header], exc_info)
        return self.app(environ, start)


def _cluster(c: StoreContext) -> Cluster:
    assert c.cluster is not None, "the store app always has its cluster"
    return c.cluster


def _auth() -> str | None:
    return request.headers.get("Authorization")


def _shares() -> bool:
    """``?shares=false``: who and where each shard is and whether it takes messages, without
    the pass over its data (a client's membership)."""
    raw = request.args.get("shares", "true")
    if raw not in ("true", "false"):
        raise ValidationError(f"query parameter shares={raw!r} must be true or false",
                              code="INVALID_REQUEST")
    return raw == "true"


@bp.get("/v1/cluster/self")
def self_status() -> Response:
    """This shard's status and share of the data."""
    return json_response(_cluster(ctx()).status(shares=_shares()).to_json())


@bp.get("/v1/cluster")
def members() -> Response:
    """Every shard's status, asked of each; a shard that does not answer is listed
    ``unreachable`` with the error."""
    cluster = _cluster(ctx())
    peers = cluster.peers
    auth = _auth()
    shares = _shares()
    answers = peers.each(lambda s: read_answer(ShardStatus, peers.call(
        s, "GET", "/v1/cluster/self", params={"shares": "true" if shares else "false"},
        authorization=auth)[1], "cluster status"))
    shards = [cluster.status(shares=shares)]
    for shard, answer in sorted(answers.items()):
        if isinstance(answer, ClepsydraError):
            shards.append(ShardStatus(shard, cluster.shape.url_of(shard), UNREACHABLE,
                                      error=f"{answer.code}: {answer.message}"))
        else:
            shards.append(answer)
    shards.sort(key=lambda s: s.id)
    return json_response(ClusterAnswer(cluster.shard_id, shards).to_json())


@bp.get("/v1/routes/<topic>")
def route(topic: str) -> Response:
    """Every (shard, queueId) of ``topic`` with its shard's address (DESIGN: "a route table
    that clients read"); 404 when no shard that answered has it."""
    validation.validate_topic_name(topic)
    trace_topic(topic)
    c = ctx()
    cluster = _cluster(c)
    peers = cluster.peers
    auth = _auth()

    def peer(shard: int) -> tuple[TopicAnswer | None, bool]:
        health = read_answer(StoreHealth, peers.call(shard, "GET", "/healthz")[1], "health")
        try:
            found = read_answer(TopicAnswer, peers.call(
                shard, "GET", f"/v1/topics/{segment(topic)}", authorization=auth)[1], "topic")
        except NotFound:
            found = None
        return found, health.writable

    answers = peers.each(peer)
    try:
        info = c.store.get_topic(topic)
        here: tuple[TopicAnswer | None, bool] | ClepsydraError = (TopicAnswer(
            info.name, info.system, []), cluster.accepting)
        local_queues = {q.queue_id: (q.min_offset, q.max_offset) for q in info.queues}
    except TopicNotFound:
        here, local_queues = (None, cluster.accepting), {}
    answers[cluster.shard_id] = here
    queues: list[RouteQueue] = []
    unreachable: list[int] = []
    missing: list[int] = []
    counts: list[int] = []
    for shard, answer in sorted(answers.items()):
        url = cluster.shape.url_of(shard)
        if isinstance(answer, ClepsydraError):
            unreachable.append(shard)
            continue
        found, writable = answer
        if found is None:
            missing.append(shard)
            continue
        bounds = (local_queues if shard == cluster.shard_id else
                  {q.queue_id: (q.min_offset, q.max_offset) for q in found.queues})
        counts.append(len(bounds))
        queues += [RouteQueue(shard, queue_id, url, writable, True, low, high)
                   for queue_id, (low, high) in sorted(bounds.items())]
    if not counts:
        if unreachable:
            raise Unavailable(f"no store shard that answered has topic {topic}; shard(s) "
                              f"{', '.join(map(str, unreachable))} did not answer")
        raise TopicNotFound(f"topic {topic} does not exist")
    guessed = max(counts)  # the queues of a shard that did not answer: as many as the others'
    for shard in unreachable:
        queues += [RouteQueue(shard, q, cluster.shape.url_of(shard), False, False)
                   for q in range(guessed)]
    queues.sort(key=lambda q: (q.shard, q.queue_id))
    return json_response(RouteAnswer(topic, queues, unreachable, missing).to_json())


def _set_draining(shard: str, draining: bool) -> Response:
    c = ctx()
    cluster = _cluster(c)
    target = jsonio.path_int(shard, "shard")
    if target == cluster.shard_id:
        c.require_writable()
        cluster.state.set_draining(draining)
        return json_response(cluster.status().to_json())
    if target not in cluster.peers.ids:
        raise NotFound(f"no store shard {target} in this cluster (shards 0.."
                       f"{cluster.shape.shards - 1})")
    action = "drain" if draining else "resume"
    _, body = cluster.peers.call(target, "POST", f"/v1/cluster/shards/{target}/{action}",
                                 json={}, authorization=_auth())
    return json_response(body)


@bp.post("/v1/cluster/shards/<shard>/drain")
def drain(shard: str) -> Response:
    """The shard refuses new messages (403 NO_PERMISSION: produce, send-back copies, DLQ
    resends) while its consumers, levels and timers drain; ``GET /v1/cluster`` says when it
    is ``removable``. Durable across restarts."""
    return _set_draining(shard, True)


@bp.post("/v1/cluster/shards/<shard>/resume")
def resume(shard: str) -> Response:
    """The shard takes new messages again."""
    return _set_draining(shard, False)

