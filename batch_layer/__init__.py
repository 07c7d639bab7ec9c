"""The batch layer: exact recomputation of every declared view from the master dataset into
versioned HBase tables, swapped in atomically."""
