"""The analytics service's API (DESIGN "Analytics"), spoken by the service and the client's
``clepsydra report`` / ``clepsydra export`` commands:

- ``GET /v1/reports`` -> :class:`ReportList` of :class:`RunSummary`
- ``POST /v1/reports`` :class:`RunRequest` -> 201 :class:`RunResult`
- ``GET /v1/reports/{runId}`` -> :class:`RunResult` (its ``result.json``)
- ``GET /v1/export/status`` -> :class:`ExportStatus` of :class:`TopicStatus`
- ``GET /healthz`` -> :class:`AnalyticsHealth`

A run's tables (:class:`JobTables`) hold one row type per table, the job's columns in
camelCase (``clepsydra_analytics.rows``); a column Spark leaves empty is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.codec import WireValue, wire_meta

JOB_NAMES = ("lateness", "funnel", "dead-letters", "throughput")
"""The jobs a run can be asked for, in the order a run does them."""
EXPORT_MODES = ("exported", "waited", "skipped", "timeout", "store-unavailable")
"""How a run caught up with the store first (``clepsydra_analytics.runner.catch_up``)."""
EXAMPLE_RUN_ID = "20261125T103000123Z-1a2b"

_JOB = {"type": "string", "enum": list(JOB_NAMES)}


@dataclass(frozen=True, slots=True)
class RunRequest(WireValue):
    """Which jobs to run now (default: all) over which window (default
    CLEPSYDRA_ANALYTICS_SINCE); the body may be left out."""

    jobs: str | list[str] | None = field(default=None, metadata=wire_meta(
        doc=f"{', '.join(JOB_NAMES)} (default: all)",
        schema={"anyOf": [_JOB, {"type": "array", "items": _JOB}, {"type": "null"}]}))
    job: str | None = field(default=None, metadata=wire_meta(
        doc="one job (same as jobs)",
        schema={"enum": [*JOB_NAMES, None]}))
    since: str | None = field(default=None, metadata=wire_meta(
        type_code="INVALID_SINCE",
        doc="window, e.g. 2h (units s m h d); default CLEPSYDRA_ANALYTICS_SINCE"))

    def job_names(self) -> list[str] | None:
        """The jobs asked for (``jobs``, else ``job``), None: all; an unknown one refused
        naming it and the known ones."""
        raw = self.jobs if self.jobs is not None else self.job
        if raw is None:
            return None
        names = [raw] if isinstance(raw, str) else list(raw)
        for name in names:
            if name not in JOB_NAMES:
                raise ValidationError(f"unknown job {name!r}: the jobs are "
                                      f"{', '.join(JOB_NAMES)}", code="UNKNOWN_JOB")
        return names


@dataclass(frozen=True, slots=True)
class ExportOutcome(WireValue):
    """How the run caught up with the store before it read the export."""

    mode: str = field(metadata=wire_meta(schema={"enum": list(EXPORT_MODES)}))
    rows: int = 0


@dataclass(frozen=True, slots=True)
class LatenessRow(WireValue):
    """Delivery lateness of one delay level in one UTC hour (SPEC D10)."""

    level: int | None = None
    hour: str | None = None
    count: int | None = None
    p50_ms: int | None = None
    p95_ms: int | None = None
    p99_ms: int | None = None
    max_ms: int | None = None
    early: int | None = None
    pending: int | None = None


@dataclass(frozen=True, slots=True)
class FunnelRow(WireValue):
    """How a group's messages of a topic were consumed: the first time, after n retries, or
    dead-lettered."""

    group: str | None = None
    topic: str | None = None
    total: int | None = None
    first_time: int | None = None
    after_retries: dict[str, int] | None = None
    dead_lettered: int | None = None
    first_time_share: float | None = None
    after_retries_share: dict[str, float] | None = None
    dead_lettered_share: float | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterRow(WireValue):
    group: str | None = None
    topic: str | None = None
    reason: str | None = None
    count: int | None = None
    oldest_age_s: int | None = None


@dataclass(frozen=True, slots=True)
class ThroughputRow(WireValue):
    topic: str | None = None
    minute: str | None = None
    messages: int | None = None
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerLagRow(WireValue):
    group: str | None = None
    topic: str | None = None
    lag: int | None = None
    queues: int | None = None


@dataclass(frozen=True, slots=True)
class JobTables(WireValue):
    """Rows per table (at most ``ROWS_IN_RESULT_MAX`` each; the Parquet tables hold all); a
    table of a job not run is left out."""

    lateness: list[LatenessRow] | None = None
    funnel: list[FunnelRow] | None = None
    dead_letters: list[DeadLetterRow] | None = field(
        default=None, metadata=wire_meta(json="dead-letters"))
    throughput: list[ThroughputRow] | None = None
    consumer_lag: list[ConsumerLagRow] | None = field(
        default=None, metadata=wire_meta(json="consumer-lag"))

    def row_counts(self) -> dict[str, int]:
        """Rows per table present."""
        return {name: len(rows) for name, rows in self.to_json().items()}


@dataclass(frozen=True, slots=True)
class RunResult(WireValue):
    """A report run: what ran over which window, its tables, where its HTML report is."""

    run_id: str = field(metadata=wire_meta(schema={"example": EXAMPLE_RUN_ID}))
    report: str = field(metadata=wire_meta(doc="path of the HTML file"))
    jobs: JobTables
    ran: list[str] = field(default_factory=list)
    since_ms: int = 0
    now_ms: int = 0
    input_files: int = 0
    export: ExportOutcome | None = None
    elapsed_s: float | None = None
    report_url: str | None = field(default=None, metadata=wire_meta(
        doc="the HTML report's route (in the answer to a run)"))

    def summary(self) -> RunSummary:
        return RunSummary(self.run_id, self.now_ms, self.since_ms, self.ran, self.input_files,
                          self.report, self.jobs.row_counts())


@dataclass(frozen=True, slots=True)
class RunSummary(WireValue):
    """A report run without its rows: how many each table has."""

    run_id: str
    now_ms: int
    since_ms: int
    ran: list[str]
    input_files: int
    report: str
    rows: dict[str, int]


@dataclass(frozen=True, slots=True)
class ReportList(WireValue):
    """Report runs kept, newest first."""

    reports: list[RunSummary]


@dataclass(frozen=True, slots=True)
class TopicStatus(WireValue):
    """How far the export of one topic reaches, and how far behind the store it is."""

    topic: str
    queues: int
    exported_rows: int
    store_end: int = field(metadata=wire_meta(doc="sum of the queues' max offsets"))
    exported_end: int = field(metadata=wire_meta(
        doc="sum of the queues' exported ends (never past their max offsets)"))
    lag: int = field(metadata=wire_meta(minimum=0, doc="storeEnd - exportedEnd, in messages"))

    @classmethod
    def of(cls, topic: str, queues: int, exported_rows: int, store_end: int,
           exported_end: int) -> TopicStatus:
        return cls(topic, queues, exported_rows, store_end, exported_end,
                   max(0, store_end - exported_end))


@dataclass(frozen=True, slots=True)
class ExportStatus(WireValue):
    export_uri: str
    topics: list[TopicStatus]


@dataclass(frozen=True, slots=True)
class AnalyticsHealth(WireValue):
    """The API answers; whether the store does is reported."""

    status: str
    store: bool
    export_uri: str
    reports: str = field(metadata=wire_meta(doc="the reports folder"))
