"""The HTTP contracts' values, defined once (DESIGN "Wire and record formats are defined once").

Every value that crosses an HTTP route between the parts is a frozen, slotted dataclass here,
with ``to_json()`` and ``from_json()`` from :mod:`clepsydra_core.wire.codec`: the store answers
with it, the scheduler, the retry service and the client SDK read it back with it, and the
camelCase names live in one place. One module per API:

- :mod:`~clepsydra_core.wire.schedule`: the schedule hand-over routes (level table, entries,
  hand-over request and answer);
- :mod:`~clepsydra_core.wire.copy`: the store's internal copy routes (send-back, DLQ resend);
- :mod:`~clepsydra_core.wire.retry`: the retry service's send-back request and answer.

Still declared at their routes (not yet here): produce, pull, topics, groups and offsets, the
DLQ toolkit's listing and resend/purge bodies.
"""
