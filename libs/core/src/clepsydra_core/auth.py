"""Access control (docs/access-control.md): who a bearer token is, and what its role lets it
do. Pure: no I/O here (the tokens file is ``auth_tokens``, the HTTP edge is
``clepsydra_web.auth``).

A token is a high-entropy random string (``clp_`` + 256 random bits) shown once, when it is
created; only its SHA-256 is kept. A fast unsalted hash is enough because the token is not a
password: with 256 random bits there is nothing to guess from a dictionary and nothing to gain
from a salt, and a slow hash (bcrypt, scrypt) would cost milliseconds on every request of the
produce path, where the lookup is one dict access by digest.

Roles (docs/access-control.md):

- ``producer``: send to topics matching its topic patterns;
- ``consumer``: pull topics matching its topic patterns, and for groups matching its group
  patterns: commit offsets, heartbeat, read the group, send back (retry service) and, when
  the send-back call fails, send to ``%RETRY%<group>`` itself (SPEC R9, R12);
- ``admin``: everything a person operates - topics, group settings, offsets, DLQ resend and
  purge, reports, tokens - but no system topic writes and no internal route;
- ``scheduler``: the store's ``/v1/schedule/*`` hand-over routes;
- ``retry``: the store's internal copy routes, writes into ``%RETRY%*``/``%DLQ%*``, group
  settings and the reads its DLQ toolkit needs;
- ``analytics``: the exporter's reads (topics, pulls, every group's offsets, the schedule
  levels) and its own export group's commits;
- ``viewer``: every read a person looks at - topics, pulls, message look-ups, groups, DLQs
  and their audit, the schedule and timers, reports - and nothing that changes anything: no
  send, no commit, no settings, no resend or purge, no report run, no token (the console's
  read-only users, DEC-console-viewer-role).

Patterns are shell-style (``orders-*``, ``*``; :func:`fnmatch.fnmatchcase`) and scope only
``producer`` and ``consumer``; the other roles are not scoped. System topics
(``clepsydra_core.naming.is_system_topic``) are written only by the roles that own them, whatever
a pattern says.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from dataclasses import dataclass
from fnmatch import fnmatchcase

from clepsydra_core import naming

TOKEN_PREFIX = "clp_"
"""Every token starts with it (easy to spot in a leaked file, in a secret scanner's rules)."""
TOKEN_BYTES = 32
"""256 random bits per token."""
BOOTSTRAP_ADMIN = "bootstrap-admin"
"""The principal name of CLEPSYDRA_AUTH_ADMIN_TOKEN."""


class Role(enum.StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    ADMIN = "admin"
    SCHEDULER = "scheduler"
    RETRY = "retry"
    ANALYTICS = "analytics"
    VIEWER = "viewer"


SCOPED_ROLES = frozenset({Role.PRODUCER, Role.CONSUMER})
"""The roles whose topic and group patterns limit what they reach."""
SERVICE_ROLES = frozenset({Role.SCHEDULER, Role.RETRY, Role.ANALYTICS})


class Action(enum.Enum):
    """What a route does, and what its resource is (a topic, a group, or nothing).
    The value is how a 403 says it: ``role producer may not <value> <resource>``."""

    TOPIC_READ = "read topic metadata"
    SEND = "write topic"
    PULL = "read topic"
    MESSAGE_READ = "look up messages"
    TOPIC_ADMIN = "manage topic"
    GROUP_READ = "read group"
    GROUP_CONSUME = "consume as group"
    GROUP_ADMIN = "change the settings of group"
    DLQ_READ = "read the DLQ of group"
    DLQ_ADMIN = "resend or purge the DLQ of group"
    SCHEDULE_READ = "read the schedule levels"
    SCHEDULE_HANDOVER = "hand scheduled messages over"
    INTERNAL_COPY = "use the internal copy routes"
    REPORTS = "read reports"
    REPORT_RUN = "run reports"
    AUTH_ADMIN = "manage tokens"
    CLUSTER_ADMIN = "drain or resume a store shard"


_ROLE_ACTIONS: dict[Role, frozenset[Action]] = {
    Role.PRODUCER: frozenset({Action.TOPIC_READ, Action.SEND}),
    Role.CONSUMER: frozenset({Action.TOPIC_READ, Action.PULL, Action.GROUP_READ,
                              Action.GROUP_CONSUME, Action.SEND}),
    Role.ADMIN: frozenset(Action) - {Action.SCHEDULE_HANDOVER, Action.INTERNAL_COPY},
    Role.SCHEDULER: frozenset({Action.TOPIC_READ, Action.SCHEDULE_READ,
                               Action.SCHEDULE_HANDOVER}),
    Role.RETRY: frozenset({Action.TOPIC_READ, Action.SEND, Action.PULL, Action.MESSAGE_READ,
                           Action.GROUP_READ, Action.GROUP_ADMIN, Action.INTERNAL_COPY}),
    Role.ANALYTICS: frozenset({Action.TOPIC_READ, Action.PULL, Action.GROUP_READ,
                               Action.GROUP_CONSUME, Action.SCHEDULE_READ}),
    Role.VIEWER: frozenset({Action.TOPIC_READ, Action.PULL, Action.MESSAGE_READ,
                            Action.GROUP_READ, Action.DLQ_READ, Action.SCHEDULE_READ,
                            Action.REPORTS}),
}
READ_ACTIONS = _ROLE_ACTIONS[Role.VIEWER]
"""The actions that change nothing: what a viewer may do (every one of them, on anything)."""
_TOPIC_ACTIONS = frozenset({Action.SEND, Action.PULL})
_GROUP_ACTIONS = frozenset({Action.GROUP_READ, Action.GROUP_CONSUME})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid token is: its name, its role and (producer, consumer) its patterns."""

    name: str
    role: Role
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    rate_per_s: float = 0.0
    """Requests a second this token may send (0: the service's CLEPSYDRA_AUTH_RATE_PER_S)."""


def new_token() -> str:
    """A fresh token (shown once, never stored)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: str) -> str:
    """The stored form of a token: SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def matches(patterns: tuple[str, ...], name: str) -> bool:
    """Whether ``name`` matches one of the shell-style ``patterns``."""
    return any(fnmatchcase(name, p) for p in patterns)


def parse_role(raw: str) -> Role:
    """A role by its name; ValueError naming the roles otherwise."""
    try:
        return Role(raw)
    except ValueError:
        raise ValueError(f"unknown role {raw!r} (roles: {', '.join(r.value for r in Role)})") \
            from None


def _system_write(principal: Principal, topic: str) -> str | None:
    """Why ``principal`` may not write the system topic ``topic`` (None: it may)."""
    role = principal.role
    group = naming.group_of_retry_topic(topic)
    if group is not None:
        if role is Role.RETRY:
            return None
        if role is Role.CONSUMER and matches(principal.groups, group):
            return None  # R9/R12: a consumer's own fallback send-back
        return ("system topics are written only by the retry service (and a consumer of "
                "the group, SPEC R9)")
    if naming.is_dlq_topic(topic):
        return None if role is Role.RETRY else \
            "system topics are written only by the retry service"
    if topic == naming.SCHEDULE_TOPIC:
        return "the schedule topic is written only by the store (a delayed send)"
    return "system topics are written only by the services that own them"


def denial(principal: Principal, action: Action, resource: str | None = None) -> str | None:
    """Why ``principal`` may not do ``action`` on ``resource`` (a topic or a group), as the
    403 says it; None when it may."""
    role = principal.role
    what = f"{action.value} {resource}" if resource is not None else action.value
    if action not in _ROLE_ACTIONS[role]:
        return f"role {role} may not {what}"
    if resource is None:
        return None
    if action is Action.SEND and naming.is_system_topic(resource):
        why = _system_write(principal, resource)
        return None if why is None else f"role {role} may not {what}: {why}"
    if role not in SCOPED_ROLES:
        return None
    if action is Action.SEND and role is Role.CONSUMER:
        return f"role consumer may not {what}: a consumer sends only to %RETRY%<its group>"
    if action in _TOPIC_ACTIONS:
        group = naming.group_of_retry_topic(resource)
        if action is Action.PULL and group is not None and matches(principal.groups, group):
            return None  # a consumer reads its group's retry topic
        if matches(principal.topics, resource):
            return None
        return (f"role {role} may not {what}: it matches none of the token's topic patterns "
                f"({', '.join(principal.topics) or 'none'})")
    if action in _GROUP_ACTIONS:
        if matches(principal.groups, resource):
            return None
        return (f"role {role} may not {what}: it matches none of the token's group patterns "
                f"({', '.join(principal.groups) or 'none'})")
    return None
