"""Tag expressions (SPEC C3): ``*`` (or empty) matches every message, ``a || b || c`` matches
those tags. The store filters by the tags hash; the client re-checks the tags string, so a hash
collision never lets a wrong message through."""

from __future__ import annotations

from dataclasses import dataclass

from clepsydra_core.errors import ValidationError

ALL = "*"


@dataclass(frozen=True, slots=True)
class TagExpression:
    """A parsed subscription expression. ``tags`` is empty for ``*``."""

    expression: str
    tags: frozenset[str]

    @classmethod
    def parse(cls, expression: str | None) -> TagExpression:
        text = (expression or "").strip()
        if text in ("", ALL):
            return cls(ALL, frozenset())
        tags = [part.strip() for part in text.split("||")]
        if any(not tag for tag in tags):
            raise ValidationError(f"tag expression {expression!r} has an empty tag: use '*' or "
                                  "'a || b'", rule="C3", code="INVALID_TAG_EXPRESSION")
        if ALL in tags:
            return cls(ALL, frozenset())
        return cls(" || ".join(sorted(set(tags))), frozenset(tags))

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches(self, tags: str | None) -> bool:
        """Client-side re-check of one message's tags string."""
        return self.matches_all or (tags is not None and tags in self.tags)

    def query(self) -> str | None:
        """The pull route's ``tags`` parameter (``a||b``), None for every message."""
        return None if self.matches_all else "||".join(sorted(self.tags))

    def __str__(self) -> str:
        return self.expression
