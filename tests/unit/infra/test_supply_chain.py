"""The supply chain is locked: every Python package comes from a lock file with its sha256 and is
installed in hash-checking mode, nothing is built with build requirements fetched on the side, and
Maven fails on a checksum that does not match. Reads the files only (no network, no service)."""

from __future__ import annotations

import re
import shlex
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LOCKS = (
    "requirements.lock",
    "infra/airflow_env/requirements.lock",
    "infra/lock/build-tools.lock",
    "infra/lock/lock-tools.lock",
)
# The scripts that install Python packages or resolve jars on a fresh machine or in the image.
INSTALLERS = ("infra/setup.sh", "infra/airflow_env/setup.sh", "infra/docker/Dockerfile")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
MAVEN = "{http://maven.apache.org/SETTINGS/1.0.0}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(lock: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hash options) for each requirement of a lock file (continuation lines joined)."""
    text = (ROOT / lock).read_text()
    logical = re.sub(r"\\\n", " ", text)
    found: dict[str, tuple[str, list[str]]] = {}
    for line in logical.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        first, *options = line.split()
        pin = PIN.match(first)
        assert pin, f"{lock}: {first!r} is not pinned to one version with =="
        assert all(o.startswith("--hash=") for o in options), f"{lock}: {first} has an option other than --hash"
        found[canonical(pin["name"])] = (pin["version"], options)
    return found


def commands(path: str) -> list[list[str]]:
    """Every shell command of a script or Dockerfile, continuation lines joined, split on && and ;."""
    text = re.sub(r"\\\n", " ", (ROOT / path).read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|;|\|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:  # a quote that spans a split point: not a command we look at
                continue
            if words:
                result.append(words)
    return result


def pip_installs(path: str) -> list[list[str]]:
    found = []
    for words in commands(path):
        for i, word in enumerate(words[:-1]):
            if word.endswith("/pip") and words[i + 1] == "install":
                found.append(words[i + 2 :])
    return found


def mvn_runs(path: str) -> list[list[str]]:
    found = []
    for words in commands(path):
        for i, word in enumerate(words):
            if word == "mvn" and (i == 0 or words[i - 1] != "-v"):  # not `command -v mvn`
                found.append(words[i + 1 :])
    return found


@pytest.mark.parametrize("lock", LOCKS)
def test_every_requirement_of_a_lock_file_is_pinned_with_its_sha256(lock):
    pins = requirements(lock)
    assert pins, f"{lock} pins nothing"
    for name, (_version, options) in pins.items():
        assert options, f"{lock}: {name} has no --hash=sha256:"
        for option in options:
            assert HASH.match(option), f"{lock}: {name} has {option!r}, not a sha256"
    assert "--hash=sha256:" in (ROOT / lock).read_text()


def test_the_lock_holds_the_versions_pyproject_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted += extra
    locked = requirements("requirements.lock")
    for requirement in wanted:
        name, version = requirement.split("==")
        name = name.split("[")[0]  # kafka-python[lz4,…]: the extras' packages are locked as its dependencies
        assert canonical(name) in locked, f"{name} is in pyproject.toml but not in requirements.lock: run `make lock`"
        assert locked[canonical(name)][0] == version, f"pyproject.toml pins {requirement}; run `make lock`"


def test_the_build_tools_lock_holds_the_backend_pyproject_builds_with():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert build["build-backend"].startswith("setuptools")
    tools = requirements("infra/lock/build-tools.lock")
    assert {"pip", "setuptools"} <= set(tools)
    minimum = re.fullmatch(r"setuptools>=(\d+)", build["requires"][0])
    assert minimum and int(tools["setuptools"][0].split(".")[0]) >= int(minimum[1])


@pytest.mark.parametrize("path", INSTALLERS)
def test_every_pip_install_checks_hashes_and_fetches_nothing_to_build_with(path):
    installs = pip_installs(path)
    assert installs, f"{path} installs nothing with pip"
    for args in installs:
        assert "--upgrade" not in args and "-U" not in args, f"{path}: an upgrade takes whatever PyPI has: {args}"
        if "-e" in args:
            # The platform itself, from the work tree: no file to hash, so nothing may come with it.
            assert args[args.index("-e") + 1] == ".", args
            assert "--no-deps" in args and "--no-build-isolation" in args, f"{path}: {args}"
            continue
        assert "--require-hashes" in args, f"{path}: pip install without --require-hashes: {args}"
        assert "-r" in args, f"{path}: {args} installs something that is not a lock file"
        assert args[args.index("-r") + 1] in (*LOCKS, "$LOCK"), args
        # an isolated build would fetch its build requirements without hashes: build in place, or build nothing
        assert "--no-build-isolation" in args or ":all:" in args, f"{path}: {args} may build in isolation"


def test_the_platform_lock_installs_after_the_build_tools():
    installs = [args for args in pip_installs("infra/setup.sh")]
    locks = [args[args.index("-r") + 1] for args in installs if "-r" in args]
    assert locks == ["infra/lock/build-tools.lock", "requirements.lock"]
    assert "-e" in installs[-1], "the editable install comes last, when setuptools is in place"


@pytest.mark.parametrize("path", ("infra/setup.sh", "infra/docker/Dockerfile"))
def test_maven_runs_with_strict_checksums(path):
    runs = mvn_runs(path)
    assert runs, f"{path} does not run Maven"
    for args in runs:
        assert "-C" in args or "--strict-checksums" in args, f"{path}: mvn without strict checksums: {args}"
        assert args[args.index("-s") + 1] == "infra/maven/settings.xml", args


def test_the_maven_project_and_settings_are_well_formed():
    # XML comments cannot hold "--": a comment quoting `--strict-checksums` breaks the POM
    for path in (ROOT / "infra/maven").rglob("*.xml"):
        ET.parse(path)


def test_maven_settings_fail_on_a_bad_checksum():
    settings = ET.parse(ROOT / "infra/maven/settings.xml").getroot()
    active = [e.text for e in settings.iter(f"{MAVEN}activeProfile")]
    profiles = [p for p in settings.iter(f"{MAVEN}profile") if p.findtext(f"{MAVEN}id") in active]
    repositories = [r for p in profiles for tag in ("repository", "pluginRepository") for r in p.iter(f"{MAVEN}{tag}")]
    assert {r.tag.removeprefix(MAVEN) for r in repositories} == {"repository", "pluginRepository"}
    for repository in repositories:
        assert repository.findtext(f"{MAVEN}releases/{MAVEN}checksumPolicy") == "fail"
    mirrors = list(settings.iter(f"{MAVEN}mirror"))
    assert [m.findtext(f"{MAVEN}mirrorOf") for m in mirrors] == ["*"]
    assert all(m.findtext(f"{MAVEN}url", "").startswith("https://") for m in mirrors)


def test_every_image_is_pinned_to_an_exact_version():
    """docker-compose.yml's images and the Dockerfile's bases name full versions (x.y.z…), never a
    floating tag such as `latest`, `17-jre` or `3.9`."""
    compose = re.findall(r"^\s*image:\s*(\S+)", (ROOT / "docker-compose.yml").read_text(), flags=re.M)
    bases = re.findall(r"^FROM\s+(\S+)", (ROOT / "infra/docker/Dockerfile").read_text(), flags=re.M)
    external = [i for i in compose + bases if not i.startswith("lambda-platform:")]
    assert len(bases) == 2 and len(external) >= 5, external
    floating = [i for i in external if not re.search(r":\d+\.\d+\.\d+", i)]
    assert floating == [], f"images without an exact version: {floating}"
