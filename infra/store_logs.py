"""Size-rotated logs for the JVM stores the stack starts itself (Kafka, HDFS, Cassandra).

Their log configurations in infra/templates write to the console, which is what `lambdactl run`
(containers) wants. When `lambdactl up` starts a store, it uses a copy of that configuration whose
console appenders are rolling file appenders instead: `<state_dir>/logs/<name>.log`, rotated at
`stack.log_max_bytes` with `stack.log_backups` older files. The JVM's own stdout (what it prints
before its logging starts, or when it dies) still goes to the same file.

HBase is left as it is: its template is a log4j2 one while its jars log through reload4j (log4j 1),
so it writes next to nothing to its log.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape

# Stores whose logging is log4j 1 (reload4j) configured from a properties file in their conf dir.
_LOG4J = ("kafka", "hdfs-namenode", "hdfs-datanode")
_LOGBACK = ("cassandra",)
_LOGBACK_MAX_WINDOW = 20  # logback's FixedWindowRollingPolicy keeps at most 20 older files


def log4j_rolling(console: str, log_file: Path, max_bytes: int, backups: int) -> str:
    """A log4j 1 properties file: `console` with each of the root logger's appenders made a
    size-rotated file appender (later keys of a properties file win)."""
    root = re.search(r"^log4j\.rootLogger\s*=\s*(.*)$", console, re.M)
    if root is None:
        raise ValueError("the log4j configuration has no log4j.rootLogger line")
    appenders = [a.strip() for a in root.group(1).split(",")[1:] if a.strip()]
    path = str(log_file).replace("\\", "\\\\")
    lines = [
        console.rstrip("\n"),
        "",
        "# Written by `lambdactl up` (infra/store_logs.py): the console appenders roll by size.",
    ]
    for name in appenders:
        prefix = f"log4j.appender.{name}"
        lines += [
            f"{prefix}=org.apache.log4j.RollingFileAppender",
            f"{prefix}.File={path}",
            f"{prefix}.Append=true",
            f"{prefix}.MaxFileSize={max_bytes}",
            f"{prefix}.MaxBackupIndex={backups}",
        ]
    return "\n".join(lines) + "\n"


def logback_rolling(console: str, log_file: Path, max_bytes: int, backups: int) -> str:
    """A logback configuration: `console` with its ConsoleAppender replaced by a size-rotated file appender."""
    pattern = re.search(r"<pattern>(.*?)</pattern>", console, re.S)
    if pattern is None:
        raise ValueError("the logback configuration has no <pattern>")
    path = escape(str(log_file))
    appender = (
        '<appender name="STDOUT" class="ch.qos.logback.core.rolling.RollingFileAppender">\n'
        f"    <file>{path}</file>\n"
        '    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">\n'
        f"      <fileNamePattern>{path}.%i</fileNamePattern><minIndex>1</minIndex>"
        f"<maxIndex>{min(backups, _LOGBACK_MAX_WINDOW)}</maxIndex>\n"
        "    </rollingPolicy>\n"
        # checkIncrement: logback 1.5 (Cassandra 5.0.7) looks at the file's size only this often: by
        # default once a minute, and even once a second let Cassandra's start-up write 2.5 times the
        # limit. Zero looks at every event (one stat of the file per line, which Cassandra can afford).
        '    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">'
        f"<maxFileSize>{max_bytes}</maxFileSize><checkIncrement>0 milliseconds</checkIncrement></triggeringPolicy>\n"
        f"    <encoder><pattern>{pattern.group(1)}</pattern></encoder>\n"
        "  </appender>"
    )
    out, count = re.subn(
        r'<appender name="STDOUT" class="ch\.qos\.logback\.core\.ConsoleAppender">.*?</appender>',
        lambda _: appender,
        console,
        flags=re.S,
    )
    if count != 1:
        raise ValueError("the logback configuration has no ConsoleAppender named STDOUT")
    return out


def _insert_before_classpath(command: list[str], flag_prefix: str, flag: str) -> list[str]:
    out = [arg for arg in command if not arg.startswith(flag_prefix)]
    at = out.index("-cp")
    return [*out[:at], flag, *out[at:]]


def with_rolling_logs(
    name: str, command: list[str], conf: Path, log_file: Path, max_bytes: int, backups: int
) -> list[str]:
    """The store's command line, logging to `log_file` rotated by size; other commands as they are."""
    if name in _LOG4J:
        target = conf / f"log4j-{name}.properties"
        target.write_text(log4j_rolling((conf / "log4j.properties").read_text(), log_file, max_bytes, backups))
        return _insert_before_classpath(command, "-Dlog4j.configuration=", f"-Dlog4j.configuration=file:{target}")
    if name in _LOGBACK:
        target = conf / f"logback-{name}.xml"
        target.write_text(logback_rolling((conf / "logback.xml").read_text(), log_file, max_bytes, backups))
        return _insert_before_classpath(
            command, "-Dlogback.configurationFile=", f"-Dlogback.configurationFile={target}"
        )
    return command
