"""Job: the retry funnel per group and topic (transforms/funnel.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics.jobs.inputs import JobInputs
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.transforms.funnel import funnel


def run(spark: SparkSession, settings: AnalyticsSettings,
        inputs: JobInputs) -> dict[str, DataFrame]:
    return {"funnel": funnel(inputs.messages, inputs.lag)}
