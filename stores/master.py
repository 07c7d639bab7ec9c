"""Reading the master dataset: every valid record Kafka received, exactly once, never modified."""

from __future__ import annotations

from typing import TYPE_CHECKING

from definitions.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def master_url(settings: Settings) -> str:
    return f"{settings.hdfs.url}{settings.archiver.master_path}"


def read_master(spark: SparkSession, settings: Settings) -> DataFrame:
    """The committed master dataset (the file sink's log hides files of unfinished batches)."""
    return spark.read.parquet(master_url(settings))
