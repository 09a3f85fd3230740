"""Retry funnel per consumer group and original topic (SPEC R4-R8, R15).

For each (group, topic) the denominator is the topic's messages in the window (rows: the export
holds each message once); a group counts
for a topic when it has committed offsets on it (the lag snapshot) or retried / dead-lettered
one of its messages. A message's fate in a group comes from the group's ``%RETRY%`` copies
(``ORIGIN_MESSAGE_ID``, the highest ``reconsumeTimes`` = the retries it needed) and its
``%DLQ%`` copy. ``first_time`` = total - every message that failed at least once; a message
still waiting for its next retry counts at the retries seen so far.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from clepsydra_analytics.transforms.common import is_dlq, is_retry, is_user_topic


def failures(messages: DataFrame) -> DataFrame:
    """(consumer_group, topic, origin, retries, dead) per message that failed in a group."""
    copies = (messages
              .where((is_retry(F.col("topic")) | is_dlq(F.col("topic")))
                     & F.col("consumer_group").isNotNull())
              .select("consumer_group",
                      F.col("retry_topic").alias("orig_topic"),
                      F.coalesce("origin_message_id", "msg_id").alias("origin"),
                      F.when(is_retry(F.col("topic")), F.col("reconsume_times"))
                       .otherwise(F.lit(0)).alias("retries"),
                      is_dlq(F.col("topic")).cast("int").alias("dead")))
    return (copies.where(F.col("orig_topic").isNotNull())
            .groupBy("consumer_group", "orig_topic", "origin")
            .agg(F.max("retries").alias("retries"), F.max("dead").alias("dead"))
            .withColumnRenamed("orig_topic", "topic"))


def funnel(messages: DataFrame, lag_snapshot: DataFrame) -> DataFrame:
    """One row per (group, topic): total, first_time, after_retries (retries -> count),
    dead_lettered, and the share of each step (first_time_share, after_retries_share,
    dead_lettered_share)."""
    totals = (messages.where(is_user_topic(F.col("topic")))
              .groupBy("topic").agg(F.count(F.lit(1)).alias("total")))
    failed = failures(messages)
    pairs = (lag_snapshot.where(is_user_topic(F.col("topic")))
             .select("consumer_group", "topic")
             .unionByName(failed.select("consumer_group", "topic")).distinct())
    steps = (failed.where(F.col("dead") == 0).groupBy("consumer_group", "topic", "retries")
             .agg(F.count(F.lit(1)).alias("n"))
             .groupBy("consumer_group", "topic")
             .agg(F.map_from_entries(F.sort_array(F.collect_list(
                 F.struct(F.col("retries").cast("int"), F.col("n").cast("long"))))).alias(
                 "after_retries")))
    failed_counts = (failed.groupBy("consumer_group", "topic")
                     .agg(F.count(F.lit(1)).alias("failed"),
                          F.sum("dead").cast("long").alias("dead_lettered")))
    out = (pairs.join(totals, "topic", "left")
           .join(failed_counts, ["consumer_group", "topic"], "left")
           .join(steps, ["consumer_group", "topic"], "left"))
    total = F.greatest(F.coalesce(F.col("total"), F.lit(0)),
                       F.coalesce(F.col("failed"), F.lit(0))).cast("long")
    first = (total - F.coalesce(F.col("failed"), F.lit(0))).cast("long")
    dead = F.coalesce(F.col("dead_lettered"), F.lit(0)).cast("long")
    empty_map = F.create_map().cast("map<int,bigint>")
    return (out.select(
        "consumer_group", "topic", total.alias("total"), first.alias("first_time"),
        F.coalesce(F.col("after_retries"), empty_map).alias("after_retries"),
        dead.alias("dead_lettered"))
        .withColumn("first_time_share",
                    F.when(F.col("total") > 0, F.col("first_time") / F.col("total")))
        .withColumn("after_retries_share",
                    F.when(F.col("total") > 0, F.transform_values(
                        "after_retries", lambda _k, v: v / F.col("total"))))
        .withColumn("dead_lettered_share",
                    F.when(F.col("total") > 0, F.col("dead_lettered") / F.col("total")))
        .orderBy("consumer_group", "topic"))
