"""Health probes, each through the service's own protocol and the client the platform uses.

A probe returns a short description of what answered, or raises with why it did not.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import httpx

from definitions.section import browser_url
from definitions.settings import Settings
from stores.clients import cassandra_cluster, hbase_connection, kafka_admin, quiet
from stores.webhdfs import WebHdfs

PROBE_TIMEOUT_S = 5.0
log = logging.getLogger(__name__)


def wait_until_up(
    settings: Settings,
    probes: dict[str, Callable[[Settings], str]],
    log_every_s: float = 30.0,
    poll_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Block until every probe answers; the seconds waited. A job that starts while one of its
    stores is down waits here, saying which one every `log_every_s`, instead of exiting (the
    supervisor would give up on a process that dies at once, again and again)."""
    started = clock()
    last_said = None
    while True:
        down = {}
        for name, probe in probes.items():
            try:
                probe(settings)
            except Exception as exc:  # any failure means not up yet: say which and why, then wait
                down[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        waited = clock() - started
        if not down:
            if waited > 0:
                log.info("%s answer after %.0f s", ", ".join(probes), waited)
            return waited
        if last_said is None or clock() - last_said >= log_every_s:
            log.warning(
                "waiting for %s (%.0f s so far): %s",
                ", ".join(down),
                waited,
                "; ".join(f"{k}: {v}" for k, v in down.items()),
            )
            last_said = clock()
        sleep(poll_s)


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
    with WebHdfs(settings, timeout_s=PROBE_TIMEOUT_S) as fs:
        fs.status("/")
    return "namenode answers WebHDFS"


def hdfs_write_read(settings: Settings) -> str:
    """Write a small file through WebHDFS (namenode → datanode), read it back, delete it."""
    path = f"/tmp/lambda-health/probe-{uuid.uuid4().hex}"
    payload = uuid.uuid4().bytes
    with WebHdfs(settings, timeout_s=PROBE_TIMEOUT_S) as fs:
        fs.write(path, payload)
        try:
            if fs.read(path) != payload:
                raise RuntimeError("read back different bytes than written")
        finally:
            fs.delete(path)
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
            # A query of its own, but not its version: the API's /health shows this without a token.
            session.execute("SELECT release_version FROM system.local", timeout=PROBE_TIMEOUT_S).one()
            return "Cassandra answers CQL"
        finally:
            cluster.shutdown()


def archiver(settings: Settings) -> str:
    """The archiver's queries run (its listener reports them), and how far the master dataset is complete."""
    import time

    from definitions.jobs import ARCHIVER as JOB
    from definitions.jobs import ARCHIVER_DLQ_QUERY as DLQ_QUERY
    from definitions.jobs import ARCHIVER_MASTER_QUERY as MASTER_QUERY
    from stores.progress import read_progress, require_progressing

    state = read_progress(settings, JOB)
    require_progressing(state, (MASTER_QUERY, DLQ_QUERY), settings.stack.stuck_after_s)
    done = (state.get("completeness") or {}).get("complete_before_ms")
    totals = state.get("totals", {})
    behind = state["queries"].get(MASTER_QUERY, {}).get("rows_behind")
    lag = (
        f"master dataset complete up to {time.time() - done / 1000:.0f} s ago" if done else "completeness not yet known"
    )
    backlog = (
        f"{behind:,} records behind Kafka" if behind is not None else "backlog not measured yet (no batch finished)"
    )
    failed = state["queries"].get(MASTER_QUERY, {}).get("hook_error")
    if failed:  # the last batch's completeness was not published (stores.progress)
        # The kind of failure only: its text may name the stores' addresses, and the API's /health
        # shows this line without a token. The archiver's log has the whole text.
        kind = str(failed).split(":", 1)[0][:60]
        lag += f" (the last batch's completeness was not published ({kind}); the archiver's log says why)"
    return (
        f"queries running, {lag}, {backlog}; "
        f"archived {totals.get('events', 0):,} events, dead-lettered {totals.get('records', 0):,} records since start"
    )


def state_held(query: dict) -> str:
    """What a streaming query's state holds, as its progress says: the rows, where its state store
    counts them (an earlier release's progress), and the memory the state stores use."""
    parts = []
    if query.get("state_rows") is not None:
        parts.append(f"{query['state_rows']:,} state rows")
    if query.get("state_bytes") is not None:
        parts.append(f"state {query['state_bytes'] / 2**20:,.0f} MiB in memory")
    return ", ".join(parts) or "state not reported"


def speed_layer(settings: Settings) -> str:
    """The speed layer's query runs; its rates, batch duration, state size and lag behind Kafka."""
    from definitions.jobs import SPEED_LAYER as JOB
    from definitions.jobs import SPEED_QUERY as QUERY
    from stores.progress import read_progress, require_progressing

    state = read_progress(settings, JOB)
    require_progressing(state, (QUERY,), settings.stack.stuck_after_s)
    q = state["queries"][QUERY]
    if "batch_id" not in q:
        return "query running, first batch not finished yet"
    totals = state.get("totals", {})
    behind = q.get("rows_behind")
    backlog = f"{behind:,} records behind Kafka" if behind is not None else "backlog not measured yet"
    late = totals.get("dropped_late", 0)
    dropped = f", {late:,} rows dropped as later than the watermark since start" if late else ""
    return (
        f"micro-batch {q['batch_id']}: {q['input_rows_per_s'] or 0:,.0f} records/s in, "
        f"{q['processed_rows_per_s'] or 0:,.0f} records/s processed, {(q['batch_ms'] or 0) / 1000:.1f} s per batch, "
        f"{state_held(q)}, {backlog}; invalid skipped {totals.get('invalid_skipped', 0):,}{dropped} "
        "since start"
    )


def spark_cluster_state(settings: Settings) -> dict:
    """The local Spark standalone master's state: its JSON endpoint (workers, applications)."""
    c = settings.spark.cluster
    response = httpx.get(f"http://{c.host}:{c.ui_port}/json/", timeout=PROBE_TIMEOUT_S)
    response.raise_for_status()
    return response.json()


def spark_master(settings: Settings) -> str:
    state = spark_cluster_state(settings)
    if state.get("status") != "ALIVE":
        raise RuntimeError(f"master status {state.get('status')!r}")
    alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
    return f"master {state.get('url')} alive, {len(alive)} worker(s), {len(state.get('activeapps', []))} application(s)"


def spark_worker(number: int) -> Callable[[Settings], str]:
    """Worker `number` of the local cluster: registered with the master and alive."""

    def probe(settings: Settings) -> str:
        c = settings.spark.cluster
        port = str(c.ui_port + number)
        for worker in spark_cluster_state(settings).get("workers", []):
            if worker.get("state") == "ALIVE" and str(worker.get("webuiaddress", "")).rstrip("/").endswith(f":{port}"):
                used = f"{worker.get('coresused', 0)}/{worker.get('cores', 0)} cores in use"
                return f"registered with the master, {used}, {worker.get('memory', 0)} MiB"
        raise RuntimeError(f"worker {number} (web UI port {port}) is not registered with the master yet")

    return probe


def api(settings: Settings) -> str:
    """The query API answers its views listing."""
    base = browser_url(settings.api.host, settings.api.port, "")  # listening on every address: the loopback
    resp = httpx.get(f"{base}/api/v1/views", timeout=PROBE_TIMEOUT_S)
    resp.raise_for_status()
    return f"API answers on {base} ({len(resp.json()['views'])} views)"


def airflow(settings: Settings) -> str:
    from stores.airflow import health as airflow_health

    return airflow_health(settings)


def airflow_component(component: str) -> Callable[[Settings], str]:
    """The probe of one of Airflow's components (scheduler, dag-processor)."""

    def probe(settings: Settings) -> str:
        from stores.airflow import component_health

        return component_health(settings, component)

    return probe
