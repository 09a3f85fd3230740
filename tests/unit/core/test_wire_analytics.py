"""The analytics API's values as wire types: each round-trips through
to_json/from_json, a bad value is refused naming the field, and a run request names the
unknown job."""

from __future__ import annotations

from typing import Any

import pytest

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.analytics import (
    JOB_NAMES,
    AnalyticsHealth,
    ConsumerLagRow,
    DeadLetterRow,
    ExportOutcome,
    ExportStatus,
    FunnelRow,
    JobTables,
    LatenessRow,
    ReportList,
    RunRequest,
    RunResult,
    RunSummary,
    ThroughputRow,
    TopicStatus,
)
from clepsydra_core.wire.codec import WireValue

TABLES = JobTables(
    lateness=[LatenessRow(3, "2025-11-25T10", 4, 5, 9, 9, 9, 0, 1)],
    funnel=[FunnelRow("billing", "orders", 4, 2, {"1": 1}, 1, 0.5, {"1": 0.25}, 0.25)],
    dead_letters=[DeadLetterRow("billing", "orders", "boom", 1, 30)],
    throughput=[ThroughputRow("orders", "2025-11-25T10:00", 10, 400)],
    consumer_lag=[ConsumerLagRow("billing", "orders", 3, 2)])
RESULT = RunResult("20261125T100000Z-abcd", "/r/report.html", TABLES, ["lateness"], 1, 2, 3,
                   ExportOutcome("skipped"), 1.5, "/v1/reports/x/report.html")

VALUES: list[WireValue] = [
    RunRequest(jobs=["lateness", "funnel"], since="2h"), RunRequest(job="throughput"),
    RunRequest(), RESULT, RESULT.summary(), ReportList([RESULT.summary()]),
    ExportStatus("file:///x", [TopicStatus.of("orders", 2, 40, 45, 40)]),
    AnalyticsHealth("ok", False, "file:///x", "/reports"),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(value: WireValue) -> None:
    raw = value.to_json()
    assert type(value).from_json(raw) == value
    assert type(value).from_json(raw).to_json() == raw


def test_tables_keep_the_jobs_names_and_count_rows() -> None:
    raw = TABLES.to_json()
    assert set(raw) == {"lateness", "funnel", "dead-letters", "throughput", "consumer-lag"}
    assert raw["lateness"][0]["p50Ms"] == 5 and raw["funnel"][0]["afterRetries"] == {"1": 1}
    assert RESULT.summary().rows == dict.fromkeys(raw, 1)
    assert JobTables(lateness=[]).row_counts() == {"lateness": 0}


def test_a_share_stays_the_number_it_was() -> None:
    row = FunnelRow.from_json({"firstTimeShare": 1, "deadLetteredShare": 0.5})
    assert row.to_json() == {"firstTimeShare": 1, "deadLetteredShare": 0.5}


def test_topic_status_lag_never_below_zero() -> None:
    assert TopicStatus.of("t", 1, 5, 3, 5).lag == 0
    assert TopicStatus.of("t", 1, 5, 9, 5).lag == 4


def test_run_request_job_names() -> None:
    assert RunRequest().job_names() is None
    assert RunRequest(job="funnel").job_names() == ["funnel"]
    assert RunRequest(jobs="lateness").job_names() == ["lateness"]
    assert RunRequest(jobs=list(JOB_NAMES)).job_names() == list(JOB_NAMES)
    with pytest.raises(ValidationError, match="unknown job 'nope'") as err:
        RunRequest(jobs=["lateness", "nope"]).job_names()
    assert err.value.code == "UNKNOWN_JOB"


@pytest.mark.parametrize(("raw", "words", "code"), [
    ({"jobs": 3}, "run.jobs must be a string or an array of strings", "INVALID_REQUEST"),
    ({"jobs": [1]}, r"run.jobs\[0\] must be a string", "INVALID_REQUEST"),
    ({"since": 2}, "run.since must be a string", "INVALID_SINCE"),
    ({"when": "now"}, "run: unknown field 'when'", "INVALID_REQUEST"),
])
def test_bad_run_requests_name_the_field(raw: dict[str, Any], words: str, code: str) -> None:
    with pytest.raises(ValidationError, match=words) as err:
        RunRequest.from_json(raw, what="run", strict=True)
    assert err.value.code == code


@pytest.mark.parametrize(("cls", "raw", "words"), [
    (RunResult, {"runId": "r", "report": "p", "jobs": {"lateness": [{"p50Ms": "5"}]}},
     r"RunResult.jobs.lateness\[0\].p50Ms must be an integer"),
    (RunResult, {"runId": "r", "report": "p"}, "RunResult.jobs is required"),
    (RunSummary, {"runId": "r", "nowMs": 1, "sinceMs": 0, "ran": [], "inputFiles": 0,
                  "report": "p", "rows": {"lateness": "1"}},
     r"RunSummary.rows\['lateness'\] must be an integer"),
    (FunnelRow, {"afterRetriesShare": {"1": "half"}},
     r"FunnelRow.afterRetriesShare\['1'\] must be a number"),
    (TopicStatus, {"topic": "t", "queues": 1, "exportedRows": 0, "storeEnd": 0,
                   "exportedEnd": 0, "lag": -1}, "TopicStatus.lag must be between 0"),
])
def test_bad_answers_name_the_field(cls: type[WireValue], raw: dict[str, Any],
                                    words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        cls.from_json(raw)
