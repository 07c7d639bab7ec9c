#!/usr/bin/env bash
# The platform's own JVM code, compiled against the pinned pyspark (LAMBDA_VENV) and the jars
# infra/maven resolved (LAMBDA_JARS_DIR): the event contract's validator (definitions/jvm) and the
# HBase bulk load (stores/jvm). Each is rebuilt only when its sources or what it compiles against
# changed. Run by infra/setup.sh and by infra/docker/Dockerfile; needs a JDK (javac, jar).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LAMBDA_VENV:?names the platform virtualenv}
JARS=${LAMBDA_JARS_DIR:?names the jars directory infra/maven filled}
log() { printf '[setup] %s\n' "$*" >&2; }
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# The event contract's validator for Spark (definitions/jvm), compiled against the pinned pyspark.
CONTRACT="$JARS/contract"
contract_stamp=$(stamp_of definitions/jvm/*.java requirements.lock)
if [ "$(cat "$CONTRACT/.lambda-stamp" 2>/dev/null)" != "$contract_stamp" ]; then
  log "compiling the event contract's JVM validator into $CONTRACT"
  spark_jars=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  rm -rf "$CONTRACT" && mkdir -p "$CONTRACT/classes"
  javac --release 17 -Xlint:all,-path -Werror -cp "$spark_jars/*" -d "$CONTRACT/classes" definitions/jvm/*.java
  jar cf "$CONTRACT/lambda-contract.jar" -C "$CONTRACT/classes" .
  rm -rf "$CONTRACT/classes"
  echo "$contract_stamp" > "$CONTRACT/.lambda-stamp"
else
  log "event contract validator up to date"
fi
# The batch layer's HBase bulk load (stores/jvm, used when batch.load = "bulk"), compiled against
# the pinned pyspark and the HBase jars infra/maven resolved.
HBASE_LOAD="$JARS/hbase-load"
# (The jars it compiles against are what infra/maven names: its POMs, not a stamp only setup.sh writes.)
hbase_load_stamp=$(stamp_of stores/jvm/*.java requirements.lock infra/maven/pom.xml infra/maven/*/pom.xml)
if [ "$(cat "$HBASE_LOAD/.lambda-stamp" 2>/dev/null)" != "$hbase_load_stamp" ]; then
  log "compiling the HBase bulk load into $HBASE_LOAD"
  spark_jars=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  hbase_cp=$(ls "$JARS"/hbase/hbase-{common,client,server,shaded-miscellaneous}-*.jar | tr '\n' ':')
  rm -rf "$HBASE_LOAD" && mkdir -p "$HBASE_LOAD/classes"
  javac --release 17 -Xlint:all,-path,-classfile -Werror -cp "$spark_jars/*:$hbase_cp" -d "$HBASE_LOAD/classes" stores/jvm/*.java
  jar cf "$HBASE_LOAD/lambda-hbase-load.jar" -C "$HBASE_LOAD/classes" .
  rm -rf "$HBASE_LOAD/classes"
  echo "$hbase_load_stamp" > "$HBASE_LOAD/.lambda-stamp"
else
  log "HBase bulk load up to date"
fi
