"""AnalyticsSettings: the analytics service's settings, read once from the environment.

Durations (``--since``, the default window) are written like delay levels: ``90s``, ``30m``,
``2h``, ``7d``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from clepsydra_core import naming
from clepsydra_core.errors import ConfigError, ValidationError
from clepsydra_core.settings import (
    CommonSettings,
    Env,
    env_bool,
    env_float,
    env_int,
    env_str,
)

DEFAULT_TOPICS = "*,%RETRY%*,%DLQ%*"
MAX_REQUEST_BYTES_VAR = "CLEPSYDRA_ANALYTICS_MAX_REQUEST_BYTES"
_DURATION = re.compile(r"^([1-9][0-9]*)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(text: str, what: str = "duration") -> int:
    """Seconds of ``"2h"``; ValidationError naming ``what`` for anything else."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValidationError(f"{what} {text!r} is not a duration: expected a positive whole "
                              "number followed by s, m, h or d (e.g. 90s, 30m, 2h, 7d)",
                              code="INVALID_SINCE")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True, slots=True)
class TopicPatterns:
    """Which topics the exporter takes: shell patterns; a system topic (``%RETRY%``,
    ``%DLQ%``, ...) matches only a pattern that itself starts with ``%``, so ``*`` means every
    user topic. The schedule topic is never exported (SPEC S3)."""

    patterns: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, name: str = "CLEPSYDRA_ANALYTICS_TOPICS") -> TopicPatterns:
        patterns = tuple(p.strip() for p in text.split(",") if p.strip())
        if not patterns:
            raise ConfigError(f"{name}={text!r} names no topic pattern")
        return cls(patterns)

    def matches(self, topic: str) -> bool:
        if topic == naming.SCHEDULE_TOPIC:
            return False
        system = naming.is_system_topic(topic)
        return any(fnmatch.fnmatchcase(topic, p) for p in self.patterns
                   if p.startswith("%") or not system)


@dataclass(frozen=True, slots=True)
class AnalyticsSettings:
    common: CommonSettings
    port: int
    bind: str
    export_uri: str
    """Where the Parquet export lives: a folder, or any URI pyarrow and Spark both read
    (``s3://bucket/clepsydra``, ``hdfs://...``)."""
    reports_dir: Path
    topics: TopicPatterns
    export_group: str
    poll_interval_s: float
    flush_interval_s: float
    """A queue's buffered rows are written at least this often."""
    file_rows: int
    """... or as soon as this many rows are buffered."""
    pull_max: int
    busy_share: float
    """While the store's topics grow (producers at work) and the export is behind, the exporter
    spends at most this share of its time in pulls (DEC-exporter-yields): it lags under a burst
    and catches up after, never taking the producers' share of the store. 1: no pacing."""
    nice: int
    """The exporter's threads run at this niceness (0: as the process)."""
    export_body: bool
    spark_master: str
    spark_driver_memory: str
    shuffle_partitions: int
    schedule_interval_s: float
    default_since_s: int
    runs_kept: int
    job_timeout_s: float
    catch_up_timeout_s: float
    max_request_bytes: int
    exporter_port: int
    """Where the exporter answers /healthz and /metrics (its own; the API is on ``port``)."""

    @classmethod
    def from_env(cls, env: Env | None = None) -> AnalyticsSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        since = env_str(env, "CLEPSYDRA_ANALYTICS_SINCE", "24h")
        try:
            since_s = parse_duration_s(since, "CLEPSYDRA_ANALYTICS_SINCE")
        except ValidationError as exc:
            raise ConfigError(exc.message) from exc
        port = env_int(env, "CLEPSYDRA_ANALYTICS_PORT", 8085, minimum=1, maximum=65535)
        return cls(
            common=common,
            port=port,
            bind=env_str(env, "CLEPSYDRA_ANALYTICS_BIND", "127.0.0.1"),
            export_uri=env_str(env, "CLEPSYDRA_ANALYTICS_EXPORT_URI",
                               str(common.home / naming.EXPORT_DIR)),
            reports_dir=Path(env_str(env, "CLEPSYDRA_ANALYTICS_REPORTS_DIR",
                                     str(common.home / naming.REPORTS_DIR))).absolute(),
            topics=TopicPatterns.parse(env_str(env, "CLEPSYDRA_ANALYTICS_TOPICS",
                                               DEFAULT_TOPICS)),
            export_group=env_str(env, "CLEPSYDRA_ANALYTICS_EXPORT_GROUP", naming.EXPORT_GROUP),
            poll_interval_s=env_float(env, "CLEPSYDRA_ANALYTICS_EXPORT_POLL_S", 1.0,
                                      minimum=0.01),
            flush_interval_s=env_float(env, "CLEPSYDRA_ANALYTICS_EXPORT_FLUSH_S", 60.0,
                                       minimum=0.0),
            file_rows=env_int(env, "CLEPSYDRA_ANALYTICS_EXPORT_FILE_ROWS", 200_000, minimum=1),
            pull_max=env_int(env, "CLEPSYDRA_ANALYTICS_EXPORT_PULL_MAX", 1000, minimum=1,
                             maximum=1000),
            busy_share=env_float(env, "CLEPSYDRA_ANALYTICS_EXPORT_BUSY_SHARE", 0.2,
                                 minimum=0.01, maximum=1.0),
            nice=env_int(env, "CLEPSYDRA_ANALYTICS_EXPORT_NICE", 10, minimum=0, maximum=19),
            export_body=env_bool(env, "CLEPSYDRA_ANALYTICS_EXPORT_BODY", False),
            spark_master=env_str(env, "CLEPSYDRA_SPARK_MASTER", "local[*]"),
            spark_driver_memory=env_str(env, "CLEPSYDRA_ANALYTICS_SPARK_MEMORY", "2g"),
            shuffle_partitions=env_int(env, "CLEPSYDRA_ANALYTICS_SHUFFLE_PARTITIONS", 8,
                                       minimum=1),
            schedule_interval_s=env_float(env, "CLEPSYDRA_ANALYTICS_SCHEDULE_S", 3600.0,
                                          minimum=1.0),
            default_since_s=since_s,
            runs_kept=env_int(env, "CLEPSYDRA_ANALYTICS_RUNS_KEPT", 48, minimum=1),
            job_timeout_s=env_float(env, "CLEPSYDRA_ANALYTICS_JOB_TIMEOUT_S", 1800.0,
                                    minimum=1.0),
            catch_up_timeout_s=env_float(env, "CLEPSYDRA_ANALYTICS_CATCH_UP_S", 60.0,
                                         minimum=0.0),
            max_request_bytes=env_int(env, MAX_REQUEST_BYTES_VAR, 65_536, minimum=1024),
            exporter_port=env_int(env, "CLEPSYDRA_ANALYTICS_EXPORTER_PORT", port, minimum=0,
                                  maximum=65535),
        )

    @property
    def store_url(self) -> str:
        return self.common.store_url.rstrip("/")

    @property
    def state_dir(self) -> Path:
        """Local state (the exporter's lock, the beat schedule)."""
        return self.common.home / naming.ANALYTICS_DIR
