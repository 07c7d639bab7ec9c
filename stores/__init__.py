"""Adapters to the platform's stores: the only code that speaks to Kafka, HDFS, HBase and
Cassandra. Layers meet here and in `definitions/` (see docs/ and the house rules)."""
