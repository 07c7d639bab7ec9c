"""docker-compose.yml stays valid and consistent with the local stack (it cannot run here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import yaml

from definitions.settings import REPO_ROOT, Settings

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
