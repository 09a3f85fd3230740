"""The last values the route tables wrote as hand-made JSON Schemas, now wire types:
the store's tokens and health, the error body, the retry service's batch
send-back as it reads it and its mixed results. Each round-trips, names a bad field, and its
schema (what the OpenAPI documents say) accepts what it writes and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import TokenEntry
from clepsydra_core.errors import ClepsydraError, GroupNotFound, RemoteError, ValidationError
from clepsydra_core.wire.auth import (
    TokenCreate,
    TokenCreated,
    TokenInfo,
    TokenList,
    TokenRevoked,
)
from clepsydra_core.wire.codec import WireValue, read_answer
from clepsydra_core.wire.errors import ErrorAnswer
from clepsydra_core.wire.health import StoreHealth
from clepsydra_core.wire.messages import StoredMessage
from clepsydra_core.wire.retry import (
    SendBackAnswer,
    SendBackItems,
    SendBackRequest,
    SendBackResults,
)
from clepsydra_core.wire.schema import nested_types, object_schema

INFO = TokenInfo("orders-app", "producer", ["orders-*"], [], 1_764_000_000_000)
VALUES: list[WireValue] = [
    TokenCreate("orders-app", "producer", "orders-*"),
    TokenCreate("reader", "consumer", ["a", "b"], ["g"], 2.5),
    INFO,
    TokenInfo("slow", "consumer", ["t"], ["g"], 1, 0.5),
    TokenList([INFO]),
    TokenList([]),
    TokenCreated("orders-app", "producer", ["orders-*"], [], 1, "ctk_secret"),
    TokenRevoked("orders-app", True),
    StoreHealth("ok", False),
    ErrorAnswer("INVALID_REQUEST", "send-back.delayLevel must be an integer, got string"),
    SendBackItems([{"msgId": "AB"}, 3, None]),
    SendBackResults([SendBackAnswer("RETRY", "%RETRY%g", 3, "AB"),
                     ErrorAnswer("SYSTEM_ERROR", "no message at commitLogOffset 9 (SPEC R2)"),
                     SendBackAnswer("DROPPED", None, None, None)]),
]


REQUESTS = (TokenCreate, SendBackItems)
"""Read with ``strict=True`` (unknown fields refused), their schemas closed."""


def _schema(cls: type[WireValue]) -> dict[str, Any]:
    """The type's JSON Schema with the wire types it holds, where the documents have them
    (``#/components/schemas/``: SendBackItems points at SendBackRequest there)."""
    defs: dict[str, Any] = {}

    def ref(c: type[WireValue]) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{c.__name__}"}

    todo = [cls, SendBackRequest]
    while todo:
        kind = todo.pop()
        if kind.__name__ not in defs:
            defs[kind.__name__] = object_schema(kind, ref, closed=kind in REQUESTS)
            todo += nested_types(kind)
    return {**ref(cls), "components": {"schemas": defs}}


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip_and_the_schema_accepts_it(value: WireValue) -> None:
    raw = value.to_json()
    assert type(value).from_json(raw) == value
    assert type(value).from_json(raw).to_json() == raw
    jsonschema.validate(raw, _schema(type(value)))


def test_token_names_on_the_wire() -> None:
    assert TokenCreate("r", "consumer", ["a"], "g", 3).to_json() == {
        "name": "r", "role": "consumer", "topics": ["a"], "groups": "g", "ratePerS": 3}
    assert INFO.to_json() == {"name": "orders-app", "role": "producer", "topics": ["orders-*"],
                              "groups": [], "createdMs": 1_764_000_000_000}
    assert TokenCreate("r", "admin").patterns("topics") == ()
    assert TokenCreate("r", "consumer", "a*").patterns("topics") == ("a*",)
    assert TokenCreate("r", "consumer", groups=["g1", "g2"]).patterns("groups") == ("g1", "g2")


def test_a_token_entry_is_listed_without_its_hash() -> None:
    entry = TokenEntry("n", Role.CONSUMER, "ab" * 32, ("t",), ("g",), 7, 0.0)
    assert TokenInfo.of(entry).to_json() == {"name": "n", "role": "consumer", "topics": ["t"],
                                             "groups": ["g"], "createdMs": 7}
    created = TokenCreated.of(entry, "tok").to_json()
    assert created["token"] == "tok" and "sha256" not in created


@pytest.mark.parametrize(("cls", "raw", "words"), [
    (TokenCreate, {"role": "admin"}, r"token\.name is required"),
    (TokenCreate, {"name": "", "role": "admin"}, r"token\.name '' does not match"),
    (TokenCreate, {"name": "x" * 129, "role": "admin"}, r"token\.name is 129 characters"),
    (TokenCreate, {"name": "n", "role": "root"}, r"token\.role: unknown role 'root'"),
    (TokenCreate, {"name": "n", "role": "consumer", "topics": 3},
     r"token\.topics must be a string or an array of strings"),
    (TokenCreate, {"name": "n", "role": "consumer", "groups": ["g", 1]},
     r"token\.groups\[1\] must be a string"),
    (TokenCreate, {"name": "n", "role": "admin", "ratePerS": -1},
     r"token\.ratePerS must be a number of requests a second >= 0"),
    (TokenCreate, {"name": "n", "role": "admin", "ratePerS": "fast"},
     r"token\.ratePerS must be a number"),
    (TokenCreate, {"name": "n", "role": "admin", "token": "mine"},
     r"token: unknown field 'token'"),
    (TokenList, {"tokens": [{"name": "n", "role": "admin", "topics": [], "groups": []}]},
     r"token\.tokens\[0\]\.createdMs is required"),
    (TokenCreated, {"name": "n", "role": "admin", "topics": [], "groups": [], "createdMs": 1},
     r"token\.token is required"),
    (TokenRevoked, {"name": "n", "revoked": "yes"}, r"token\.revoked must be a boolean"),
    (StoreHealth, {"status": "ok"}, r"token\.writable is required"),
    (ErrorAnswer, {"error": 404, "message": "m"}, r"token\.error must be a string"),
    (SendBackItems, {"items": []}, r"token\.items must hold 1 to 1000 items, got 0"),
    (SendBackItems, {"items": [{}] * 1001}, r"token\.items must hold 1 to 1000 items"),
    (SendBackItems, {"items": [{}], "group": "g"}, r"token: unknown field 'group'"),
    (SendBackResults, {"results": [{"outcome": "RETRY"}]},
     r"token\.results\[0\] is none of SendBackAnswer, ErrorAnswer \(as SendBackAnswer: "
     r"token\.results\[0\]\.topic is required; as ErrorAnswer: token\.results\[0\]\.error "
     r"is required\)"),
    (SendBackResults, {"results": ["RETRY"]}, r"token\.results\[0\] must be an object"),
])
def test_a_bad_value_is_refused_naming_the_field(cls: type[WireValue], raw: dict[str, Any],
                                                 words: str) -> None:
    with pytest.raises(ValidationError, match=words) as refused:
        cls.from_json(raw, what="token", strict=cls in REQUESTS)
    assert refused.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize(("cls", "raw"), [
    (TokenCreate, {"name": "", "role": "admin"}),
    (TokenCreate, {"name": "n", "role": "root"}),
    (TokenCreate, {"name": "n", "role": "admin", "ratePerS": -1}),
    (TokenCreate, {"name": "n", "role": "admin", "token": "mine"}),
    (SendBackItems, {"items": []}),
    (SendBackResults, {"results": [{"outcome": "RETRY"}]}),
])
def test_the_schema_refuses_what_the_reader_refuses(cls: type[WireValue],
                                                    raw: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, _schema(cls))


def test_a_batch_result_reads_as_the_first_type_that_fits() -> None:
    results = SendBackResults.from_json({"results": [
        {"outcome": "DLQ", "topic": "%DLQ%g", "delayLevel": 0, "msgId": "AB"},
        {"error": "INVALID_MSG_ID", "message": "bad"}]})
    assert results.results == [SendBackAnswer("DLQ", "%DLQ%g", 0, "AB"),
                               ErrorAnswer("INVALID_MSG_ID", "bad")]


def test_the_error_body_is_the_error_trees_own() -> None:
    exc = GroupNotFound("consumer group 'g' does not exist", rule="R2")
    assert ErrorAnswer.of(exc).to_json() == exc.to_json()
    assert isinstance(exc, ClepsydraError)


def test_an_unexpected_answer_is_a_bad_gateway_naming_the_field() -> None:
    with pytest.raises(RemoteError, match=r"unexpected answer: healthz\.writable must be a "
                                          r"boolean, got string") as bad:
        read_answer(StoreHealth, {"status": "ok", "writable": "yes"}, "healthz")
    assert bad.value.http_status == 502
    assert read_answer(StoreHealth, {"status": "ok", "writable": True, "new": 1}) == \
        StoreHealth("ok", True)  # an answer may carry fields this reader does not know yet


def test_the_compiled_reader_takes_and_refuses_what_the_checks_do() -> None:
    # from_json reads field by field with an inline test of the usual type, the field's check
    # for anything else (the answers the retry service reads at speed)
    view = {"msgId": "AB", "offsetMsgId": "CD", "topic": "T", "queueId": 0.0, "queueOffset": 1,
            "commitLogOffset": 2, "tags": None, "keys": "", "flag": 0, "properties": {"a": "b"},
            "storeTimestamp": 3, "bornTimestamp": 4, "bornHost": "h:1", "storeHost": "h:2",
            "reconsumeTimes": 0, "sysFlag": 0, "bodySize": 0, "body": None}
    message = StoredMessage.from_json(view)
    assert message.queue_id == 0 and type(message.queue_id) is int  # 0.0 is an integer
    assert message.tags is None and message.body is None
    for field, value, words in [("queueId", True, "queueId must be an integer, got boolean"),
                                ("flag", 1 << 63, "flag must be between"),
                                ("properties", {"a": 1}, r"properties\['a'\] must be a string"),
                                ("tags", 5, "tags must be a string, got number"),
                                ("keys", None, "keys must be a string, got null")]:
        with pytest.raises(ValidationError, match=f"StoredMessage.{words}"):
            StoredMessage.from_json({**view, field: value})
    with pytest.raises(ValidationError, match=r"StoredMessage\.bodySize is required"):
        StoredMessage.from_json({k: v for k, v in view.items() if k != "bodySize"})
