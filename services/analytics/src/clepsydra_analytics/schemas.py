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
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clepsydra_core import naming
from clepsydra_core import properties as P

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA_VERSION = 1
VERSION_METADATA_KEY = b"clepsydra.export.schema_version"

ATTEMPT = pa.struct([
    pa.field("time_ms", pa.int64()),
    pa.field("consumer", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("reconsume_times", pa.int32()),
])

EXPORT_SCHEMA = pa.schema([
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("commitlog_offset", pa.int64()),
    pa.field("store_timestamp_ms", pa.int64(), nullable=False),
    pa.field("born_timestamp_ms", pa.int64()),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("flag", pa.int32()),
    pa.field("body_size_bytes", pa.int64()),
    pa.field("body", pa.binary()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("reconsume_times", pa.int32()),
    pa.field("max_reconsume_times", pa.int32()),
    pa.field("retry_topic", pa.string()),
    pa.field("origin_message_id", pa.string()),
    pa.field("real_topic", pa.string()),
    pa.field("delay_level", pa.int32()),
    pa.field("deliver_ts_ms", pa.int64()),
    pa.field("consumer_group", pa.string()),
    pa.field("failure_reason", pa.string()),
    pa.field("failure_history", pa.list_(ATTEMPT)),
    pa.field("dlq_reason", pa.string()),
    pa.field("trace_id", pa.string()),
    pa.field("exported_at_ms", pa.int64()),
], metadata={VERSION_METADATA_KEY: str(SCHEMA_VERSION).encode()})

COLUMNS = tuple(EXPORT_SCHEMA.names)


def spark_schema() -> StructType:
    """The Spark schema of the export (built from the Arrow one, so the two cannot drift)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: StructType = from_arrow_schema(EXPORT_SCHEMA)
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


def append_message(cols: dict[str, list[Any]], m: dict[str, Any], *, with_body: bool,
                   exported_at_ms: int) -> None:
    """Add one message (the store's v1 JSON view) to column lists."""
    props: dict[str, str] = m.get("properties") or {}
    topic = str(m["topic"])
    history = failure_history_of(props.get(P.FAILURE_HISTORY))
    last_reason = next((a["reason"] for a in reversed(history) if a["reason"]), None)
    body: bytes | None = None
    if with_body:
        if "bodyBase64" in m:
            body = base64.b64decode(m["bodyBase64"])
        elif "body" in m:
            body = str(m["body"]).encode()
    size = m.get("bodySize")
    if size is None and body is not None:
        size = len(body)
    cols["msg_id"].append(m["msgId"])
    cols["topic"].append(topic)
    cols["queue_id"].append(m["queueId"])
    cols["queue_offset"].append(m["queueOffset"])
    cols["commitlog_offset"].append(m.get("commitLogOffset"))
    cols["store_timestamp_ms"].append(m["storeTimestamp"])
    cols["born_timestamp_ms"].append(m.get("bornTimestamp"))
    cols["tags"].append(m.get("tags") or None)
    cols["keys"].append(m.get("keys") or None)
    cols["flag"].append(m.get("flag"))
    cols["body_size_bytes"].append(size)
    cols["body"].append(body)
    cols["properties"].append(list(props.items()))
    cols["reconsume_times"].append(m.get("reconsumeTimes", 0))
    cols["max_reconsume_times"].append(_int_or_none(props.get(P.MAX_RECONSUME_TIMES)))
    cols["retry_topic"].append(props.get(P.RETRY_TOPIC))
    cols["origin_message_id"].append(props.get(P.ORIGIN_MESSAGE_ID))
    cols["real_topic"].append(props.get(P.REAL_TOPIC))
    cols["delay_level"].append(delay_level_of(props))
    cols["deliver_ts_ms"].append(_int_or_none(props.get(P.DELIVER_TS)))
    cols["consumer_group"].append(group_of(topic))
    cols["failure_reason"].append(last_reason or props.get(P.DLQ_REASON))
    cols["failure_history"].append(history)
    cols["dlq_reason"].append(props.get(P.DLQ_REASON))
    cols["trace_id"].append(trace_id_of(props.get(P.TRACEPARENT)))
    cols["exported_at_ms"].append(exported_at_ms)


def to_table(cols: dict[str, list[Any]]) -> pa.Table:
    return pa.Table.from_pydict(cols, schema=EXPORT_SCHEMA)


def table_of(messages: Sequence[dict[str, Any]], *, with_body: bool = False,
             exported_at_ms: int = 0) -> pa.Table:
    """An export table of store message views (tests, the bench)."""
    cols = empty_columns()
    for m in messages:
        append_message(cols, m, with_body=with_body, exported_at_ms=exported_at_ms)
    return to_table(cols)


SCHEDULE_SNAPSHOT = "schedule_levels"
SCHEDULE_SNAPSHOT_SCHEMA = pa.schema([
    pa.field("snapshot_ms", pa.int64(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("delay_ms", pa.int64()),
    pa.field("max_offset", pa.int64()),
    pa.field("handed_over", pa.int64()),
    pa.field("pending", pa.int64(), nullable=False),
])
"""Per delay level, the messages still waiting in the schedule topic when the exporter last
looked (``GET /v1/schedule/levels``): the schedule topic itself is never exported (S3)."""

LAG_SNAPSHOT = "consumer_lag"
LAG_SNAPSHOT_SCHEMA = pa.schema([
    pa.field("snapshot_ms", pa.int64(), nullable=False),
    pa.field("consumer_group", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("committed_offset", pa.int64()),
    pa.field("max_offset", pa.int64()),
    pa.field("lag", pa.int64(), nullable=False),
])
"""Per group, topic and queue: committed offset, the queue's end, and the difference."""
