"""Delivery lateness per delay level and hour (SPEC D10).

Every delivered delayed message carries ``DELIVER_TS`` (its intended deliver time) and its level
(``SCHEDULE_OFFSET``): lateness = the store timestamp of the delivered copy - the intended
time. First deliveries and retry waits (delayed copies into ``%RETRY%``) both count: each is
one delayed delivery. ``hour`` is the UTC hour of the intended deliver time. ``early`` counts
deliveries before their time (the scheduler must make it 0). ``pending`` comes from the
exporter's schedule snapshot (messages still in the schedule topic), in the snapshot's hour.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from clepsydra_analytics.transforms.common import utc_hour

PERCENTILE_ACCURACY = 10_000

OUTPUT_SCHEMA = StructType([
    StructField("level", IntegerType(), False),
    StructField("hour", StringType(), False),
    StructField("count", LongType(), False),
    StructField("p50_ms", LongType(), True),
    StructField("p95_ms", LongType(), True),
    StructField("p99_ms", LongType(), True),
    StructField("max_ms", LongType(), True),
    StructField("early", LongType(), False),
    StructField("pending", LongType(), False),
])


def delivered_lateness(messages: DataFrame) -> DataFrame:
    """(level, hour, lateness_ms) of every delivered delayed message."""
    return (messages
            .where(F.col("deliver_ts_ms").isNotNull() & F.col("delay_level").isNotNull())
            .select(F.col("delay_level").alias("level"),
                    utc_hour(F.col("deliver_ts_ms")).alias("hour"),
                    (F.col("store_timestamp_ms") - F.col("deliver_ts_ms")).alias("lateness_ms")))


def pending_by_level(schedule_snapshot: DataFrame) -> DataFrame:
    """(level, hour, pending) of the snapshot's levels that have messages waiting."""
    return (schedule_snapshot.where(F.col("pending") > 0)
            .select(F.col("level").cast("int").alias("level"),
                    utc_hour(F.col("snapshot_ms")).alias("hour"),
                    F.col("pending").cast("long").alias("pending")))


def lateness(messages: DataFrame, schedule_snapshot: DataFrame) -> DataFrame:
    """One row per (level, hour): count, p50/p95/p99/max lateness in ms, early, pending."""
    late = delivered_lateness(messages)
    pct = F.percentile_approx("lateness_ms", [0.5, 0.95, 0.99], PERCENTILE_ACCURACY)
    stats = (late.groupBy("level", "hour")
             .agg(F.count(F.lit(1)).alias("count"), pct.alias("pct"),
                  F.max("lateness_ms").alias("max_ms"),
                  F.sum(F.when(F.col("lateness_ms") < 0, 1).otherwise(0)).alias("early")))
    joined = stats.join(pending_by_level(schedule_snapshot), ["level", "hour"], "full_outer")
    return (joined.select(
        F.col("level").cast("int").alias("level"),
        F.col("hour"),
        F.coalesce(F.col("count"), F.lit(0)).cast("long").alias("count"),
        F.col("pct")[0].cast("long").alias("p50_ms"),
        F.col("pct")[1].cast("long").alias("p95_ms"),
        F.col("pct")[2].cast("long").alias("p99_ms"),
        F.col("max_ms").cast("long").alias("max_ms"),
        F.coalesce(F.col("early"), F.lit(0)).cast("long").alias("early"),
        F.coalesce(F.col("pending"), F.lit(0)).cast("long").alias("pending"))
        .orderBy("level", "hour"))
