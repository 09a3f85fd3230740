"""Analytics settings, topic patterns, export file names and the message -> row conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clepsydra_analytics import schemas
from clepsydra_analytics.export_files import ExportFiles, hour_of
from clepsydra_analytics.rows import camel, rows_json
from clepsydra_analytics.settings import AnalyticsSettings, TopicPatterns, parse_duration_s
from clepsydra_core import naming
from clepsydra_core.errors import ConfigError, ValidationError


def test_defaults_follow_clepsydra_home(tmp_path: Path) -> None:
    s = AnalyticsSettings.from_env({"CLEPSYDRA_HOME": str(tmp_path)})
    assert s.export_uri == str(tmp_path / "export")
    assert s.reports_dir == tmp_path / "reports"
    assert (s.port, s.spark_master, s.schedule_interval_s) == (8085, "local[*]", 3600.0)


@pytest.mark.parametrize(("name", "value"), [
    ("CLEPSYDRA_ANALYTICS_PORT", "http"), ("CLEPSYDRA_ANALYTICS_EXPORT_PULL_MAX", "5000"),
    ("CLEPSYDRA_ANALYTICS_SINCE", "2 hours"), ("CLEPSYDRA_ANALYTICS_TOPICS", " , "),
    ("CLEPSYDRA_ANALYTICS_EXPORT_BODY", "maybe"), ("CLEPSYDRA_ANALYTICS_RUNS_KEPT", "0"),
])
def test_a_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        AnalyticsSettings.from_env({name: value})


def test_default_patterns_take_user_retry_and_dlq_topics_only() -> None:
    p = TopicPatterns.parse("*,%RETRY%*,%DLQ%*")
    assert p.matches("orders") and p.matches("%RETRY%billing") and p.matches("%DLQ%billing")
    assert not p.matches(naming.SCHEDULE_TOPIC) and not p.matches(naming.SCHEDULE_ERROR_TOPIC)
    only = TopicPatterns.parse("pay*")
    assert only.matches("payments") and not only.matches("orders")
    assert not only.matches("%RETRY%pay")


def test_durations() -> None:
    assert [parse_duration_s(t) for t in ("90s", "30m", "2h", "7d")] == [90, 1800, 7200, 604800]
    for bad in ("", "2", "-1h", "1.5h", "0h", "2 h"):
        with pytest.raises(ValidationError, match="not a duration"):
            parse_duration_s(bad)


def test_export_file_names_round_trip() -> None:
    name = naming.export_file_name(3, 100, 200)
    assert naming.parse_export_file_name(name) == (3, 100, 200)
    assert naming.parse_export_file_name(".tmp-x-" + name) is None
    assert naming.topic_of_export_dir(naming.export_topic_dir("%RETRY%g/1")) == "%RETRY%g/1"
    assert "%" not in naming.export_topic_dir("orders")
    assert hour_of(1_764_064_800_000) == "2025-11-25T10"


def test_export_layout_under_the_schema_version(tmp_path: Path) -> None:
    files = ExportFiles(str(tmp_path / "export"))
    assert files.hour_dir("%DLQ%g", "2025-11-25T10") == str(
        tmp_path / "export" / "v1" / "topic=%25DLQ%25g" / "hour=2025-11-25T10")


def test_message_row_carries_the_lifecycle_columns() -> None:
    history = [{"time": 5, "consumer": "c1", "reason": "KeyError: a", "reconsumeTimes": 0},
               {"time": 9, "consumer": "c1", "reason": "ValueError: b", "reconsumeTimes": 1}]
    message = {"msgId": "M1", "topic": "%DLQ%billing", "queueId": 0, "queueOffset": 7,
               "commitLogOffset": 900, "storeTimestamp": 1000, "bornTimestamp": 990,
               "tags": "", "keys": "k1 k2", "flag": 0, "bodySize": 12, "reconsumeTimes": 2,
               "properties": {"RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": "M0",
                              "MAX_RECONSUME_TIMES": "2", "DLQ_REASON": "max_reconsume_times",
                              "FAILURE_HISTORY": json.dumps(history),
                              "SCHEDULE_OFFSET": "3:41", "DELIVER_TS": "995",
                              "traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-03"}}
    [row] = schemas.table_of([message], exported_at_ms=2000).to_pylist()
    assert row["consumer_group"] == "billing" and row["retry_topic"] == "orders"
    assert (row["origin_message_id"], row["max_reconsume_times"]) == ("M0", 2)
    assert (row["delay_level"], row["deliver_ts_ms"]) == (3, 995)
    assert row["failure_reason"] == "ValueError: b" and row["dlq_reason"] == "max_reconsume_times"
    assert [a["reason"] for a in row["failure_history"]] == ["KeyError: a", "ValueError: b"]
    assert row["trace_id"] == "ab" * 16 and row["tags"] is None and row["body_size_bytes"] == 12
    assert schemas.EXPORT_SCHEMA.metadata[schemas.VERSION_METADATA_KEY] == b"1"


def test_unreadable_failure_history_keeps_its_text() -> None:
    assert schemas.failure_history_of("oops")[0]["reason"] == "oops"
    assert schemas.failure_history_of(None) == []


def test_rows_are_camel_case_with_group() -> None:
    assert [camel(n) for n in ("p50_ms", "oldest_age_s", "consumer_group", "count")] == [
        "p50Ms", "oldestAgeS", "group", "count"]
    assert rows_json([{"after_retries": {2: 1, 1: 3}, "first_time_share": 2 / 3}]) == [
        {"afterRetries": {"1": 3, "2": 1}, "firstTimeShare": 0.666667}]


def test_run_ids_sort_by_start_time_to_the_millisecond() -> None:
    assert naming.report_run_id(1_764_064_800_999, "ffff") < naming.report_run_id(
        1_764_064_801_000, "0000")
    assert naming.report_run_id(1_764_064_800_001, "ffff") < naming.report_run_id(
        1_764_064_800_002, "0000")
    assert naming.report_run_id(1_764_064_800_123, "1a2b") == "20251125T100000123Z-1a2b"
