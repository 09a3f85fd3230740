"""Delivery lateness per level and hour (SPEC D10)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from clepsydra_analytics import schemas
from clepsydra_analytics.transforms.lateness import OUTPUT_SCHEMA, lateness
from tests.spark.conftest import export_frame, message, snapshot_frame

pytestmark = pytest.mark.spark

T0 = 1_764_064_800_000  # 2025-11-25T10:00:00Z
HOUR = "2025-11-25T10"


def delivered(msg_id: str, level: int, late_ms: int, deliver_ms: int = T0) -> dict[str, object]:
    return message(msg_id, "orders", deliver_ms + late_ms, delay_level=level,
                   deliver_ts_ms=deliver_ms)


def no_pending(spark: SparkSession):  # type: ignore[no-untyped-def]
    return snapshot_frame(spark, [], schemas.SCHEDULE_SNAPSHOT_SCHEMA)


def test_empty_input_gives_no_rows(spark: SparkSession) -> None:
    actual = lateness(export_frame(spark, []), no_pending(spark))
    assertDataFrameEqual(actual, spark.createDataFrame([], OUTPUT_SCHEMA))


def test_one_message(spark: SparkSession) -> None:
    actual = lateness(export_frame(spark, [delivered("a", 3, 12)]), no_pending(spark))
    expected = spark.createDataFrame([(3, HOUR, 1, 12, 12, 12, 12, 0, 0)], OUTPUT_SCHEMA)
    assertDataFrameEqual(actual, expected)


def test_plain_messages_are_not_delayed_deliveries(spark: SparkSession) -> None:
    rows = [message("p", "orders", T0), delivered("a", 1, 5)]
    actual = lateness(export_frame(spark, rows), no_pending(spark))
    assertDataFrameEqual(actual.select("level", "count"),
                         spark.createDataFrame([(1, 1)], "level int, count long"))


def test_late_outlier_shows_in_max_and_p99_not_p50(spark: SparkSession) -> None:
    rows = [delivered(f"m{i}", 2, 10) for i in range(99)] + [delivered("slow", 2, 60_000)]
    actual = lateness(export_frame(spark, rows), no_pending(spark))
    expected = spark.createDataFrame([(2, HOUR, 100, 10, 10, 10, 60_000, 0, 0)], OUTPUT_SCHEMA)
    assertDataFrameEqual(actual, expected)


def test_early_delivery_is_counted(spark: SparkSession) -> None:
    rows = [delivered("ok", 1, 3), delivered("early", 1, -250)]
    actual = lateness(export_frame(spark, rows), no_pending(spark))
    assertDataFrameEqual(actual.select("level", "count", "early", "max_ms"),
                         spark.createDataFrame([(1, 2, 1, 3)],
                                               "level int, count long, early long, max_ms long"))


def test_pending_messages_per_level(spark: SparkSession) -> None:
    rows = [delivered("a", 3, 7)]
    snapshot = snapshot_frame(spark, [
        {"snapshot_ms": T0 + 60_000, "level": 3, "delay_ms": 10_000, "max_offset": 5,
         "handed_over": 1, "pending": 3},
        {"snapshot_ms": T0 + 60_000, "level": 5, "delay_ms": 60_000, "max_offset": 2,
         "handed_over": -1, "pending": 2},
        {"snapshot_ms": T0 + 60_000, "level": 1, "delay_ms": 1_000, "max_offset": 0,
         "handed_over": -1, "pending": 0},
    ], schemas.SCHEDULE_SNAPSHOT_SCHEMA)
    actual = lateness(export_frame(spark, rows), snapshot)
    expected = spark.createDataFrame([(3, HOUR, 1, 7, 7, 7, 7, 0, 3),
                                      (5, HOUR, 0, None, None, None, None, 0, 2)], OUTPUT_SCHEMA)
    assertDataFrameEqual(actual, expected)


def test_levels_and_hours_are_separate_rows(spark: SparkSession) -> None:
    rows = [delivered("a", 1, 4), delivered("b", 1, 6, deliver_ms=T0 + 3_600_000),
            delivered("c", 2, 9)]
    actual = lateness(export_frame(spark, rows), no_pending(spark))
    assertDataFrameEqual(actual.select("level", "hour", "count"), spark.createDataFrame(
        [(1, HOUR, 1), (1, "2025-11-25T11", 1), (2, HOUR, 1)],
        "level int, hour string, count long"))
