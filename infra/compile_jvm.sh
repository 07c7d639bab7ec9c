#!/usr/bin/env bash
# The platform's own JVM code, compiled against the pinned pyspark (LAMBDA_VENV) and the jars
# infra/maven resolved (LAMBDA_JARS_DIR): the event contract's validator (definitions/jvm), the speed
# layer's de-duplication (speed_layer/jvm) and the HBase bulk load (stores/jvm). Each is rebuilt only
# when its sources or what it compiles against changed. Run by infra/setup.sh and by
# infra/docker/Dockerfile; needs a JDK (javac, jar).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LAMBDA_VENV:?names the platform virtualenv}
JARS=${LAMBDA_JARS_DIR:?names the jars directory infra/maven filled}
log() { printf '[setup] %s\n' "$*" >&2; }
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
spark_jars=$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')

# build <folder> <jar> <what> <classpath> <stamp> <sources...>: one jar, unless its stamp says it is current.
build() {
  local folder=$1 jar=$2 what=$3 classpath=$4 stamp=$5
  shift 5
  if [ "$(cat "$folder/.lambda-stamp" 2>/dev/null)" = "$stamp" ]; then
    log "$what up to date"
    return
  fi
  log "compiling $what into $folder"
  rm -rf "$folder" && mkdir -p "$folder/classes"
  javac --release 17 -Xlint:all,-path,-classfile -Werror -cp "$classpath" -d "$folder/classes" "$@"
  jar cf "$folder/$jar" -C "$folder/classes" .
  rm -rf "$folder/classes"
  echo "$stamp" > "$folder/.lambda-stamp"
}

# The event contract's validator for Spark (definitions/jvm).
build "$JARS/contract" lambda-contract.jar "the event contract's JVM validator" "$spark_jars/*" \
  "$(stamp_of definitions/jvm/*.java requirements.lock)" definitions/jvm/*.java
# The speed layer's de-duplication (speed_layer/jvm), a Spark stateful processor.
build "$JARS/speed-layer" lambda-speed-layer.jar "the speed layer's de-duplication" "$spark_jars/*" \
  "$(stamp_of speed_layer/jvm/*.java requirements.lock)" speed_layer/jvm/*.java
# The batch layer's HBase bulk load (stores/jvm, used when batch.load = "bulk"), also against the
# HBase jars infra/maven resolved (its POMs are in the stamp, not a stamp only setup.sh writes).
# (Listed even when the jar is current: absent, javac names what it misses should it have to run.)
hbase_cp=$( (ls "$JARS"/hbase/hbase-{common,client,server,shaded-miscellaneous}-*.jar 2>/dev/null || true) | tr '\n' ':')
build "$JARS/hbase-load" lambda-hbase-load.jar "the HBase bulk load" "$spark_jars/*:$hbase_cp" \
  "$(stamp_of stores/jvm/*.java requirements.lock infra/maven/pom.xml infra/maven/*/pom.xml)" stores/jvm/*.java
