"""The HTTP contracts' values, defined once (DESIGN "Wire and record formats are defined once").

Every value that crosses an HTTP route between the parts is a frozen, slotted dataclass here,
with ``to_json()`` and ``from_json()`` from :mod:`clepsydra_core.wire.codec`: the store answers
with it, the scheduler, the retry service and the client SDK read it back with it, and the
camelCase names live in one place. One module per API:

- :mod:`~clepsydra_core.wire.produce`: produce, one message and a batch, and the answers;
- :mod:`~clepsydra_core.wire.topics`: topic creation and the topic views;
- :mod:`~clepsydra_core.wire.groups`: group settings, offset commits, heartbeats;
- :mod:`~clepsydra_core.wire.messages`: a stored message's view, pull and look-up answers;
- :mod:`~clepsydra_core.wire.schedule`: the schedule hand-over routes (level table, entries,
  hand-over request and answer);
- :mod:`~clepsydra_core.wire.timers`: timer messages (SPEC T): cancel, reschedule, the timer
  backlog;
- :mod:`~clepsydra_core.wire.copy`: the store's internal copy routes (send-back, DLQ resend);
- :mod:`~clepsydra_core.wire.retry`: the retry service's send-back request and answer, its
  health;
- :mod:`~clepsydra_core.wire.dlq`: the DLQ toolkit: filter, resend and purge requests, the
  listing, a dead letter's view, the results and the audit list;
- :mod:`~clepsydra_core.wire.analytics`: the analytics API: run request and result (with its
  tables' rows), the run list, export status, health;
- :mod:`~clepsydra_core.wire.auth`: the store's token routes (create, list, revoke);
- :mod:`~clepsydra_core.wire.health`: the store's health;
- :mod:`~clepsydra_core.wire.errors`: the ``{error, message}`` body, where it stands in an
  answer's place (a batch send-back's failed item).

:mod:`~clepsydra_core.wire.schema` makes their JSON Schema, from which the OpenAPI documents are
generated (``clepsydra_web.openapi``, ``make openapi``). A client reads another service's answer
with :func:`~clepsydra_core.wire.codec.read_answer` (an answer that does not read: 502 naming the
field). The one value a route table still writes as JSON Schema is the store's FLUSH_TIMEOUT
answer (an error body and the produce results at once).
"""
