"""Clients of the platform's stores, built from settings in one place.

Nothing connects at import time; each function opens a client when called.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from definitions.settings import Settings

CASSANDRA_PROTOCOL = 5


def kafka_admin(settings: Settings, client_id: str = "lambda-admin", timeout_s: float = 10.0):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=settings.kafka.bootstrap,
        client_id=client_id,
        request_timeout_ms=int(timeout_s * 1000),
        api_version_auto_timeout_ms=int(timeout_s * 1000),
    )


def hbase_connection(settings: Settings, timeout_s: float = 10.0, namespaced: bool = True):
    """A happybase connection; table names are relative to the platform's namespace when `namespaced`."""
    import happybase

    b = settings.hbase
    kwargs = dict(table_prefix=b.namespace, table_prefix_separator=":") if namespaced else {}
    return happybase.Connection(b.host, b.thrift_port, timeout=int(timeout_s * 1000), **kwargs)


def hbase_pool(settings: Settings, size: int, timeout_s: float = 10.0):
    """A happybase connection pool of `size`; table names relative to the platform's namespace."""
    import happybase

    b = settings.hbase
    return happybase.ConnectionPool(
        size=size,
        host=b.host,
        port=b.thrift_port,
        timeout=int(timeout_s * 1000),
        table_prefix=b.namespace,
        table_prefix_separator=":",
    )


def cassandra_cluster(settings: Settings, timeout_s: float = 10.0):
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy

    c = settings.cassandra
    profile = ExecutionProfile(load_balancing_policy=DCAwareRoundRobinPolicy(), request_timeout=timeout_s)
    return Cluster(
        c.hosts,
        port=c.port,
        protocol_version=CASSANDRA_PROTOCOL,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout_s,
        control_connection_timeout=timeout_s,
    )


@contextlib.contextmanager
def quiet(*logger_names: str) -> Iterator[None]:
    """Silence client libraries' connection chatter while a probe is expected to fail."""
    loggers = [logging.getLogger(name) for name in logger_names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
