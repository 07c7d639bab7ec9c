"""The speed layer: Structured Streaming from Kafka into Cassandra realtime views, keyed by view
key, event bucket and ingest bucket, written as absolute values (idempotent upserts)."""
