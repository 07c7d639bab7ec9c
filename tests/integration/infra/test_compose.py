"""docker-compose.yml stays valid and consistent with the local stack (it cannot run here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import yaml

from definitions.section import REPO_ROOT
from definitions.settings import Settings

COMPOSE = REPO_ROOT / "docker-compose.yml"
MAVEN_POM = REPO_ROOT / "infra" / "maven" / "pom.xml"
# An exact release: `5.0.6`, never a floating `5.0`, `5` or `latest`.
EXACT_VERSION = re.compile(r"\d+\.\d+\.\d+")
# compose service -> the infra/maven property naming the release the local stack runs
IMAGE_VERSIONS = {
    "kafka": "kafka.version",
    "namenode": "hadoop.version",
    "datanode": "hadoop.version",
    "cassandra": "cassandra.version",
}
# local service name -> compose service name
SERVICE_MAP = {
    "kafka": "kafka",
    "hdfs-namenode": "namenode",
    "hdfs-datanode": "datanode",
    "hbase": "hbase",
    "hbase-thrift": "hbase-thrift",
    "cassandra": "cassandra",
    "archiver": "archiver",
    "speed-layer": "speed-layer",
    "api": "api",
    "airflow": "airflow",
    "airflow-scheduler": "airflow-scheduler",
    "airflow-dag-processor": "airflow-dag-processor",
}


def _published(service: dict) -> dict[int, str]:
    result = {}
    for spec in service.get("ports", []):
        host, host_port, _container = str(spec).rsplit(":", 2)
        result[int(host_port)] = host
    return result


def test_compose_file_parses_with_compose():
    docker_compose = shutil.which("docker-compose")
    assert docker_compose, "docker-compose (Debian package) is installed by infra/setup.sh"
    env = {**os.environ, "LAMBDA_API__TOKEN": "compose-config-check", "LAMBDA_AIRFLOW__ADMIN_PASSWORD": "check"}
    done = subprocess.run(
        [docker_compose, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr


def test_compose_runs_every_local_service_on_the_same_ports():
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    defaults = Settings(_env_file=None)
    assert set(SERVICE_MAP) == set(defaults.stack.managed_services)
    expected = {
        "kafka": [defaults.kafka.port],
        "namenode": [defaults.hdfs.port, defaults.hdfs.http_port],
        "datanode": [defaults.hdfs.datanode_port, defaults.hdfs.datanode_http_port],
        "hbase-thrift": [defaults.hbase.thrift_port],
        "hbase": [defaults.hbase.master_info_port],
        "cassandra": [defaults.cassandra.port],
        "api": [defaults.api.port],
        "airflow": [defaults.airflow.port],
    }
    for local, name in SERVICE_MAP.items():
        assert name in compose, f"{local} has no compose service"
    for name, ports in expected.items():
        published = _published(compose[name])
        for port in ports:
            assert published.get(port) == "127.0.0.1", f"{name} should publish {port} on 127.0.0.1"
    for service in compose.values():
        assert all(host == "127.0.0.1" for host in _published(service).values())


def test_compose_runs_platform_services_with_the_platforms_own_launcher():
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    for name in (
        "hbase",
        "hbase-thrift",
        "archiver",
        "speed-layer",
        "api",
        *(n for n in SERVICE_MAP if "airflow" in n),
    ):
        assert compose[name]["command"] == ["run", name]
        assert compose[name]["image"] == "lambda-platform:local"


def test_compose_pins_every_image_to_the_exact_release_the_local_stack_runs():
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    pom = ET.parse(MAVEN_POM).getroot()
    namespace = "{http://maven.apache.org/POM/4.0.0}"
    for name, service in compose.items():
        image = service["image"]
        if "build" in service:  # the platform's own image, built here from this work tree
            assert image == "lambda-platform:local", name
            continue
        repository, _, tag = image.split("@", 1)[0].rpartition(":")  # a digest may follow the tag
        assert repository and EXACT_VERSION.fullmatch(tag), f"{name}: {image} is not pinned to an exact version"
    for name, prop in IMAGE_VERSIONS.items():
        release = pom.findtext(f"{namespace}properties/{namespace}{prop}")
        assert release and compose[name]["image"].endswith(f":{release}"), (
            f"{name} runs {compose[name]['image']}, the local stack {prop} {release}"
        )


def test_the_api_container_reaches_airflow_with_its_password():
    """POST /api/v1/admin/recompute asks Airflow: the API container looked for it on its own
    127.0.0.1 with the development password, and answered 503 every time."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    env = services["api"]["environment"]
    assert env.get("LAMBDA_AIRFLOW__HOST") == "airflow", env
    assert "LAMBDA_AIRFLOW__ADMIN_PASSWORD" in env, env
    assert env["LAMBDA_AIRFLOW__ADMIN_PASSWORD"] == services["airflow"]["environment"]["LAMBDA_AIRFLOW__ADMIN_PASSWORD"]


def test_the_compose_api_runs_in_production_unless_told_otherwise():
    """Its default was development: the development token was accepted and /docs served, while the
    README and docs/security.md say production is the default."""
    env = yaml.safe_load(COMPOSE.read_text())["services"]["api"]["environment"]
    assert env["LAMBDA_ENVIRONMENT"] == "${LAMBDA_ENVIRONMENT:-production}", env


def _settings_of(service: dict, monkeypatch) -> Settings:
    """The settings a compose service's processes read: its LAMBDA_* environment, nothing else."""
    for name in [n for n in os.environ if n.startswith("LAMBDA_")]:
        monkeypatch.delenv(name)
    for name, value in (service.get("environment") or {}).items():
        value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))  # a default compose fills in
        if name.startswith("LAMBDA_") and "${" not in value:  # not one the user must give (a secret)
            monkeypatch.setenv(name, value)
    return Settings(_env_file=None)


def test_every_platform_container_reaches_thrift_where_it_runs(monkeypatch, tmp_path):
    """Clients went to hbase:9090 (the master's container), and the Thrift server, in a container of
    its own, was told to listen on the master's address: nothing after bootstrap started."""
    from infra.java import JavaRuntime
    from infra.service_base import ServiceDirs
    from infra.store_services import _render_hbase

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    thrift = services["hbase-thrift"]
    for name, service in services.items():
        if service.get("image") != "lambda-platform:local" or name in ("hbase", "hbase-thrift"):
            continue
        endpoints = _settings_of(service, monkeypatch).hbase.thrift_endpoints
        assert endpoints == [(thrift["hostname"], 9090)], f"{name} asks Thrift at {endpoints}"
    dirs = ServiceDirs(root=tmp_path)
    dirs.conf.mkdir()
    _render_hbase(_settings_of(thrift, monkeypatch), dirs, JavaRuntime.__new__(JavaRuntime))
    site = ET.parse(dirs.conf / "hbase-site.xml").getroot()
    values = {p.findtext("name"): p.findtext("value") for p in site.iter("property")}
    assert values["hbase.regionserver.thrift.ipaddress"] in ("0.0.0.0", thrift["hostname"]), values
    assert values["hbase.zookeeper.quorum"] == "hbase", "the master's ZooKeeper is still the master's"


def test_the_image_compiles_the_platforms_own_jvm_code():
    """Every Spark session needs the event contract's validator (jars_dir/contract), which only
    infra/setup.sh compiled: in the image every Spark job failed at its start."""
    dockerfile = (REPO_ROOT / "infra" / "docker" / "Dockerfile").read_text()
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert "-jdk" in final.splitlines()[0], "javac is needed in the final stage"
    assert "bash infra/compile_jvm.sh" in final and final.index("COPY --from=jars") < final.index("compile_jvm.sh")
    assert "bash infra/compile_jvm.sh" in (REPO_ROOT / "infra" / "setup.sh").read_text(), "one script for both"


def test_links_handed_to_a_browser_name_addresses_it_reaches(monkeypatch):
    """The Airflow UI's report link was http://api:8000/... and the recompute route answered
    http://airflow:8080/...: names only the containers know."""
    from definitions.section import browser_url

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = {port: host for s in services.values() for port, host in _published(s).items()}
    for name in ("api", "airflow", "airflow-scheduler", "airflow-dag-processor"):
        settings = _settings_of(services[name], monkeypatch)
        for section in (settings.api, settings.airflow):
            url = browser_url(section.host, section.port, section.public_url)
            assert url == f"http://{published[section.port]}:{section.port}", (name, url)


def test_the_compose_api_takes_only_host_names_its_clients_use(monkeypatch):
    """Listening on 0.0.0.0 with no allowed_hosts, it took any Host header: a web page whose name
    was rebound to 127.0.0.1 read every view (docs/security.md)."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    names = _settings_of(services["api"], monkeypatch).api.host_names()
    assert names is not None and "evil.example" not in names
    for name in ("airflow", "airflow-scheduler", "airflow-dag-processor"):  # they ask http://api:8000
        assert _settings_of(services[name], monkeypatch).api.host in names, name
    assert "127.0.0.1" in names and "localhost" in names  # the published port, from a browser here


def test_the_jvm_code_compiles_where_only_the_maven_jars_are(settings, tmp_path):
    """What the image's build runs: infra/compile_jvm.sh over a jars directory that infra/maven filled
    and infra/setup.sh never stamped (the image's Maven stage writes no stamp): it failed there."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "hbase").symlink_to(settings.jars_dir / "hbase")
    env = {**os.environ, "LAMBDA_VENV": str(REPO_ROOT / ".venv"), "LAMBDA_JARS_DIR": str(jars)}
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "compile_jvm.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (jars / "contract" / "lambda-contract.jar").stat().st_size > 0
    assert (jars / "hbase-load" / "lambda-hbase-load.jar").stat().st_size > 0
    assert (jars / "speed-layer" / "lambda-speed-layer.jar").stat().st_size > 0
    again = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "compile_jvm.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0 and again.stderr.count("up to date") == 3, again.stderr[-2000:]


def test_the_api_reads_the_reports_the_dags_tasks_write():
    """The DAG's `lambdactl report` writes under the Airflow containers' state directory; the API
    read its own, so it listed no report and the DAG's report link answered 404."""
    from reports.storage import reports_dir

    services = yaml.safe_load(COMPOSE.read_text())["services"]

    def mounted(name: str) -> dict[str, str]:
        """target → source of a service's volumes."""
        out = {}
        for spec in services[name].get("volumes", []):
            source, target, *mode = str(spec).split(":")
            out[target] = source + (":" + mode[0] if mode else "")
        return out

    image = (REPO_ROOT / "infra" / "docker" / "Dockerfile").read_text()
    state = re.search(r"LAMBDA_STATE_DIR=(\S+)", image)
    assert state, "the image names the state directory"
    for name in ("api", "airflow", "airflow-scheduler", "airflow-dag-processor"):
        assert "LAMBDA_STATE_DIR" not in (services[name].get("environment") or {}), name
    where = str(reports_dir(Settings(_env_file=None, state_dir=state.group(1))))
    assert mounted("api").get(where) == "reports:ro", mounted("api")
    for writer in ("airflow", "airflow-scheduler", "airflow-dag-processor"):
        assert mounted(writer).get(where) == "reports", (writer, mounted(writer))
    assert "reports" in yaml.safe_load(COMPOSE.read_text())["volumes"]
