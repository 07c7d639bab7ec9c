"""The serving layer: the exact merge of batch views (HBase) and realtime views (Cassandra)."""
