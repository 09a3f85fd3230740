"""The SparkSession the jobs run in: the same code on ``local[*]`` and on a cluster
(CLEPSYDRA_SPARK_MASTER = ``spark://host:7077``, ``k8s://https://...``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clepsydra_analytics.settings import AnalyticsSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_session(master: str, *, app_name: str = "clepsydra-analytics",
                  shuffle_partitions: int = 8, driver_memory: str = "2g") -> SparkSession:
    """A session in UTC (hour and minute buckets are UTC), without the web UI."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.driver.memory", driver_memory)
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    return session


def session_for(settings: AnalyticsSettings) -> SparkSession:
    return build_session(settings.spark_master, shuffle_partitions=settings.shuffle_partitions,
                         driver_memory=settings.spark_driver_memory)
