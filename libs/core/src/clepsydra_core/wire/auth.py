"""The store's token routes (docs/access-control.md), spoken by the store and the
``clepsydra auth ... --store`` commands:

- ``GET /v1/auth/tokens`` -> :class:`TokenList`
- ``POST /v1/auth/tokens`` :class:`TokenCreate` -> 201 :class:`TokenCreated`
- ``DELETE /v1/auth/tokens/{name}`` -> :class:`TokenRevoked`

A token itself is shown once, in :class:`TokenCreated`; no other value carries it or its hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import TokenEntry
from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue, wire_meta
from clepsydra_core.wire.groups import ANY_TEXT

TOKEN_NAME_MAX = 128
"""A token name is 1 to this many printable characters."""
ROLES = tuple(r.value for r in Role)
_ROLE = {"enum": list(ROLES)}
_RATE_DOC = "requests a second (absent: CLEPSYDRA_AUTH_RATE_PER_S)"


def _check_role(name: str, role: str) -> None:
    if role not in ROLES:
        raise ValidationError(f"{name}.role: unknown role {role!r} (roles: {', '.join(ROLES)})",
                              code="INVALID_REQUEST")


def _check_rate(name: str, rate: float | None) -> None:
    if rate is not None and not rate >= 0:
        raise ValidationError(f"{name}.ratePerS must be a number of requests a second >= 0, "
                              f"got {rate!r}", code="INVALID_REQUEST")


@dataclass(frozen=True, slots=True)
class TokenCreate(WireValue):
    """A new token: its name, its role, and for a producer or consumer the topic and group
    patterns it reaches (shell patterns; one pattern or a list)."""

    name: str = field(metadata=wire_meta(pattern=ANY_TEXT, max_length=TOKEN_NAME_MAX,
                                         schema={"minLength": 1}))
    role: str = field(metadata=wire_meta(schema=_ROLE))
    topics: str | list[str] | None = None
    groups: str | list[str] | None = None
    rate_per_s: float | None = field(default=None, metadata=wire_meta(
        doc=_RATE_DOC, schema={"minimum": 0}))

    def wire_check(self, name: str) -> None:
        _check_role(name, self.role)
        _check_rate(name, self.rate_per_s)

    def patterns(self, which: str) -> tuple[str, ...]:
        """``topics`` or ``groups`` as a tuple of patterns (one pattern: a tuple of one)."""
        value = self.topics if which == "topics" else self.groups
        if value is None:
            return ()
        return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True, slots=True)
class TokenInfo(WireValue):
    """A token as listed: never the token nor its hash."""

    name: str
    role: str = field(metadata=wire_meta(schema=_ROLE))
    topics: list[str]
    groups: list[str]
    created_ms: int
    rate_per_s: float | None = field(default=None, metadata=wire_meta(
        doc=_RATE_DOC, schema={"minimum": 0}))

    @classmethod
    def of(cls, entry: TokenEntry) -> TokenInfo:
        return cls(entry.name, entry.role.value, list(entry.topics), list(entry.groups),
                   entry.created_ms, entry.rate_per_s or None)


@dataclass(frozen=True, slots=True)
class TokenCreated(WireValue):
    """The new token's entry and the token itself: the only time it is shown."""

    name: str
    role: str = field(metadata=wire_meta(schema=_ROLE))
    topics: list[str]
    groups: list[str]
    created_ms: int
    token: str
    rate_per_s: float | None = field(default=None, metadata=wire_meta(
        doc=_RATE_DOC, schema={"minimum": 0}))

    @classmethod
    def of(cls, entry: TokenEntry, token: str) -> TokenCreated:
        return cls(entry.name, entry.role.value, list(entry.topics), list(entry.groups),
                   entry.created_ms, token, entry.rate_per_s or None)


@dataclass(frozen=True, slots=True)
class TokenList(WireValue):
    tokens: list[TokenInfo]


@dataclass(frozen=True, slots=True)
class TokenRevoked(WireValue):
    name: str
    revoked: bool
