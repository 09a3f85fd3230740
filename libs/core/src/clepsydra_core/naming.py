"""Every system topic name, file name and Redis key, in one place (STYLE: never inline)."""

from __future__ import annotations

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""System topic with one queue per delay level (SPEC S1, L3)."""

SCHEDULE_ERROR_TOPIC = "%SCHEDULE_ERROR%"
"""Parking topic for delayed messages that cannot be rebuilt (SPEC D7)."""

TRANSACTION_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""Transaction-half topic: delayed messages aimed at it are parked (SPEC D7)."""

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, SCHEDULE_ERROR_TOPIC)
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, SCHEDULE_ERROR_TOPIC, TRANSACTION_HALF_TOPIC})

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
KEY_INDEX_FILE = "keys.idx"


def segment_file_name(start_offset: int) -> str:
    """A CommitLog or ConsumeQueue segment is named by its 20-digit start offset."""
    return f"{start_offset:020d}"


# ---- Redis keys ----------------------------------------------------------------------------


def delay_offset_key(level: int) -> str:
    """Progress (schedule queue offset) of one delay level (SPEC D2)."""
    return f"{REDIS_PREFIX}:schedule:offset:{level}"


def delay_lease_key(level: int) -> str:
    """Lease that makes one worker the active deliverer of a level."""
    return f"{REDIS_PREFIX}:schedule:lease:{level}"


def delay_stats_key(level: int) -> str:
    """Hash of a level's delivery statistics (delivered count, lateness buckets, lag)."""
    return f"{REDIS_PREFIX}:schedule:stats:{level}"


def group_settings_key(group: str) -> str:
    """Hash of a consumer group's retry settings (SPEC R3, R5)."""
    return f"{REDIS_PREFIX}:group:{group}"


GROUPS_SET_KEY = f"{REDIS_PREFIX}:groups"


def dlq_state_key(group: str) -> str:
    """Hash of a group's DLQ state (purge floor) kept by the retry service."""
    return f"{REDIS_PREFIX}:dlq:{group}:state"


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
