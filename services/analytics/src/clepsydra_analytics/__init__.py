"""Clepsydra analytics: the exporter (topics to Parquet), PySpark jobs and their reports."""
