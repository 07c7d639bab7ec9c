"""A Kafka topic of a test's own, so that what it writes never reaches the platform's topics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from stores.clients import kafka_admin


@contextlib.contextmanager
def scratch_topic(settings, name: str) -> Iterator[str]:
    from kafka.admin import NewTopic

    admin = kafka_admin(settings, client_id=f"test-{name}")
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
        yield name
    finally:
        try:
            admin.delete_topics([name])
        finally:
            admin.close()
