"""Health probes, each through the service's own protocol and the client the platform uses.

A probe returns a short description of what answered, or raises with why it did not.
"""

from __future__ import annotations

import uuid

import httpx

from definitions.clients import cassandra_cluster, hbase_connection, kafka_admin, quiet
from definitions.settings import Settings

PROBE_TIMEOUT_S = 5.0


def kafka(settings: Settings) -> str:
    with quiet("kafka"):
        admin = kafka_admin(settings, client_id="lambdactl-health", timeout_s=PROBE_TIMEOUT_S)
        try:
            cluster = admin.describe_cluster()
        finally:
            admin.close()
    brokers = cluster.get("brokers", [])
    if not brokers:
        raise RuntimeError("metadata lists no broker")
    return f"{len(brokers)} broker(s), controller {cluster.get('controller_id')}"


def hdfs_namenode(settings: Settings) -> str:
    resp = httpx.get(f"{settings.hdfs.webhdfs}/?op=GETFILESTATUS", timeout=PROBE_TIMEOUT_S)
    resp.raise_for_status()
    return "namenode answers WebHDFS"


def hdfs_write_read(settings: Settings) -> str:
    """Write a small file through WebHDFS (namenode → datanode), read it back, delete it."""
    base = settings.hdfs.webhdfs
    path = f"/tmp/lambda-health/probe-{uuid.uuid4().hex}"
    payload = uuid.uuid4().bytes
    with httpx.Client(timeout=PROBE_TIMEOUT_S) as client:
        created = client.put(f"{base}{path}?op=CREATE&overwrite=true")
        if created.status_code != 307:
            raise RuntimeError(f"CREATE answered {created.status_code}: {created.text[:200]}")
        written = client.put(created.headers["location"], content=payload)
        if written.status_code != 201:
            raise RuntimeError(f"datanode write answered {written.status_code}: {_remote_error(written)}")
        try:
            read = client.get(f"{base}{path}?op=OPEN", follow_redirects=True)
            read.raise_for_status()
            if read.content != payload:
                raise RuntimeError("read back different bytes than written")
        finally:
            client.delete(f"{base}{path}?op=DELETE")
    return "HDFS write and read back"


def hbase_master(settings: Settings) -> str:
    b = settings.hbase
    url = f"http://{b.host}:{b.master_info_port}/jmx?qry=Hadoop:service=HBase,name=Master,sub=Server"
    resp = httpx.get(url, timeout=PROBE_TIMEOUT_S)
    resp.raise_for_status()
    beans = resp.json().get("beans", [])
    if not beans:
        raise RuntimeError("master metrics not published yet")
    bean = beans[0]
    if str(bean.get("tag.isActiveMaster")).lower() != "true":
        raise RuntimeError("master not active yet")
    servers = int(bean.get("numRegionServers", 0))
    if servers < 1:
        raise RuntimeError("no region server online yet")
    return f"active master, {servers} region server(s)"


def hbase_thrift(settings: Settings) -> str:
    conn = hbase_connection(settings, timeout_s=PROBE_TIMEOUT_S * 2, namespaced=False)
    try:
        tables = conn.tables()
        return f"Thrift answers, {len(tables)} table(s)"
    finally:
        conn.close()


def cassandra(settings: Settings) -> str:
    with quiet("cassandra"):
        cluster = cassandra_cluster(settings, timeout_s=PROBE_TIMEOUT_S)
        try:
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local", timeout=PROBE_TIMEOUT_S).one()
            return f"Cassandra {row.release_version} answers CQL"
        finally:
            cluster.shutdown()


def _remote_error(resp: httpx.Response) -> str:
    try:
        return resp.json()["RemoteException"]["message"][:300]
    except (ValueError, KeyError, TypeError):
        return resp.text[:300]
