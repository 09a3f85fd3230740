"""Column helpers shared by the transforms."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from clepsydra_core import naming

HOUR_PATTERN = "yyyy-MM-dd'T'HH"
MINUTE_PATTERN = "yyyy-MM-dd'T'HH:mm"


def utc_hour(ms: Column) -> Column:
    """``2026-11-25T10`` of an epoch-ms column (the session runs in UTC)."""
    return F.date_format(F.timestamp_millis(ms), HOUR_PATTERN)


def utc_minute(ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(ms), MINUTE_PATTERN)


def is_retry(topic: Column) -> Column:
    return topic.startswith(naming.RETRY_PREFIX)


def is_dlq(topic: Column) -> Column:
    return topic.startswith(naming.DLQ_PREFIX)


def is_user_topic(topic: Column) -> Column:
    system = F.lit(False)
    for prefix in naming.SYSTEM_PREFIXES:
        system = system | topic.startswith(prefix)
    for name in naming.SYSTEM_TOPICS:
        system = system | (topic == name)
    return ~system


def since(messages: DataFrame, since_ms: int) -> DataFrame:
    """The rows stored at or after ``since_ms``."""
    return messages.where(F.col("store_timestamp_ms") >= F.lit(since_ms))
