"""Structured Streaming reads Kafka through the connector jars resolved by infra/maven."""

from __future__ import annotations

import json

from kafka import KafkaProducer
from kafka.admin import NewTopic
from pyspark.sql import functions as F

from stores.clients import kafka_admin


def test_stream_from_kafka_to_parquet_on_hdfs(settings, stack, spark, unique):
    topic = f"test-stream-{unique}"
    admin = kafka_admin(settings)
    admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=2, replication_factor=1, topic_configs={"message.timestamp.type": "LogAppendTime"}
            )
        ]
    )
    admin.close()
    producer = KafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap, value_serializer=lambda v: json.dumps(v).encode()
    )
    for i in range(300):
        producer.send(topic, key=f"k{i % 5}".encode(), value={"n": i})
    producer.flush()
    producer.close()

    out = f"{settings.hdfs.url}/tmp/tests/stream-{unique}"
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(
            F.col("key").cast("string").alias("key"),
            F.get_json_object(F.col("value").cast("string"), "$.n").cast("int").alias("n"),
            "partition",
            "offset",
            "timestamp",
        )
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", f"{out}-checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None

    result = spark.read.parquet(out)
    assert sorted(r.n for r in result.select("n").collect()) == list(range(300))
    assert result.select("partition", "offset").distinct().count() == 300
    assert result.filter(F.col("timestamp").isNull()).count() == 0
