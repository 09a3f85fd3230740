"""Retry funnel per group and topic, dead letters by group, topic and reason (SPEC R4-R8,
R16), throughput per topic and minute."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from clepsydra_analytics import schemas
from clepsydra_analytics.transforms.dead_letters import dead_letters
from clepsydra_analytics.transforms.funnel import funnel
from clepsydra_analytics.transforms.throughput import consumer_lag, throughput
from tests.spark.conftest import export_frame, message, snapshot_frame

pytestmark = pytest.mark.spark

T0 = 1_764_064_800_000  # 2025-11-25T10:00:00Z
FUNNEL_COLUMNS = "consumer_group string, topic string, total long, first_time long, " \
                 "after_retries map<int,bigint>, dead_lettered long"


def retry_copy(msg_id: str, origin: str, reconsume: int, *, group: str = "billing",
               topic: str = "orders", at: int = T0) -> dict[str, Any]:
    return message(msg_id, f"%RETRY%{group}", at, consumer_group=group, retry_topic=topic,
                   origin_message_id=origin, reconsume_times=reconsume)


def dlq_copy(msg_id: str, origin: str, reason: str | None, *, group: str = "billing",
             topic: str = "orders", at: int = T0, dlq_reason: str = "max_reconsume_times",
             ) -> dict[str, Any]:
    return message(msg_id, f"%DLQ%{group}", at, consumer_group=group, retry_topic=topic,
                   origin_message_id=origin, reconsume_times=3, failure_reason=reason,
                   dlq_reason=dlq_reason)


def lag(spark: SparkSession, *pairs: tuple[str, str, int]) -> DataFrame:
    return snapshot_frame(spark, [
        {"snapshot_ms": T0, "consumer_group": g, "topic": t, "queue_id": 0,
         "committed_offset": 0, "max_offset": n, "lag": n} for g, t, n in pairs],
        schemas.LAG_SNAPSHOT_SCHEMA)


def test_funnel_of_empty_input(spark: SparkSession) -> None:
    actual = funnel(export_frame(spark, []), lag(spark)).drop(
        "first_time_share", "after_retries_share", "dead_lettered_share")
    assertDataFrameEqual(actual, spark.createDataFrame([], FUNNEL_COLUMNS))


def test_funnel_one_message_consumed_first_time(spark: SparkSession) -> None:
    rows = [message("m1", "orders", T0)]
    actual = funnel(export_frame(spark, rows), lag(spark, ("billing", "orders", 0)))
    assertDataFrameEqual(actual.select("consumer_group", "total", "first_time",
                                       "first_time_share", "dead_lettered"),
                         spark.createDataFrame([("billing", 1, 1, 1.0, 0)],
                                               "consumer_group string, total long, "
                                               "first_time long, first_time_share double, "
                                               "dead_lettered long"))


def test_funnel_steps_and_a_message_retried_to_the_dlq(spark: SparkSession) -> None:
    rows = [message(f"m{i}", "orders", T0, queue_offset=i) for i in range(5)]
    rows += [retry_copy("r1", "m1", 1),                       # m1: once
             retry_copy("r2a", "m2", 1), retry_copy("r2b", "m2", 2),   # m2: twice
             retry_copy("r3a", "m3", 1), retry_copy("r3b", "m3", 2),  # m3: retried to the DLQ
             dlq_copy("d3", "m3", "ValueError: bad order")]
    actual = funnel(export_frame(spark, rows), lag(spark))
    expected = spark.createDataFrame([("billing", "orders", 5, 2, {1: 1, 2: 1}, 1)],
                                     FUNNEL_COLUMNS)
    assertDataFrameEqual(actual.drop("first_time_share", "after_retries_share",
                                     "dead_lettered_share"), expected)
    assertDataFrameEqual(actual.select("first_time_share", "after_retries_share",
                                       "dead_lettered_share"),
                         spark.createDataFrame([(0.4, {1: 0.2, 2: 0.2}, 0.2)],
                                               "first_time_share double, after_retries_share "
                                               "map<int,double>, dead_lettered_share double"))


def test_funnel_is_per_group(spark: SparkSession) -> None:
    rows = [message("m1", "orders", T0), message("m2", "orders", T0),
            retry_copy("r1", "m1", 1, group="audit")]
    actual = funnel(export_frame(spark, rows), lag(spark, ("billing", "orders", 0)))
    assertDataFrameEqual(actual.select("consumer_group", "total", "first_time"),
                         spark.createDataFrame([("audit", 2, 1), ("billing", 2, 2)],
                                               "consumer_group string, total long, "
                                               "first_time long"))


def test_dead_letters_by_reason_with_oldest_age(spark: SparkSession) -> None:
    rows = [dlq_copy("d1", "m1", "ValueError: bad order", at=T0 - 120_000),
            dlq_copy("d2", "m2", "ValueError: bad order", at=T0 - 5_000),
            dlq_copy("d3", "m3", None, dlq_reason="level_negative", at=T0 - 1_000),
            dlq_copy("d4", "m4", "KeyError: sku", group="audit", topic="payments", at=T0),
            message("x", "orders", T0)]
    actual = dead_letters(export_frame(spark, rows), now_ms=T0)
    expected = spark.createDataFrame([
        ("billing", "orders", "ValueError: bad order", 2, 120),
        ("audit", "payments", "KeyError: sku", 1, 0),
        ("billing", "orders", "level_negative", 1, 1)],
        "consumer_group string, topic string, reason string, count long, oldest_age_s long")
    assertDataFrameEqual(actual, expected, checkRowOrder=True)


def test_dead_letters_of_empty_input(spark: SparkSession) -> None:
    assert dead_letters(export_frame(spark, []), now_ms=T0).count() == 0


def test_throughput_per_topic_and_minute(spark: SparkSession) -> None:
    rows = [message("a", "orders", T0), message("b", "orders", T0 + 59_999),
            message("c", "orders", T0 + 60_000), message("d", "%RETRY%billing", T0)]
    actual = throughput(export_frame(spark, rows))
    expected = spark.createDataFrame([
        ("%RETRY%billing", "2025-11-25T10:00", 1, 10),
        ("orders", "2025-11-25T10:00", 2, 20), ("orders", "2025-11-25T10:01", 1, 10)],
        "topic string, minute string, messages long, bytes long")
    assertDataFrameEqual(actual, expected)


def test_consumer_lag_takes_the_newest_snapshot(spark: SparkSession) -> None:
    rows = [{"snapshot_ms": ms, "consumer_group": "billing", "topic": "orders", "queue_id": q,
             "committed_offset": 0, "max_offset": lag_n, "lag": lag_n}
            for ms, q, lag_n in ((T0, 0, 50), (T0 + 1, 0, 4), (T0 + 1, 1, 3))]
    actual = consumer_lag(snapshot_frame(spark, rows, schemas.LAG_SNAPSHOT_SCHEMA))
    assertDataFrameEqual(actual, spark.createDataFrame(
        [("billing", "orders", 7, 2)],
        "consumer_group string, topic string, lag long, queues long"))


def test_dead_letters_of_one_message(spark: SparkSession) -> None:
    """One message, retried to the DLQ, is one row naming its reason."""
    rows = [message("m1", "orders", T0 - 9_000), retry_copy("r1", "m1", 1, at=T0 - 6_000),
            dlq_copy("d1", "m1", "KeyError: sku", at=T0 - 3_000)]
    actual = dead_letters(export_frame(spark, rows), now_ms=T0)
    assertDataFrameEqual(actual, spark.createDataFrame(
        [("billing", "orders", "KeyError: sku", 1, 3)],
        "consumer_group string, topic string, reason string, count long, oldest_age_s long"))


def test_throughput_and_consumer_lag_of_empty_input(spark: SparkSession) -> None:
    """Empty input gives no rows (and no error) in the throughput job."""
    assert throughput(export_frame(spark, [])).count() == 0
    assert consumer_lag(lag(spark)).count() == 0


def test_throughput_of_one_message(spark: SparkSession) -> None:
    actual = throughput(export_frame(spark, [message("a", "orders", T0 + 1)]))
    assertDataFrameEqual(actual, spark.createDataFrame(
        [("orders", "2025-11-25T10:00", 1, 10)],
        "topic string, minute string, messages long, bytes long"))
