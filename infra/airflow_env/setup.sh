#!/usr/bin/env bash
# Airflow 3 in a virtualenv of its own (its pins clash with the platform's), from its lock file,
# every file checked against its sha256 there (`make lock` writes it from requirements.in).
# Idempotent: skipped when the lock files have not changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${LAMBDA_AIRFLOW__VENV:-$PWD/.venv-airflow}
PYTHON=${PYTHON:-python3}
LOCK=infra/airflow_env/requirements.lock
stamp=$(cat "$LOCK" infra/lock/build-tools.lock | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.lambda-stamp" 2>/dev/null)" = "$stamp" ]; then
  printf '[setup] Airflow virtualenv up to date\n' >&2
  exit 0
fi
printf '[setup] installing Airflow into %s (first time: a few minutes)\n' "$VENV" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --require-hashes --no-deps --only-binary :all: -r infra/lock/build-tools.lock
# shellcheck source=infra/progress.sh
. infra/progress.sh
# wheels only: nothing is built, so no build step fetches a package of its own, unhashed
with_progress "installing Airflow" "echo \$(ls -d \"$VENV\"/lib/python3*/site-packages/*.dist-info 2>/dev/null | wc -l) packages installed" \
  "$VENV/bin/pip" install -q --require-hashes --only-binary :all: -r "$LOCK"
echo "$stamp" > "$VENV/.lambda-stamp"
