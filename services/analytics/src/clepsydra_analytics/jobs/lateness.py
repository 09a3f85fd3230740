"""Job: delivery lateness per level and hour (transforms/lateness.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics.jobs.inputs import JobInputs
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.transforms.lateness import lateness


def run(spark: SparkSession, settings: AnalyticsSettings,
        inputs: JobInputs) -> dict[str, DataFrame]:
    return {"lateness": lateness(inputs.messages, inputs.schedule)}
