"""Create what the platform expects to find in its stores, idempotently.

- Kafka: topic `events` (several partitions, LogAppendTime, so a record's timestamp is its ingest
  time) and the dead-letter topic `events.dlq`.
- HBase: the platform's namespace and its meta table (the batch-view pointer lives there).
- Cassandra: the platform's keyspace and the realtime view tables.
"""

from __future__ import annotations

import logging
import subprocess

from definitions.settings import Settings
from infra.errors import StackError
from infra.java import find_java
from infra.services import HBASE, JAVA_DIR
from stores.clients import cassandra_cluster, hbase_connection
from stores.kafka import ensure_topics

log = logging.getLogger(__name__)

META_FAMILIES = {"p": dict(max_versions=1)}


def ensure_hbase_meta(settings: Settings) -> bool:
    """Create the namespace and the meta table if missing; True if anything was created."""
    b = settings.hbase
    # Creating the first table of a fresh HBase (namespace, region assignment) can take well over
    # the default 10 s client timeout on a busy machine.
    conn = hbase_connection(settings, timeout_s=120)
    try:
        if b.meta_table.encode() in conn.tables():
            return False
        try:
            conn.create_table(b.meta_table, META_FAMILIES)
        except Exception as exc:  # Thrift IOError carries HBase's exception text
            if "NamespaceNotFound" not in str(exc):
                raise
            create_namespace(settings)
            conn.create_table(b.meta_table, META_FAMILIES)
        log.info("created HBase table %s:%s", b.namespace, b.meta_table)
        return True
    finally:
        conn.close()


def create_namespace(settings: Settings) -> None:
    """HBase Thrift1 has no namespace calls: run the small Java admin program once."""
    java = find_java(settings.stack.java_home)
    conf = HBASE.dirs(settings).conf
    jars = settings.jars_dir / HBASE.jar_group
    done = subprocess.run(
        [
            str(java.executable),
            "-Xmx256m",
            "-cp",
            f"{conf}:{jars}/*",
            str(JAVA_DIR / "CreateNamespace.java"),
            settings.hbase.namespace,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        raise StackError(
            "hbase",
            f"could not create namespace {settings.hbase.namespace!r}",
            "\n".join((done.stdout + done.stderr).splitlines()[-20:]),
        )
    log.info("%s", done.stdout.strip())


def ensure_keyspace(settings: Settings) -> None:
    c = settings.cassandra
    cluster = cassandra_cluster(settings)
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {c.keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {c.replication_factor}}}"
        )
        from stores.realtime import ensure_schema

        ensure_schema(settings, session)
    finally:
        cluster.shutdown()


def bootstrap(settings: Settings) -> None:
    steps = (("kafka", ensure_topics), ("hbase-thrift", ensure_hbase_meta), ("cassandra", ensure_keyspace))
    for service, step in steps:
        try:
            step(settings)
        except StackError:
            raise
        except Exception as exc:
            raise StackError(service, f"bootstrap failed: {type(exc).__name__}: {exc}") from exc
