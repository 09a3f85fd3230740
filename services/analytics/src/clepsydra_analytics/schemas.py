"""The export's schema, versioned: one Arrow schema for the Parquet files, the Spark schema
derived from it, and the conversion of the store's message JSON into columns.

Version 1 columns (snake_case, units in the names):

=========================  ==========================================================
msg_id                     the message's msgId: its unique id, the same in every copy
topic, queue_id,           the copy's place in the store
queue_offset,
commitlog_offset
store_timestamp_ms,        when the store appended it / when the producer made it
born_timestamp_ms
tags, keys, flag,          as produced; ``body`` only with CLEPSYDRA_ANALYTICS_EXPORT_BODY
body_size_bytes, body
properties                 every property, as a map
reconsume_times,           retry state (SPEC R4, R5, R8)
max_reconsume_times,
retry_topic,
origin_message_id
real_topic, delay_level,   the delay lifecycle: the topic a delayed message was aimed at, its
deliver_ts_ms              level and intended deliver time (from ``SCHEDULE_OFFSET``,
                           ``DELAY``, ``DELIVER_TS``); level 0 is a timer message (issue
                           15: ``deliverAt``/``delayMs``), whose copy fills both alike
consumer_group             the group of a ``%RETRY%``/``%DLQ%`` topic, else null
failure_reason,            the last failure the consumer's SDK recorded (else DLQ_REASON),
failure_history,           every recorded attempt, and why the store/retry service
dlq_reason                 dead-lettered it
trace_id                   from ``traceparent`` (SPEC O1)
exported_at_ms             when the exporter wrote the row
=========================  ==========================================================

A new version gets a new folder (``v2/``) so jobs never read two layouts as one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from clepsydra_core import naming
from clepsydra_core import properties as P

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

SCHEMA_VERSION = 1
VERSION_METADATA_KEY = b"clepsydra.export.schema_version"

_ATTEMPT_FIELDS = (("time_ms", "int64"), ("consumer", "string"), ("reason", "string"),
                   ("reconsume_times", "int32"))
"""One entry of ``failure_history``."""

EXPORT_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("msg_id", "string", False),
    ("topic", "string", False),
    ("queue_id", "int32", False),
    ("queue_offset", "int64", False),
    ("commitlog_offset", "int64", True),
    ("store_timestamp_ms", "int64", False),
    ("born_timestamp_ms", "int64", True),
    ("tags", "string", True),
    ("keys", "string", True),
    ("flag", "int32", True),
    ("body_size_bytes", "int64", True),
    ("body", "binary", True),
    ("properties", "map<string,string>", True),
    ("reconsume_times", "int32", True),
    ("max_reconsume_times", "int32", True),
    ("retry_topic", "string", True),
    ("origin_message_id", "string", True),
    ("real_topic", "string", True),
    ("delay_level", "int32", True),
    ("deliver_ts_ms", "int64", True),
    ("consumer_group", "string", True),
    ("failure_reason", "string", True),
    ("failure_history", "list<attempt>", True),
    ("dlq_reason", "string", True),
    ("trace_id", "string", True),
    ("exported_at_ms", "int64", True),
)
"""(name, type, nullable) of every column, in order: the Arrow schema (``EXPORT_SCHEMA``) is
built from it when first used, so a process that only gathers rows (the exporter at rest)
never imports pyarrow (DEC-memory-at-rest)."""

COLUMNS = tuple(name for name, _type, _nullable in EXPORT_FIELDS)


def spark_schema() -> StructType:
    """The Spark schema of the export (built from the Arrow one, so the two cannot drift)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: StructType = from_arrow_schema(export_schema())
    return schema


def _int_or_none(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def delay_level_of(props: dict[str, str]) -> int | None:
    """The level a delivered message waited at (``SCHEDULE_OFFSET`` = ``level:offset``), or the
    level it was produced with (``DELAY``)."""
    mark = props.get(P.SCHEDULE_OFFSET)
    if mark:
        return _int_or_none(mark.split(":", 1)[0])
    return _int_or_none(props.get(P.DELAY))


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``)."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else None


def failure_history_of(raw: str | None) -> list[dict[str, Any]]:
    """The attempts of a ``FAILURE_HISTORY`` property as ATTEMPT structs ([] if none)."""
    if not raw:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return [{"time_ms": None, "consumer": None, "reason": raw, "reconsume_times": None}]
    items = parsed if isinstance(parsed, list) else [parsed]
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            out.append({"time_ms": None, "consumer": None, "reason": str(item),
                        "reconsume_times": None})
            continue
        time_ms = item.get("time", item.get("timeMs"))
        times = item.get("reconsumeTimes")
        reason = item.get("reason", item.get("unparsed"))
        out.append({
            "time_ms": int(time_ms) if isinstance(time_ms, int | float) else None,
            "consumer": str(item.get("consumer") or item.get("consumerId") or "") or None,
            "reason": str(reason) if reason is not None else None,
            "reconsume_times": times if isinstance(times, int) else None,
        })
    return out


def group_of(topic: str) -> str | None:
    return naming.group_of_retry_topic(topic) or naming.group_of_dlq_topic(topic)


def empty_columns() -> dict[str, list[Any]]:
    return {name: [] for name in COLUMNS}


def _body_of(m: dict[str, Any]) -> bytes | None:
    if "bodyBase64" in m:
        return base64.b64decode(m["bodyBase64"])
    if "body" in m:
        return str(m["body"]).encode()
    return None


def _last_reason(history: list[dict[str, Any]], props: dict[str, str]) -> str | None:
    reason = next((a["reason"] for a in reversed(history) if a["reason"]), None)
    return reason or props.get(P.DLQ_REASON)


def append_messages(cols: dict[str, list[Any]], messages: Sequence[dict[str, Any]], *,
                    with_body: bool, exported_at_ms: int) -> None:
    """Add messages (the store's v1 JSON view) to column lists, a column at a time: one loop
    per column costs about half of one loop per message appending to every column (the
    exporter's hot path, its rows/s)."""
    if not messages:
        return
    props = [m.get("properties") or {} for m in messages]
    topics = [str(m["topic"]) for m in messages]
    histories = [failure_history_of(raw) if raw else []
                 for raw in [p.get(P.FAILURE_HISTORY) for p in props]]
    bodies: list[bytes | None] = ([_body_of(m) for m in messages] if with_body
                                  else [None] * len(messages))
    sizes = [len(b) if n is None and b is not None else n
             for n, b in zip([m.get("bodySize") for m in messages], bodies, strict=True)]
    cols["msg_id"] += [m["msgId"] for m in messages]
    cols["topic"] += topics
    cols["queue_id"] += [m["queueId"] for m in messages]
    cols["queue_offset"] += [m["queueOffset"] for m in messages]
    cols["commitlog_offset"] += [m.get("commitLogOffset") for m in messages]
    cols["store_timestamp_ms"] += [m["storeTimestamp"] for m in messages]
    cols["born_timestamp_ms"] += [m.get("bornTimestamp") for m in messages]
    cols["tags"] += [m.get("tags") or None for m in messages]
    cols["keys"] += [m.get("keys") or None for m in messages]
    cols["flag"] += [m.get("flag") for m in messages]
    cols["body_size_bytes"] += sizes
    cols["body"] += bodies
    cols["properties"] += [list(p.items()) for p in props]
    cols["reconsume_times"] += [m.get("reconsumeTimes", 0) for m in messages]
    cols["max_reconsume_times"] += [_int_or_none(p.get(P.MAX_RECONSUME_TIMES)) for p in props]
    cols["retry_topic"] += [p.get(P.RETRY_TOPIC) for p in props]
    cols["origin_message_id"] += [p.get(P.ORIGIN_MESSAGE_ID) for p in props]
    cols["real_topic"] += [p.get(P.REAL_TOPIC) for p in props]
    cols["delay_level"] += [delay_level_of(p) for p in props]
    cols["deliver_ts_ms"] += [_int_or_none(p.get(P.DELIVER_TS)) for p in props]
    cols["consumer_group"] += [group_of(t) for t in topics]
    cols["failure_reason"] += [_last_reason(h, p) for h, p in zip(histories, props, strict=True)]
    cols["failure_history"] += histories
    cols["dlq_reason"] += [p.get(P.DLQ_REASON) for p in props]
    cols["trace_id"] += [trace_id_of(p.get(P.TRACEPARENT)) for p in props]
    cols["exported_at_ms"] += [exported_at_ms] * len(messages)


def to_table(cols: dict[str, list[Any]]) -> pa.Table:
    import pyarrow as pa

    return pa.Table.from_pydict(cols, schema=export_schema())


def table_of(messages: Sequence[dict[str, Any]], *, with_body: bool = False,
             exported_at_ms: int = 0) -> pa.Table:
    """An export table of store message views (tests, the bench)."""
    cols = empty_columns()
    append_messages(cols, messages, with_body=with_body, exported_at_ms=exported_at_ms)
    return to_table(cols)


SCHEDULE_SNAPSHOT = "schedule_levels"
SCHEDULE_SNAPSHOT_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("snapshot_ms", "int64", False),
    ("level", "int32", False),
    ("delay_ms", "int64", True),
    ("max_offset", "int64", True),
    ("handed_over", "int64", True),
    ("pending", "int64", False),
)
"""Per delay level, the messages still waiting in the schedule topic when the exporter last
looked (``GET /v1/schedule/levels``): the schedule topic itself is never exported (S3)."""

LAG_SNAPSHOT = "consumer_lag"
LAG_SNAPSHOT_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("snapshot_ms", "int64", False),
    ("consumer_group", "string", False),
    ("topic", "string", False),
    ("queue_id", "int32", False),
    ("committed_offset", "int64", True),
    ("max_offset", "int64", True),
    ("lag", "int64", False),
)
"""Per group, topic and queue: committed offset, the queue's end, and the difference."""


# ---- the Arrow schemas, built from the tables above when first used ----------------------

Fields = tuple[tuple[str, str, bool], ...]


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    if kind == "map<string,string>":
        return pa.map_(pa.string(), pa.string())
    if kind == "list<attempt>":
        return pa.list_(pa.struct([pa.field(name, _arrow_type(t)) for name, t in _ATTEMPT_FIELDS]))
    builder = {"string": pa.string, "binary": pa.binary, "int32": pa.int32, "int64": pa.int64}
    return builder[kind]()


def arrow_schema(fields: Fields, metadata: dict[bytes, bytes] | None = None) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(name, _arrow_type(kind), nullable=nullable)
                      for name, kind, nullable in fields], metadata=metadata)


@cache
def export_schema() -> pa.Schema:
    """The Arrow schema of the export files (``EXPORT_FIELDS``, the version in its metadata)."""
    return arrow_schema(EXPORT_FIELDS, {VERSION_METADATA_KEY: str(SCHEMA_VERSION).encode()})


@cache
def schedule_snapshot_schema() -> pa.Schema:
    return arrow_schema(SCHEDULE_SNAPSHOT_FIELDS)


@cache
def lag_snapshot_schema() -> pa.Schema:
    return arrow_schema(LAG_SNAPSHOT_FIELDS)


_ARROW_SCHEMAS = {"EXPORT_SCHEMA": export_schema,
                  "SCHEDULE_SNAPSHOT_SCHEMA": schedule_snapshot_schema,
                  "LAG_SNAPSHOT_SCHEMA": lag_snapshot_schema}


def __getattr__(name: str) -> pa.Schema:
    """``EXPORT_SCHEMA``, ``SCHEDULE_SNAPSHOT_SCHEMA``, ``LAG_SNAPSHOT_SCHEMA``: pyarrow is
    imported on the first use of one."""
    build = _ARROW_SCHEMAS.get(name)
    if build is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return build()

