"""The jobs: each module exposes ``run(spark, settings, inputs) -> {table name: DataFrame}``,
the transforms applied to the export read once by the runner (runner.py)."""

from __future__ import annotations

import importlib
from types import ModuleType

from clepsydra_core.errors import ValidationError
from clepsydra_core.wire.analytics import JOB_NAMES

__all__ = ["JOB_NAMES", "check_jobs", "job_module"]


def job_module(name: str) -> ModuleType:
    """The module of a job; ValidationError naming the job and the known ones."""
    if name not in JOB_NAMES:
        raise ValidationError(f"unknown job {name!r}: the jobs are {', '.join(JOB_NAMES)}",
                              code="UNKNOWN_JOB")
    return importlib.import_module(f"clepsydra_analytics.jobs.{name.replace('-', '_')}")


def check_jobs(names: list[str] | None) -> list[str]:
    """The jobs to run (all when ``names`` is empty), each checked, in the standard order."""
    if not names:
        return list(JOB_NAMES)
    for name in names:
        job_module(name)
    return [n for n in JOB_NAMES if n in names]


