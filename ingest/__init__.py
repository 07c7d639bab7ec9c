"""Getting events in: the clickstream generator, the Kafka source both layers read, and the archiver
that keeps the immutable master dataset on HDFS."""
