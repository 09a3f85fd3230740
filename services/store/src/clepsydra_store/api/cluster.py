"""The cluster's routes (DEC-store-shards; clepsydra_core.wire.cluster): membership and each
shard's share, a topic's route over every shard, and a shard's drain (its write permission
off, DEC-shard-drain). Any shard answers them; with one shard they describe that one store.
"""

from __future__ import annotations

from clepsydra_core import validation
from clepsydra_core.errors import (
    ClepsydraError,
    NotFound,
    TopicNotFound,
    Unavailable,
    ValidationError,
)
from clepsydra_core.runtime.http import segment
from clepsydra_core.wire.cluster import (
    UNREACHABLE,
    ClusterAnswer,
    RouteAnswer,
    RouteQueue,
    ShardStatus,
)
from clepsydra_core.wire.codec import read_answer
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.topics import TopicAnswer
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Reply, trace_topic
from clepsydra_store.cluster import Cluster
from clepsydra_web import jsonio


def _cluster(c: StoreContext) -> Cluster:
    assert c.cluster is not None, "the store app always has its cluster"
    return c.cluster


def _shares(call: Call) -> bool:
    """``?shares=false``: who and where each shard is and whether it takes messages, without
    the pass over its data (a client's membership)."""
    raw = call.query.get("shares", "true")
    if raw not in ("true", "false"):
        raise ValidationError(f"query parameter shares={raw!r} must be true or false",
                              code="INVALID_REQUEST")
    return raw == "true"


def self_status(c: StoreContext, call: Call) -> Reply:
    """GET /v1/cluster/self: this shard's status and share of the data."""
    return 200, _cluster(c).status(shares=_shares(call)).to_json()


def members(c: StoreContext, call: Call) -> Reply:
    """GET /v1/cluster: every shard's status, asked of each; a shard that does not answer is
    listed ``unreachable`` with the error."""
    cluster = _cluster(c)
    peers = cluster.peers
    auth = call.header("HTTP_AUTHORIZATION")
    shares = _shares(call)
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
    return 200, ClusterAnswer(cluster.shard_id, shards).to_json()


def route(c: StoreContext, call: Call) -> Reply:
    """GET /v1/routes/{topic}: every (shard, queueId) of the topic with its shard's address
    (DESIGN: "a route table that clients read"); 404 when no shard that answered has it."""
    topic = call.args["topic"]
    validation.validate_topic_name(topic)
    trace_topic(topic)
    cluster = _cluster(c)
    peers = cluster.peers
    auth = call.header("HTTP_AUTHORIZATION")

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
    return 200, RouteAnswer(topic, queues, unreachable, missing).to_json()


def _set_draining(c: StoreContext, call: Call, draining: bool) -> Reply:
    cluster = _cluster(c)
    target = jsonio.path_int(call.args["shard"], "shard")
    if target == cluster.shard_id:
        c.require_writable()
        cluster.state.set_draining(draining)
        return 200, cluster.status().to_json()
    if target not in cluster.peers.ids:
        raise NotFound(f"no store shard {target} in this cluster (shards 0.."
                       f"{cluster.shape.shards - 1})")
    action = "drain" if draining else "resume"
    _, body = cluster.peers.call(target, "POST", f"/v1/cluster/shards/{target}/{action}",
                                 json={}, authorization=call.header("HTTP_AUTHORIZATION"))
    return 200, body


def drain(c: StoreContext, call: Call) -> Reply:
    """POST /v1/cluster/shards/{shard}/drain: the shard refuses new messages (403
    NO_PERMISSION: produce, send-back copies, DLQ resends) while its consumers, levels and
    timers drain; ``GET /v1/cluster`` says when it is ``removable``. Durable across
    restarts."""
    return _set_draining(c, call, True)


def resume(c: StoreContext, call: Call) -> Reply:
    """POST /v1/cluster/shards/{shard}/resume: the shard takes new messages again."""
    return _set_draining(c, call, False)

