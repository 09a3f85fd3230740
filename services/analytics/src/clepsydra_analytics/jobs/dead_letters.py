"""Job: dead letters by group, topic and reason (transforms/dead_letters.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics.jobs.inputs import JobInputs
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.transforms.dead_letters import dead_letters


def run(spark: SparkSession, settings: AnalyticsSettings,
        inputs: JobInputs) -> dict[str, DataFrame]:
    return {"dead-letters": dead_letters(inputs.messages, inputs.now_ms)}
