"""Job: throughput per topic and minute, and consumer lag per group (transforms/throughput.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from clepsydra_analytics.jobs.inputs import JobInputs
from clepsydra_analytics.settings import AnalyticsSettings
from clepsydra_analytics.transforms.throughput import consumer_lag, throughput


def run(spark: SparkSession, settings: AnalyticsSettings,
        inputs: JobInputs) -> dict[str, DataFrame]:
    return {"throughput": throughput(inputs.messages),
            "consumer-lag": consumer_lag(inputs.lag)}
