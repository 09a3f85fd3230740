"""Dead letters by group, original topic and failure reason (SPEC R6, R16).

The reason is the last one the consumer's SDK recorded in ``FAILURE_HISTORY`` (the exception's
type and text), else the store's / retry service's ``DLQ_REASON``. ``oldest_age_s`` is the age,
at ``now_ms``, of the oldest dead letter of the row. Messages resent or purged through the DLQ
toolkit stay in the export (the retry service hides them in Redis): the counts are what
arrived in the DLQ.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from clepsydra_analytics.transforms.common import is_dlq

UNKNOWN_REASON = "(no reason recorded)"


def dead_letters(messages: DataFrame, now_ms: int) -> DataFrame:
    """One row per (group, topic, reason): count and oldest_age_s, most frequent first."""
    dlq = messages.where(is_dlq(F.col("topic")) & F.col("consumer_group").isNotNull())
    return (dlq.select(
        "consumer_group",
        F.coalesce(F.col("retry_topic"), F.col("topic")).alias("topic"),
        F.coalesce(F.col("failure_reason"), F.col("dlq_reason"),
                   F.lit(UNKNOWN_REASON)).alias("reason"),
        "store_timestamp_ms")
        .groupBy("consumer_group", "topic", "reason")
        .agg(F.count(F.lit(1)).cast("long").alias("count"),
             F.min("store_timestamp_ms").alias("oldest_ms"))
        .select("consumer_group", "topic", "reason", "count",
                F.floor((F.lit(now_ms) - F.col("oldest_ms")) / 1000).cast("long")
                .alias("oldest_age_s"))
        .orderBy(F.col("count").desc(), "consumer_group", "topic", "reason"))
