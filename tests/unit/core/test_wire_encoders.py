"""The wire codec's compiled encoders: ``to_json`` and ``json_of`` written out
per class give exactly the JSON the field-by-field rule gives (None optionals left out,
nested values and lists encoded)."""

from __future__ import annotations

import dataclasses
from typing import Any

from clepsydra_core.wire.codec import WireValue
from clepsydra_core.wire.copy import CopyBatch, CopyItem
from clepsydra_core.wire.produce import ProduceMessage


def _by_rule(value: WireValue) -> dict[str, Any]:
    """The JSON as the codec's rule states it, field by field (the reference)."""
    out: dict[str, Any] = {}
    for spec in value._wire_specs():
        item = getattr(value, spec.attr)
        if item is None and not spec.required:
            continue
        out[spec.json] = item if spec.encode is None else spec.encode(item)
    return out


def test_compiled_to_json_is_the_rule() -> None:
    values: list[WireValue] = [
        ProduceMessage(body="x", keys=["a", "b"], properties={"p": "q"}, delay_ms=5),
        ProduceMessage(body_base64="AA==", queue_id=0, flag=0),
        CopyBatch([CopyItem(7, "t", queue_id=1), CopyItem(8, "u")]),
    ]
    for value in values:
        assert value.to_json() == _by_rule(value)
        assert value.to_json() == _by_rule(value)  # the compiled one, second call


def test_json_of_is_to_json_without_the_instance() -> None:
    value = ProduceMessage(body="x", tags="t", properties={"a": "b"}, delay_level=3)
    values = [getattr(value, f.name) for f in dataclasses.fields(ProduceMessage)]
    assert ProduceMessage.json_of(*values) == value.to_json()
    assert ProduceMessage.json_of("only") == {"body": "only"}
    assert ProduceMessage.json_of(body="x", tags="t", properties={"a": "b"},
                                  delay_level=3) == value.to_json()


def test_each_class_compiles_its_own() -> None:
    ProduceMessage(body="x").to_json()
    assert CopyItem(7, "t").to_json() == _by_rule(CopyItem(7, "t"))
    assert ProduceMessage.to_json is not CopyItem.to_json
