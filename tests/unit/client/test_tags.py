"""Tag expressions (SPEC C3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from clepsydra_client.consumer.tags import TagExpression
from clepsydra_core.errors import ValidationError

if TYPE_CHECKING:

    pass

@pytest.mark.parametrize("text", ["*", "", None, "  *  ", "a || *"])
def test_star_and_empty_match_everything(text: str | None) -> None:  # SPEC C3
    expr = TagExpression.parse(text)
    assert expr.matches_all
    assert expr.matches(None) and expr.matches("x")
    assert expr.query() is None
    assert str(expr) == "*"


def test_or_expression_matches_listed_tags_only() -> None:  # SPEC C3
    expr = TagExpression.parse("paid || created||  shipped ")
    assert expr.tags == {"paid", "created", "shipped"}
    assert expr.matches("paid") and expr.matches("shipped")
    assert not expr.matches("refunded")
    assert not expr.matches(None)
    assert expr.query() == "created||paid||shipped"
    assert str(expr) == "created || paid || shipped"


def test_equal_expressions_compare_equal_whatever_the_spelling() -> None:
    assert TagExpression.parse("b||a") == TagExpression.parse("a || b")


@pytest.mark.parametrize("text", ["a ||", "|| a", "a || || b"])
def test_empty_tag_is_rejected(text: str | None) -> None:  # SPEC C3
    with pytest.raises(ValidationError, match="empty tag"):
        TagExpression.parse(text)
