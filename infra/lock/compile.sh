#!/usr/bin/env bash
# Writes the lock files, every package pinned with the sha256 of each of its files on PyPI:
#   requirements.lock                    the platform's virtualenv: pyproject.toml with its test and dev extras
#   infra/airflow_env/requirements.lock  Airflow's virtualenv: infra/airflow_env/requirements.in
#   infra/lock/build-tools.lock          pip and setuptools, installed first into both virtualenvs
#   infra/lock/lock-tools.lock           uv, which writes all four
# uv runs from a throwaway virtualenv, itself installed with --require-hashes. A pin already in a lock
# file stays where it is unless its input changed (a new pin in pyproject.toml, say); move one with
#   make lock LOCK_ARGS='--upgrade-package certifi'     (or LOCK_ARGS=--upgrade for everything)
# The locks are for Linux x86_64 and Python 3.11, the platform's only target; the hashes cover every
# file of a version, so pip on another Linux architecture finds its wheel's hash too.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
"$PYTHON" -m venv "$tools"
"$tools/bin/pip" install -q --require-hashes --no-deps --only-binary :all: -r infra/lock/lock-tools.lock

compile() {
  local input=$1 output=$2
  shift 2
  printf '[lock] %s -> %s\n' "$input" "$output" >&2
  "$tools/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
    --python-platform x86_64-unknown-linux-gnu --custom-compile-command "make lock" \
    "$@" -o "$output" "$input"
}

compile pyproject.toml requirements.lock --all-extras "$@"
compile infra/airflow_env/requirements.in infra/airflow_env/requirements.lock "$@"
compile infra/lock/build-tools.in infra/lock/build-tools.lock "$@"
compile infra/lock/lock-tools.in infra/lock/lock-tools.lock "$@"
