#!/usr/bin/env bash
# Sets up everything the platform needs on a fresh machine, idempotently:
#   system packages (JDK 17, Maven) when missing, the Python virtualenv from the lock file,
#   and the service jars resolved from Maven Central by infra/maven.
# Re-running it is quick: each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${LAMBDA_VENV:-$ROOT/.venv}
JARS=${LAMBDA_JARS_DIR:-$ROOT/.lambda/jars}
PYTHON=${PYTHON:-python3}

log() { printf '[setup] %s\n' "$*" >&2; }
# shellcheck source=infra/progress.sh
. "$ROOT/infra/progress.sh"

need_apt=()
java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null || [ "$(java_major java)" -lt 17 ] || [ "$(java_major java)" -gt 23 ]; then
  if [ ! -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ]; then need_apt+=(openjdk-17-jdk-headless); fi
fi
# javac compiles the event contract's JVM validator (definitions/jvm)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
# docker-compose (v1, a pure parser here: no engine) validates docker-compose.yml in the tests
command -v docker-compose >/dev/null || need_apt+=(docker-compose)
# Debian's Chromium: the dashboard and report pages are tested in it, headless (Playwright drives it)
command -v chromium >/dev/null || need_apt+=(chromium)
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# a native HTTP load generator for the API benchmark (bench/api_load.py)
command -v hey >/dev/null || need_apt+=(hey)
# the local stack's TLS material (infra/local_tls.py: a CA, server and client certificates)
command -v openssl >/dev/null || need_apt+=(openssl)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing system packages: ${need_apt[*]} (install them, e.g. sudo apt-get install ${need_apt[*]})"; exit 1
  fi
  log "installing system packages: ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

"$PYTHON" - <<'PY' || { log "Python 3.11 is required (set PYTHON=/path/to/python3.11)"; exit 1; }
import sys
sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)
PY

stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

py_stamp=$(stamp_of requirements.lock infra/lock/build-tools.lock pyproject.toml)
if [ "$(cat "$VENV/.lambda-stamp" 2>/dev/null)" != "$py_stamp" ]; then
  log "creating the virtualenv in $VENV"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  # Every file PyPI sends is checked against its sha256 in a lock file (--require-hashes; `make lock`
  # writes them). pip and setuptools come first, so that the lock installs without build isolation:
  # its few source distributions (pyspark, hdfs, docopt) build with this setuptools, and no build
  # step fetches a package of its own, unhashed.
  "$VENV/bin/pip" install -q --require-hashes --no-deps --only-binary :all: -r infra/lock/build-tools.lock
  with_progress "installing Python packages" "echo \$(ls -d \"$VENV\"/lib/python3*/site-packages/*.dist-info 2>/dev/null | wc -l) packages installed" \
    "$VENV/bin/pip" install -q --require-hashes --no-build-isolation -r requirements.lock
  # The platform itself, editable (no file to hash): nothing beside it (--no-deps), built by the setuptools above.
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e .
  echo "$py_stamp" > "$VENV/.lambda-stamp"
else
  log "virtualenv up to date"
fi

jar_stamp=$(stamp_of infra/maven/pom.xml infra/maven/*/pom.xml infra/maven/settings.xml)
if [ "$(cat "$JARS/.lambda-stamp" 2>/dev/null)" != "$jar_stamp" ]; then
  log "resolving service jars from Maven Central into $JARS (first time: a few minutes)"
  rm -rf "$JARS"
  with_progress "resolving service jars" "echo \$(find \"\${HOME}/.m2/repository\" -name '*.jar' 2>/dev/null | wc -l) jars in the local Maven repository" \
    mvn -B -q --strict-checksums -s infra/maven/settings.xml -f infra/maven/pom.xml -Djars.dir="$JARS" package
  echo "$jar_stamp" > "$JARS/.lambda-stamp"
else
  log "service jars up to date"
fi
LAMBDA_VENV="$VENV" LAMBDA_JARS_DIR="$JARS" bash infra/compile_jvm.sh
bash infra/airflow_env/setup.sh
log "ready"
