"""Throughput per topic and minute, and consumer lag per group and topic."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from clepsydra_analytics.transforms.common import utc_minute


def throughput(messages: DataFrame) -> DataFrame:
    """One row per (topic, minute): messages stored and their body bytes."""
    return (messages.groupBy("topic", utc_minute(F.col("store_timestamp_ms")).alias("minute"))
            .agg(F.count(F.lit(1)).cast("long").alias("messages"),
                 F.coalesce(F.sum("body_size_bytes"), F.lit(0)).cast("long").alias("bytes"))
            .orderBy("topic", "minute"))


def consumer_lag(lag_snapshot: DataFrame) -> DataFrame:
    """One row per (group, topic) of the newest snapshot: messages not yet consumed."""
    newest = lag_snapshot.agg(F.max("snapshot_ms").alias("snapshot_ms"))
    return (lag_snapshot.join(newest, "snapshot_ms")
            .groupBy("consumer_group", "topic")
            .agg(F.sum("lag").cast("long").alias("lag"),
                 F.count(F.lit(1)).cast("long").alias("queues"))
            .orderBy("consumer_group", "topic"))
