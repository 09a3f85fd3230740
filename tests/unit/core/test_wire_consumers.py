"""The store's consumer views as wire types (SPEC C1, C5): heartbeat answer,
consumer list with mismatches, offsets map, unregister answer round-trip and name a bad
field."""

from __future__ import annotations

from typing import Any

import pytest

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.groups import (
    ConsumerInfo,
    ConsumerRemoved,
    Consumers,
    GroupOffsets,
    HeartbeatAnswer,
    Mismatch,
    Subscription,
)

ODD = Mismatch("c3", {"T": "a || b"}, "CLUSTERING", Subscription({"T": "*"}, "CLUSTERING"),
               "consumer 'c3' subscribes differently (SPEC C5)")
VALUES: list[WireValue] = [
    HeartbeatAnswer(["c1", "c3"], False, [ODD]),
    HeartbeatAnswer(["c1"], True, []),
    Consumers("G", [ConsumerInfo("c1", {"T": "*"}, "CLUSTERING", 5)], True, []),
    GroupOffsets("G", {"T": {"0": 4, "1": 0}, "U": {}}),
    ConsumerRemoved(False),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(value: WireValue) -> None:
    raw = value.to_json()
    assert type(value).from_json(raw) == value
    assert type(value).from_json(raw).to_json() == raw


def test_mismatch_names() -> None:
    assert ODD.to_json() == {"clientId": "c3", "subscriptions": {"T": "a || b"},
                             "messageModel": "CLUSTERING",
                             "expected": {"subscriptions": {"T": "*"},
                                          "messageModel": "CLUSTERING"},
                             "message": "consumer 'c3' subscribes differently (SPEC C5)"}


@pytest.mark.parametrize(("cls", "raw", "words"), [
    (GroupOffsets, {"group": "G", "offsets": {"T": {"0": "4"}}},
     r"GroupOffsets.offsets\['T'\]\['0'\] must be an integer"),
    (GroupOffsets, {"group": "G", "offsets": {"T": 4}},
     r"GroupOffsets.offsets\['T'\] must be an object of integers"),
    (Consumers, {"group": "G", "consumers": [{"clientId": "c"}], "consistent": True,
                 "mismatches": []}, r"Consumers.consumers\[0\].subscriptions is required"),
    (HeartbeatAnswer, {"consumers": ["c"], "consistent": "yes", "mismatches": []},
     "HeartbeatAnswer.consistent must be a boolean"),
    (ConsumerRemoved, {}, "ConsumerRemoved.removed is required"),
])
def test_bad_answers_name_the_field(cls: type[WireValue], raw: dict[str, Any],
                                    words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        cls.from_json(raw)
