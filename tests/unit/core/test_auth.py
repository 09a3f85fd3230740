"""Access control's pure rules: what each role may do, patterns,
system topics written only by the services that own them (even with a ``*`` pattern), tokens
kept as SHA-256 digests."""

from __future__ import annotations

import hashlib

import pytest

from clepsydra_core import naming
from clepsydra_core.auth import (
    TOKEN_PREFIX,
    Action,
    Principal,
    Role,
    denial,
    new_token,
    parse_role,
    token_digest,
)

PRODUCER = Principal("orders-app", Role.PRODUCER, topics=("orders-*",))
ANY_PRODUCER = Principal("any", Role.PRODUCER, topics=("*",))
CONSUMER = Principal("billing", Role.CONSUMER, topics=("orders-*",), groups=("billing-*",))
ADMIN = Principal("ops", Role.ADMIN)
RETRY = Principal("retry", Role.RETRY)
SCHEDULER = Principal("scheduler", Role.SCHEDULER)
ANALYTICS = Principal("analytics", Role.ANALYTICS)


def test_producer_sends_to_matching_topics_only() -> None:
    assert denial(PRODUCER, Action.SEND, "orders-eu") is None
    why = denial(PRODUCER, Action.SEND, "payments")
    assert why is not None and "role producer may not write topic payments" in why
    assert "orders-*" in why  # names what the token has, nothing else


@pytest.mark.parametrize("topic", [naming.dlq_topic("g"), naming.retry_topic("g"),
                                   naming.SCHEDULE_TOPIC, naming.SCHEDULE_ERROR_TOPIC,
                                   naming.TRANSACTION_HALF_TOPIC])
def test_system_topics_refused_to_a_producer_even_with_a_wildcard(topic: str) -> None:
    why = denial(ANY_PRODUCER, Action.SEND, topic)
    assert why is not None and why.startswith(f"role producer may not write topic {topic}: ")


def test_dlq_refusal_names_the_owner() -> None:
    assert denial(ANY_PRODUCER, Action.SEND, naming.dlq_topic("g")) == (
        "role producer may not write topic %DLQ%g: system topics are written only by the "
        "retry service")


def test_admin_does_not_write_system_topics() -> None:
    assert denial(ADMIN, Action.SEND, "anything") is None
    assert denial(ADMIN, Action.SEND, naming.dlq_topic("g")) is not None
    assert denial(ADMIN, Action.SEND, naming.SCHEDULE_TOPIC) is not None


def test_retry_service_owns_retry_and_dlq_topics() -> None:
    assert denial(RETRY, Action.SEND, naming.retry_topic("g")) is None
    assert denial(RETRY, Action.SEND, naming.dlq_topic("g")) is None
    assert denial(RETRY, Action.SEND, naming.SCHEDULE_TOPIC) is not None
    assert denial(RETRY, Action.INTERNAL_COPY) is None


def test_consumer_pulls_commits_and_falls_back_for_its_groups() -> None:
    assert denial(CONSUMER, Action.PULL, "orders-eu") is None
    assert denial(CONSUMER, Action.PULL, "payments") is not None
    assert denial(CONSUMER, Action.PULL, naming.retry_topic("billing-1")) is None
    assert denial(CONSUMER, Action.GROUP_CONSUME, "billing-1") is None
    assert "group patterns (billing-*)" in str(denial(CONSUMER, Action.GROUP_CONSUME, "other"))
    # SPEC R9/R12: a consumer whose send-back failed sends to %RETRY%<its group> itself
    assert denial(CONSUMER, Action.SEND, naming.retry_topic("billing-1")) is None
    assert denial(CONSUMER, Action.SEND, naming.retry_topic("other")) is not None
    assert denial(CONSUMER, Action.SEND, naming.dlq_topic("billing-1")) is not None
    assert denial(CONSUMER, Action.SEND, "orders-eu") is not None


@pytest.mark.parametrize("action", [Action.TOPIC_ADMIN, Action.DLQ_ADMIN, Action.GROUP_ADMIN,
                                    Action.AUTH_ADMIN, Action.SCHEDULE_HANDOVER])
def test_consumer_may_not_administer(action: Action) -> None:
    why = denial(CONSUMER, action, "billing-1")
    assert why is not None and why.startswith("role consumer may not ")


def test_admin_covers_operations_but_not_internal_routes() -> None:
    for action in (Action.TOPIC_ADMIN, Action.DLQ_ADMIN, Action.GROUP_ADMIN, Action.AUTH_ADMIN,
                   Action.REPORTS, Action.PULL, Action.GROUP_CONSUME, Action.SCHEDULE_READ):
        assert denial(ADMIN, action, "x") is None, action
    assert denial(ADMIN, Action.SCHEDULE_HANDOVER) is not None
    assert denial(ADMIN, Action.INTERNAL_COPY) is not None


def test_service_roles_reach_only_what_their_service_calls() -> None:
    assert denial(SCHEDULER, Action.SCHEDULE_HANDOVER) is None
    assert denial(SCHEDULER, Action.SCHEDULE_READ) is None
    assert denial(SCHEDULER, Action.SEND, "orders") is not None
    assert denial(SCHEDULER, Action.PULL, "orders") is not None
    assert denial(ANALYTICS, Action.PULL, "orders") is None
    assert denial(ANALYTICS, Action.GROUP_CONSUME, naming.EXPORT_GROUP) is None
    assert denial(ANALYTICS, Action.SEND, "orders") is not None
    assert denial(ANALYTICS, Action.SCHEDULE_HANDOVER) is not None


def test_tokens_are_random_and_kept_as_sha256() -> None:
    a, b = new_token(), new_token()
    assert a != b and a.startswith(TOKEN_PREFIX) and len(a) > 40
    assert token_digest(a) == hashlib.sha256(a.encode()).hexdigest()


def test_unknown_role_names_the_roles() -> None:
    assert parse_role("consumer") is Role.CONSUMER
    with pytest.raises(ValueError, match="producer, consumer, admin"):
        parse_role("root")
