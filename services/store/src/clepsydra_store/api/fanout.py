"""The existing routes a shard answers for the whole cluster (DEC-store-shards): each handler
keeps its one-store behaviour and one of these decorators around it (inside the envelope, so on
every way in), which does nothing with one
shard or on a request another shard forwarded (``X-Clepsydra-Scope: local``):

- :func:`everywhere` - a topic's create, update and delete, a group's settings: applied here,
  then on every peer at once (tried three times each), the answer's ``shards`` saying which
  applied it. A request this shard refuses as malformed or forbidden (4xx other than 404) is
  refused the same everywhere: it goes no further.
- :func:`looked_up` - a look-up by msgId or by key: an offsetMsgId names its shard
  (DEC-shard-in-msgid) and only that shard is asked; a message's unique id or a key is asked of
  every shard and the copies merged, oldest first, each with its ``shard``; shards that did not
  answer are listed (``unreachable``), and when none that answered has the message, the answer
  is 503 naming them rather than a 404 that might be wrong.
- :func:`changed` - a cancel or reschedule: by offsetMsgId on its shard; by a unique id on
  whichever shards hold a pending copy; by key on every shard, the msgIds merged.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any
from urllib.parse import quote

import orjson

from clepsydra_core.errors import AlreadyDelivered, ClepsydraError, NotFound, Unavailable
from clepsydra_core.msgid import shard_of_offset_msg_id
from clepsydra_core.runtime.http import Json
from clepsydra_core.wire.cluster import LOCAL, SCOPE_HEADER, ShardFailure, ShardsApplied
from clepsydra_store.api.context import StoreContext
from clepsydra_store.api.envelope import Call, Handler, Reply
from clepsydra_store.cluster import Cluster

Answer = tuple[int, Json]
AfterLocal = Callable[[Cluster, Call, Json | None], None]
_SCOPE = "HTTP_" + SCOPE_HEADER.upper().replace("-", "_")
"""The scope header's WSGI name."""


def _cluster(c: StoreContext, call: Call) -> Cluster | None:
    """The cluster this request fans out over; None with one shard or a forwarded request."""
    cluster = c.cluster
    if cluster is None or not cluster.clustered or call.header(_SCOPE) == LOCAL:
        return None
    return cluster


def _target(call: Call) -> str:
    """The request's path and query as the client sent them (percent-encoding kept)."""
    environ = call.environ
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        return str(raw)
    query = environ.get("QUERY_STRING") or ""
    path = environ.get("PATH_INFO") or ""
    return quote(path) + (f"?{query}" if query else "")


def _payload(call: Call) -> Any:
    """The request body (kept for the peers: the handler reads it too) as JSON, None if
    empty."""
    if call.environ.get("REQUEST_METHOD") in ("GET", "DELETE") and \
            not call.environ.get("CONTENT_LENGTH"):
        return None
    raw = call.body()
    return orjson.loads(raw) if raw else None


def _forwarder(cluster: Cluster, call: Call, payload: Any) -> Callable[[int], Answer]:
    """The request as each peer gets it (read here: the peers are called on other
    threads)."""
    method, target = call.environ.get("REQUEST_METHOD", "GET"), _target(call)
    authorization = call.header("HTTP_AUTHORIZATION")

    def forward(shard: int) -> Answer:
        return cluster.peers.call(shard, method, target, json=payload,
                                  authorization=authorization)
    return forward


def _local(handler: Handler, c: StoreContext, call: Call) -> Answer:
    status, value = handler(c, call)
    return status, value or {}


def _failure(shard: int, exc: ClepsydraError) -> ShardFailure:
    return ShardFailure(shard, exc.code, exc.message)


# ---- everywhere ----------------------------------------------------------------------------

def everywhere(after_local: AfterLocal | None = None) -> Callable[[Handler], Handler]:
    """Apply the handler on every shard (module docstring). ``after_local(cluster, call,
    answer)`` runs on each shard once the handler answered there (its JSON) or found nothing
    to act on (None): the topic tombstones of cluster/state.py, set under its ``changing``."""
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def wrapper(c: StoreContext, call: Call) -> Reply:
            cluster = _cluster(c, call)
            if cluster is None:
                return _alone(c, call, handler, after_local)
            payload = _payload(call)
            local: Answer | None = None
            local_error: ClepsydraError | None = None
            with _changing(cluster, after_local):
                try:
                    local = _local(handler, c, call)
                except ClepsydraError as exc:
                    if not isinstance(exc, NotFound):
                        raise  # refused as asked: refused the same on every shard
                    local_error = exc
                if after_local is not None:
                    after_local(cluster, call, None if local is None else local[1])
            peers = cluster.peers
            answers = peers.each(peers.retried(_forwarder(cluster, call, payload)))
            applied = [cluster.shard_id] if local is not None else []
            failed: list[ShardFailure] = []
            for shard, answer in sorted(answers.items()):
                if isinstance(answer, ClepsydraError):
                    failed.append(_failure(shard, answer))
                else:
                    applied.append(shard)
                    local = local or answer
            if local is None:
                assert local_error is not None
                raise local_error
            status, body = local
            shards = ShardsApplied(sorted(applied), failed)
            return status, {**body, "shards": shards.to_json()}
        return wrapper
    return wrap


def _alone(c: StoreContext, call: Call, handler: Handler,
           after_local: AfterLocal | None) -> Reply:
    """The handler on this shard alone (one shard, or a request a peer forwarded)."""
    if c.cluster is None or after_local is None:
        return handler(c, call)
    with _changing(c.cluster, after_local):
        try:
            status, value = handler(c, call)
        except NotFound:
            after_local(c.cluster, call, None)
            raise
        after_local(c.cluster, call, value if status < 300 else None)
    return status, value


def _changing(cluster: Cluster, after_local: AfterLocal | None) -> AbstractContextManager[Any]:
    """A change with a tombstone to set or forget (a topic's create or delete) holds the
    shard's ``ClusterState.changing`` from the change to its tombstone: the start-up sync
    (cluster/sync.py) takes no topic in between."""
    return nullcontext() if after_local is None else cluster.state.changing


# ---- look-ups ------------------------------------------------------------------------------

def _copy_order(message: Json) -> tuple[int, int, int]:
    return (int(message.get("storeTimestamp") or 0), int(message.get("shard") or 0),
            int(message.get("commitLogOffset") or 0))


def _with_shard(body: Json, shard: int) -> list[Json]:
    return [{**m, "shard": shard} for m in body.get("messages") or []]


def _unreachable(shards: list[int]) -> Unavailable:
    return Unavailable(f"store shard(s) {', '.join(map(str, shards))} did not answer; the "
                       "shards that did hold nothing that matches")


def looked_up(handler: Handler) -> Handler:
    """Answer a look-up for every shard (module docstring)."""
    @functools.wraps(handler)
    def wrapper(c: StoreContext, call: Call) -> Reply:
        cluster = _cluster(c, call)
        if cluster is None:
            return handler(c, call)
        done, unreachable, errors = _by_outcome(_ask_holder(cluster, handler, c, call),
                                                NotFound)
        messages = [m for shard, (_, body) in done for m in _with_shard(body, shard)]
        if not messages:
            if unreachable:
                raise _unreachable(unreachable)
            if errors and (not done or "msgId" in call.args):
                raise errors[0]
        messages.sort(key=_copy_order)
        most = call.query.get("max")
        if most is not None and most.isdigit() and len(messages) > int(most):
            messages = messages[-int(most):]  # the newest, oldest first (as one shard answers)
        body: Json = {"messages": messages}
        if unreachable:
            body["unreachable"] = unreachable
        return 200, body
    return wrapper


def _ask_holder(cluster: Cluster, handler: Handler, c: StoreContext, call: Call,
                ) -> dict[int, Answer | ClepsydraError]:
    """The handler on the shard the request's offsetMsgId names (DEC-shard-in-msgid), else - a
    unique msgId, a key, an id of no shard of this cluster - on every shard. A unique msgId
    has the offsetMsgId's shape (its producer's pid where an offsetMsgId has the shard): when
    the shard it seems to name holds nothing (or does not answer), the others are asked too."""
    named = shard_of_offset_msg_id(call.args.get("msgId") or "")
    if named is None or named not in (cluster.shard_id, *cluster.peers.ids):
        return _ask(cluster, handler, c, call, None)
    answers = _ask(cluster, handler, c, call, [named])
    if any(map(_holds, answers.values())):
        return answers
    others = [s for s in (cluster.shard_id, *cluster.peers.ids) if s != named]
    return {**_ask(cluster, handler, c, call, others), **answers}


def _holds(answer: Answer | ClepsydraError) -> bool:
    """An answer with a message in it (not a refusal, not an empty list of copies)."""
    if isinstance(answer, ClepsydraError):
        return False
    body = answer[1]
    return not (isinstance(body, dict) and body.get("messages") == [])


def _ask(cluster: Cluster, handler: Handler, c: StoreContext, call: Call,
         only: list[int] | None) -> dict[int, Answer | ClepsydraError]:
    """The handler here and the same request on the peers (or only on ``only``)."""
    payload = _payload(call)
    peers = [s for s in cluster.peers.ids if only is None or s in only]
    out: dict[int, Answer | ClepsydraError] = {}
    if only is None or cluster.shard_id in only:
        try:
            out[cluster.shard_id] = _local(handler, c, call)
        except ClepsydraError as exc:
            out[cluster.shard_id] = exc
    out.update(cluster.peers.each(_forwarder(cluster, call, payload), peers))
    return out


def _by_outcome(answers: dict[int, Answer | ClepsydraError], tolerated: Any,
                ) -> tuple[list[tuple[int, Answer]], list[int], list[ClepsydraError]]:
    """The shards' answers by shard id: those that answered, those that did not answer, and
    the refusals of the kinds ``tolerated`` (a class or a union of them); any other refusal is
    raised, as the shard gave it."""
    done: list[tuple[int, Answer]] = []
    unreachable: list[int] = []
    errors: list[ClepsydraError] = []
    for shard, answer in sorted(answers.items()):
        if isinstance(answer, Unavailable):
            unreachable.append(shard)
        elif isinstance(answer, ClepsydraError):
            if not isinstance(answer, tolerated):
                raise answer
            errors.append(answer)
        else:
            done.append((shard, answer))
    return done, unreachable, errors


def found_where(handler: Handler) -> Handler:
    """A handler about one message answered by the shard that holds it: the shard its
    offsetMsgId names, else the first (by id) of those that answer with it (a message's copies
    stay on its shard, DEC-store-shards); 503 naming the shards that did not answer when none
    that did has it."""
    @functools.wraps(handler)
    def wrapper(c: StoreContext, call: Call) -> Reply:
        cluster = _cluster(c, call)
        if cluster is None:
            return handler(c, call)
        answers = _ask_holder(cluster, handler, c, call)
        unreachable = [s for s, a in sorted(answers.items()) if isinstance(a, Unavailable)]
        errors = [a for _, a in sorted(answers.items()) if isinstance(a, ClepsydraError)]
        for _, answer in sorted(answers.items()):
            if not isinstance(answer, ClepsydraError):
                return answer
        if unreachable:
            raise _unreachable(unreachable)
        raise next((e for e in errors if not isinstance(e, NotFound)), errors[0])
    return wrapper


# ---- cancel and reschedule -------------------------------------------------------------------

def changed(handler: Handler) -> Handler:
    """A cancel or reschedule for every shard (module docstring)."""
    @functools.wraps(handler)
    def wrapper(c: StoreContext, call: Call) -> Reply:
        cluster = _cluster(c, call)
        if cluster is None:
            return handler(c, call)
        msg_id = call.args.get("msgId")
        done, unreachable, errors = _by_outcome(_ask_holder(cluster, handler, c, call),
                                                NotFound | AlreadyDelivered)
        if not done:
            if unreachable:
                raise _unreachable(unreachable)
            raise next((e for e in errors if isinstance(e, AlreadyDelivered)), errors[0])
        status, body = done[0][1]
        if msg_id is None:  # by key: every shard's msgIds
            ids: list[str] = []
            for _, (_, one) in done:
                ids += [i for i in one.get("msgIds") or [] if i not in ids]
            body = {**body, "msgIds": ids}
            if unreachable:
                body["unreachable"] = unreachable
        return status, body
    return wrapper



def now_ms() -> int:
    return time.time_ns() // 1_000_000
