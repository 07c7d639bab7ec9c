"""Clients of the platform's stores, built from settings in one place.

Nothing connects at import time; each function opens a client when called.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from definitions.section import bare_address
from definitions.settings import Settings

CASSANDRA_PROTOCOL = 5


def kafka_options(settings: Settings) -> dict[str, Any]:
    """The brokers and security options of every kafka-python client (producer, consumer, admin)."""
    k = settings.kafka
    options: dict[str, Any] = {"bootstrap_servers": k.bootstrap.split(","), "security_protocol": k.security_protocol}
    if k.security_protocol.startswith("SASL_"):
        options.update(
            sasl_mechanism=k.sasl_mechanism,
            sasl_plain_username=k.sasl_username,
            sasl_plain_password=k.sasl_password.get_secret_value(),
        )
    if k.security_protocol in ("SSL", "SASL_SSL"):
        if k.ssl_cafile:
            options["ssl_cafile"] = k.ssl_cafile
        if k.ssl_certfile:
            options.update(ssl_certfile=k.ssl_certfile, ssl_keyfile=k.ssl_keyfile)
    return options


JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_spark_options(settings: Settings) -> dict[str, str]:
    """The same brokers and security for Spark's Kafka source and sink (`kafka.`-prefixed options)."""
    k = settings.kafka
    options = {"kafka.bootstrap.servers": k.bootstrap, "kafka.security.protocol": k.security_protocol}
    if k.security_protocol.startswith("SASL_"):
        options["kafka.sasl.mechanism"] = k.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{JAAS_MODULES[k.sasl_mechanism]} required username={_jaas_quoted(k.sasl_username)} "
            f"password={_jaas_quoted(k.sasl_password.get_secret_value())};"
        )
    # The certificates and the key travel in the options, read here on the driver: executors on
    # other machines need no files (the key is a Kafka password-type value, which its clients never
    # log; Spark redacts it from plans: definitions.spark).
    if k.security_protocol in ("SSL", "SASL_SSL") and k.ssl_cafile:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = _pem(k.ssl_cafile, "kafka.ssl_cafile")
    if k.security_protocol in ("SSL", "SASL_SSL") and k.ssl_certfile:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = _pem(k.ssl_certfile, "kafka.ssl_certfile")
        options["kafka.ssl.keystore.key"] = _pem(k.ssl_keyfile, "kafka.ssl_keyfile")
    return options


def _pem(path: str, setting: str) -> str:
    """The text of a PEM file a setting names; ValueError naming the setting when it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"{setting} = {path!r}: {exc.strerror or exc}") from None
    if "-----BEGIN " not in text:
        raise ValueError(f"{setting} = {path!r}: not a PEM file")
    return text


def kafka_admin(settings: Settings, client_id: str = "lambda-admin", timeout_s: float = 10.0):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        client_id=client_id,
        request_timeout_ms=int(timeout_s * 1000),
        api_version_auto_timeout_ms=int(timeout_s * 1000),
        **kafka_options(settings),
    )


def thrift_endpoint(settings: Settings, timeout_s: float = 10.0) -> tuple[str, int]:
    """The first of `hbase.thrift_endpoints` that accepts a connection (failover); the last error
    names every endpoint tried when none does."""
    import socket

    endpoints = settings.hbase.thrift_endpoints
    if len(endpoints) == 1:
        return endpoints[0]
    errors = []
    for host, port in endpoints:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return host, port
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc}")
    raise ConnectionError(f"no HBase Thrift server answers: {'; '.join(errors)}")


def hbase_connection(settings: Settings, timeout_s: float = 10.0, namespaced: bool = True):
    """A happybase connection to the first Thrift server that answers; table names are relative to
    the platform's namespace when `namespaced`."""
    import happybase

    b = settings.hbase
    host, port = thrift_endpoint(settings, timeout_s)
    kwargs = dict(table_prefix=b.namespace, table_prefix_separator=":") if namespaced else {}
    return happybase.Connection(host, port, timeout=int(timeout_s * 1000), **kwargs)


def hbase_pool(settings: Settings, size: int, timeout_s: float = 10.0):
    """A happybase connection pool of `size` to the first Thrift server that answers; table names
    relative to the platform's namespace."""
    import happybase

    b = settings.hbase
    host, port = thrift_endpoint(settings, timeout_s)
    return happybase.ConnectionPool(
        size=size,
        host=host,
        port=port,
        timeout=int(timeout_s * 1000),
        table_prefix=b.namespace,
        table_prefix_separator=":",
    )


def cassandra_cluster(settings: Settings, timeout_s: float = 10.0):
    """A driver Cluster for the contact points: requests go to a replica of their partition in the
    local data centre first (token aware), at `cassandra.consistency` (a quorum), with password
    authentication when a username is set."""
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    c = settings.cassandra
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=c.local_dc or None))
    profile = ExecutionProfile(
        load_balancing_policy=policy,
        request_timeout=timeout_s,
        consistency_level=ConsistencyLevel.name_to_value[c.consistency],
    )
    auth = PlainTextAuthProvider(c.username, c.password.get_secret_value()) if c.username else None
    return Cluster(
        [bare_address(host) for host in c.hosts],  # the driver resolves an IPv6 address without brackets
        port=c.port,
        protocol_version=CASSANDRA_PROTOCOL,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout_s,
        control_connection_timeout=timeout_s,
        auth_provider=auth,
        ssl_context=cassandra_ssl_context(settings),
    )


def cassandra_ssl_context(settings: Settings):
    """The TLS context of Cassandra connections (None: plain): the nodes' certificates checked against
    `cassandra.ssl_cafile` and their addresses (the driver gives each connection's host), a client
    certificate presented when set. ValueError naming the setting whose file cannot be used."""
    import ssl

    c = settings.cassandra
    if not c.ssl:
        return None
    try:
        context = ssl.create_default_context(cafile=c.ssl_cafile or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cassandra.ssl_cafile = {c.ssl_cafile!r}: {exc}") from None
    if c.ssl_certfile:
        try:
            context.load_cert_chain(c.ssl_certfile, c.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cassandra.ssl_certfile / ssl_keyfile = {c.ssl_certfile!r}, {c.ssl_keyfile!r}: {exc}"
            ) from None
    return context


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


@contextlib.contextmanager
def closed_after(scan: Iterator[Any]) -> Iterator[Iterator[Any]]:
    """`scan` (an HBase scanner's rows), closed on leaving, also part-way: happybase closes the
    scanner on its connection only when the generator ends, and one left to an exception's end was
    closed on the connection after the pool had given it to another request."""
    try:
        yield scan
    finally:
        close = getattr(scan, "close", None)  # a generator's; a plain iterator has nothing to close
        if close is not None:
            close()
