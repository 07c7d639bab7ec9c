"""HDFS through PySpark, the way the archiver and the batch layer use it."""

from __future__ import annotations

from pyspark.sql import Row


def test_parquet_round_trip_on_hdfs(settings, stack, spark, unique):
    path = f"{settings.hdfs.url}/tmp/tests/parquet-{unique}"
    rows = [Row(id=i, url=f"/p/{i % 5}", ts=1_700_000_000 + i) for i in range(1000)]
    spark.createDataFrame(rows).repartition(3).write.mode("error").parquet(path)

    back = spark.read.parquet(path)
    assert back.count() == 1000
    assert sorted(tuple(r) for r in back.select("id", "url", "ts").collect()) == sorted(tuple(r) for r in rows)

    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    assert fs.getUri().toString() == settings.hdfs.url
    assert fs.exists(hadoop_path)
    fs.delete(hadoop_path, True)


def test_delete_if_empty_leaves_a_folder_filled_meanwhile(settings, stack, unique):
    """Compaction removes a day's folder once its hours are gone; the archiver may open the next hour
    in it just before: that folder stays, with what it holds, and the call says so (no error)."""
    from stores.webhdfs import WebHdfs

    root = f"/tmp/tests/empty-{unique}"
    with WebHdfs(settings) as fs:
        fs.mkdirs(f"{root}/empty")
        fs.write(f"{root}/filled/ingest_hour=3/part-0.parquet", b"held")
        try:
            assert fs.delete_if_empty(f"{root}/filled") is False
            assert fs.read(f"{root}/filled/ingest_hour=3/part-0.parquet") == b"held"
            assert fs.delete_if_empty(f"{root}/empty") is True
            assert fs.list(root) == ["filled"]
            assert fs.delete_if_empty(f"{root}/empty") is False  # gone already: nothing to do
        finally:
            fs.delete(root, recursive=True)
