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
from stores.batch_views import NamespaceMissing, ensure_meta_table
from stores.kafka_topic_config import ensure_topics
from stores.realtime_schema import ensure_keyspace

log = logging.getLogger(__name__)


def ensure_hbase_meta(settings: Settings) -> bool:
    """Create the namespace and the meta table if missing; True if anything was created."""
    try:
        return ensure_meta_table(settings)
    except NamespaceMissing:
        create_namespace(settings)
        return ensure_meta_table(settings)


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


def bootstrap(settings: Settings) -> None:
    steps = (("kafka", ensure_topics), ("hbase-thrift", ensure_hbase_meta), ("cassandra", ensure_keyspace))
    for service, step in steps:
        try:
            step(settings)
        except StackError:
            raise
        except Exception as exc:
            raise StackError(service, f"bootstrap failed: {type(exc).__name__}: {exc}") from exc
