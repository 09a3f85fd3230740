"""Every system topic name, file name and Redis key, in one place (STYLE: never inline)."""

from __future__ import annotations

import time
from urllib.parse import quote, unquote

# ---- service names (OpenTelemetry resource ``service.name``, log lines' ``service``) --------
# here, not in telemetry.py, so a process that only names itself (a gunicorn master) does not
# import OpenTelemetry (DEC-memory-at-rest); runtime.telemetry re-exports them
STORE_SERVICE = "clepsydra-store"
SCHEDULER_SERVICE = "clepsydra-scheduler"
RETRY_SERVICE = "clepsydra-retry"
CLIENT_SERVICE = "clepsydra-client"
ANALYTICS_SERVICE = "clepsydra-analytics"
CONSOLE_SERVICE = "clepsydra-console"
GATEWAY_SERVICE = "clepsydra-gateway"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""System topic with one queue per delay level (SPEC S1, L3)."""

TIMER_TOPIC = "TIMER_TOPIC_XXXX"
"""System topic of timer messages (SPEC T1): queue ``TIMER_LOG_QUEUE`` is the timer
log (one entry per parked timer message, tagsCode = its deliver time), queue
``TIMER_CANCEL_QUEUE`` holds the cancel tombstones."""
TIMER_LOG_QUEUE = 0
TIMER_CANCEL_QUEUE = 1

SCHEDULE_ERROR_TOPIC = "%SCHEDULE_ERROR%"
"""Parking topic for delayed messages that cannot be rebuilt (SPEC D7)."""

TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""Transaction-half topic: delayed messages aimed at it are parked (SPEC D7)."""

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, SCHEDULE_ERROR_TOPIC)
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, SCHEDULE_ERROR_TOPIC,
                           TRANSACTION_HALF_TOPIC})

REDIS_PREFIX = "clepsydra"


def retry_topic(group: str) -> str:
    """`%RETRY%<group>` (SPEC R3)."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """`%DLQ%<group>` (SPEC R6)."""
    return DLQ_PREFIX + group


def group_of_retry_topic(topic: str) -> str | None:
    """The group a `%RETRY%` topic belongs to, or None for any other topic."""
    return topic[len(RETRY_PREFIX):] if topic.startswith(RETRY_PREFIX) else None


def group_of_dlq_topic(topic: str) -> str | None:
    """The group a `%DLQ%` topic belongs to, or None for any other topic."""
    return topic[len(DLQ_PREFIX):] if topic.startswith(DLQ_PREFIX) else None


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_PREFIX)


def is_system_topic(topic: str) -> bool:
    """Schedule, parking, transaction, retry and DLQ topics."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES)


# ---- files (store) -------------------------------------------------------------------------

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint.json"
TOPICS_FILE = "topics.json"
GROUP_OFFSETS_FILE = "group_offsets.json"
GROUP_SETTINGS_FILE = "group_settings.json"
KEY_INDEX_DIR = "keys"
"""The key index files, under INDEX_DIR."""
KEY_INDEX_FILE = "keys.idx"
"""The key index's former format (one file loaded whole into memory): removed at
start, the index is rebuilt from the CommitLog."""
TIMER_SLOTS_DIR = "timerslots"
"""The timer index's time-bucketed slot files (SPEC T2), under the store's data folder."""


def segment_file_name(start_offset: int) -> str:
    """A CommitLog or ConsumeQueue segment is named by its 20-digit start offset."""
    return f"{start_offset:020d}"


def store_dir_name(shard: int) -> str:
    """A store shard's data folder under CLEPSYDRA_HOME in the local stack: ``store`` for shard
    0 (the folder of a one-store stack, unchanged), ``store-<id>`` for the others."""
    return "store" if shard == 0 else f"store-{shard}"


CLUSTER_FILE = "cluster.json"
"""A store shard's own cluster state (its write permission, topic tombstones), under
CONFIG_DIR (DEC-shard-drain)."""


# ---- Redis keys ----------------------------------------------------------------------------


def _shard_part(shard: int) -> str:
    """The shard's part of a scheduler key: nothing for shard 0, whose keys are the ones a
    one-store stack always had (DEC-shard-keys), ``shard:<id>:`` for the others."""
    return "" if shard == 0 else f"shard:{shard}:"


def delay_offset_key(level: int, shard: int = 0) -> str:
    """Progress (schedule queue offset) of one delay level of one store shard (SPEC D2)."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}offset:{level}"


def delay_lease_key(level: int, shard: int = 0) -> str:
    """Lease that makes one worker the active deliverer of a level of one store shard."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}lease:{level}"


def delay_fence_key(level: int, shard: int = 0) -> str:
    """Counter of a level's fencing tokens on one store shard: each lease taken gets the next
    one, and the shard refuses a hand-over carrying one older than it has seen
    (DEC-scheduler-lease)."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}fence:{level}"


def delay_stats_key(level: int, shard: int = 0) -> str:
    """Hash of a level's delivery statistics (delivered count, lateness buckets, lag) on one
    store shard."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}stats:{level}"


TIMER_LEASE_KEY = f"{REDIS_PREFIX}:schedule:lease:timers"
"""Lease that makes one worker the active deliverer of shard 0's timers (SPEC T1)."""
TIMER_FENCE_KEY = f"{REDIS_PREFIX}:schedule:fence:timers"
"""Counter of shard 0's timers' fencing tokens (as ``delay_fence_key`` for a level)."""


def timer_lease_key(shard: int = 0) -> str:
    """Lease of one store shard's timers (:data:`TIMER_LEASE_KEY` for shard 0)."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}lease:timers"


def timer_fence_key(shard: int = 0) -> str:
    """Fencing-token counter of one store shard's timers (:data:`TIMER_FENCE_KEY` for shard
    0)."""
    return f"{REDIS_PREFIX}:schedule:{_shard_part(shard)}fence:timers"


WORKER_INCARNATION_KEY = f"{REDIS_PREFIX}:schedule:incarnation"
"""Counter each scheduler worker process takes its incarnation number from once (never below
Redis's clock in microseconds): of two processes of one worker identity, the later one takes
the leases of the earlier over at once (DEC-scheduler-lease). One for every store shard."""
TIMER_QUEUE_NAME = "schedule.timers"
"""The Celery queue the timers' delivery task is routed to."""


def group_settings_key(group: str) -> str:
    """Hash of a consumer group's retry settings (SPEC R3, R5)."""
    return f"{REDIS_PREFIX}:group:{group}"


GROUPS_SET_KEY = f"{REDIS_PREFIX}:groups"


def gateway_queue_key(group: str, topic: str, queue_id: int, shard: int = 0) -> str:
    """Prefix of the gateway's state of one consumer group in one queue of one store shard (its
    ``:cursor``, ``:inflight`` and ``:committed`` keys; DEC-gateway-pop-over-pull). Shard 0's
    are the keys of a one-store stack, the others' carry the shard (DEC-shard-keys). Topic and
    group names never hold ``/`` (SPEC P1)."""
    return f"{REDIS_PREFIX}:gateway:{_shard_part(shard)}{group}/{topic}/{queue_id}"


GATEWAY_DEADLINES_KEY = f"{REDIS_PREFIX}:gateway:deadlines"
"""Sorted set of every message the gateway handed out, scored by when it becomes visible again
(the invisible time's end)."""


def gateway_client_key(client_id: str) -> str:
    """Set while a RocketMQ client talks to the gateway (it expires when the client goes)."""
    return f"{REDIS_PREFIX}:gateway:client:{client_id}"


def dlq_state_key(group: str, shard: int = 0) -> str:
    """Hash of a group's DLQ state (purge floor) on one store shard, kept by the retry service
    (shard 0: the key of a one-store stack, DEC-shard-keys)."""
    suffix = "state" if shard == 0 else f"shard:{shard}:state"
    return f"{REDIS_PREFIX}:dlq:{group}:{suffix}"


def dlq_removed_key(group: str) -> str:
    """Set of DLQ msgIds already resent or purged, hidden from listings."""
    return f"{REDIS_PREFIX}:dlq:{group}:removed"


def dlq_audit_key(group: str) -> str:
    """List of DLQ audit records (resend, purge) of one group."""
    return f"{REDIS_PREFIX}:dlq:{group}:audit"


def sendback_stats_key(group: str) -> str:
    """Hash of send-back counts by outcome for one group."""
    return f"{REDIS_PREFIX}:sendback:{group}"


def schedule_queue_name(level: int) -> str:
    """The Celery queue a level's delivery task is routed to."""
    return f"schedule.level.{level}"


# ---- analytics export and reports (services/analytics) --------------------------------------

EXPORT_DIR = "export"
"""Default export folder under CLEPSYDRA_HOME."""
REPORTS_DIR = "reports"
"""Default reports folder under CLEPSYDRA_HOME."""
ANALYTICS_DIR = "analytics"
"""Local state of the analytics service under CLEPSYDRA_HOME (locks, beat schedule)."""
EXPORT_GROUP = "clepsydra-analytics-export"
"""The exporter's own consumer group."""
EXPORT_TEMP_PREFIX = ".tmp-"
"""A file being written; readers (Spark, pyarrow) skip names starting with a dot."""
EXPORT_FLUSH_REQUEST = "export-flush-request"
"""Touched (in the analytics state folder) by a jobs run that wants the running exporter to
write its buffers now."""
EXPORTER_HEARTBEAT = "exporter.alive"
"""Touched (in the analytics state folder) by the running exporter after every cycle: a jobs run
that sees it fresh leaves the exporting to that exporter, on this machine or another."""
EXPORT_SNAPSHOT_DIR = "_snapshots"
"""Small tables the exporter refreshes when they change (schedule levels, consumer lag)."""
EXPORT_SNAPSHOT_STAMP = ".{name}.written"
"""Beside a snapshot (``name``: its table's name), what the exporter last wrote into it: a
digest of its rows and the hour it was written (a dot-name: readers skip it)."""


def export_schema_dir(version: int) -> str:
    """The export's top folder for one schema version: ``v1``."""
    return f"v{version}"


def export_topic_dir(topic: str) -> str:
    """``topic=<name>``, percent-encoded so ``%RETRY%G`` is a safe folder name."""
    return "topic=" + quote(topic, safe="")


def topic_of_export_dir(name: str) -> str | None:
    """Inverse of :func:`export_topic_dir`; None for any other folder name."""
    return unquote(name[len("topic="):]) if name.startswith("topic=") else None


def export_hour_dir(hour: str) -> str:
    """``hour=2026-11-25T10`` (UTC hour of the messages' store timestamps)."""
    return f"hour={hour}"


def export_file_name(queue_id: int, start_offset: int, end_offset: int, shard: int = 0) -> str:
    """``q0003-00000000000000000100-00000000000000000200.parquet``: the queue and the range
    ``[start_offset, end_offset)`` of queue offsets the file holds; a queue of store shard 2:
    ``s0002-q0003-...`` (shard 0's names are those of a one-store stack, DEC-store-shards)."""
    name = f"q{queue_id:04d}-{start_offset:020d}-{end_offset:020d}.parquet"
    return name if shard == 0 else f"s{shard:04d}-{name}"


def parse_export_file(name: str) -> tuple[int, int, int, int] | None:
    """(shard, queue_id, start_offset, end_offset) of an export file name, None for any other
    name."""
    shard = 0
    if name.startswith("s") and name[1:5].isdigit() and name[5:7] == "-q":
        shard, name = int(name[1:5]), name[6:]
    if not (name.startswith("q") and name.endswith(".parquet")):
        return None
    parts = name[1:-len(".parquet")].split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return shard, int(parts[0]), int(parts[1]), int(parts[2])


def parse_export_file_name(name: str) -> tuple[int, int, int] | None:
    """(queue_id, start_offset, end_offset) of an export file name, None for any other name."""
    parsed = parse_export_file(name)
    return None if parsed is None else parsed[1:]


REPORT_HTML = "report.html"
"""A report run's HTML page, in its run folder under the reports folder."""
REPORT_RESULT = "result.json"
"""A report run's results (the rows of every job), as `clepsydra report run --format json`."""
REPORT_CHARTS_DIR = "charts"
REPORT_TABLES_DIR = "tables"


def report_run_id(started_ms: int, suffix: str) -> str:
    """``20261125T103000123Z-1a2b`` (UTC, to the millisecond): runs sort by start time."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started_ms // 1000))
    return f"{stamp}{started_ms % 1000:03d}Z-{suffix}"
