"""Input at rates a Python producer cannot send: Kafka's own producer performance tool
(`org.apache.kafka.tools.ProducerPerformance`, in the Kafka jars the stack runs) in a background
thread, sending records drawn from a payload file of generator records.

The payload file holds `--payload-records` records of ingest.generator (valid, late and invalid,
one per line; the tool sends them in random order, so an event_id recurs: the archiver keeps every
record as received, which is what its benchmark measures). The tool has no keys and no Python on the
sending path; it reports what it sent on its last line.

For the speed layer, whose de-duplication drops such recurring copies, UniqueRecordsProducer feeds
Kafka's console producer generator records that each carry an event_id of their own.
"""

from __future__ import annotations

import functools
import logging
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from definitions.settings import Settings
from infra.java import find_java
from ingest.generator import ClickstreamGenerator, GeneratorConfig

log = logging.getLogger("bench.native")
# "3600000 records sent, 29998.3 records/sec (5.71 MB/sec), 2.1 ms avg latency, ..."
SUMMARY = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec")


@dataclass
class NativeReport:
    sent: int = 0
    rate: float = 0.0
    failed: int | None = None


def write_payload(path: Path, count: int = 50_000, invalid_fraction: float = 0.05, seed: int = 7) -> Path:
    """`count` generator records, one per line (a record holding a line break is left out)."""
    config = GeneratorConfig(seed=seed, count=count, invalid_fraction=invalid_fraction, late_fraction=0.1)
    values = [r.value for r in ClickstreamGenerator(config).records() if r.value and b"\n" not in r.value]
    path.write_bytes(b"\n".join(values))
    return path


# Warnings and errors of Kafka's tools to their stderr (the jars hold no logging set-up of their own:
# without one a failed send would go unsaid), as Kafka's own scripts set them up.
TOOLS_LOG4J = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


@functools.cache
def tools_log4j() -> Path:
    path = Path(tempfile.mkdtemp(prefix="bench-kafka-tools-")) / "log4j.properties"
    path.write_text(TOOLS_LOG4J)
    return path


def kafka_tool(settings: Settings, main_class: str) -> list[str]:
    """The command line running one of Kafka's tools from the jars the stack runs Kafka with."""
    java = find_java(settings.stack.java_home)
    return [
        str(java.executable),
        "-Xmx256m",
        f"-Dlog4j.configuration={tools_log4j().as_uri()}",
        "-cp",
        f"{settings.jars_dir / 'kafka'}/*",
        main_class,
    ]


class _Sender:
    """A producer run in a thread: `start()`, then `join()` raises what it failed with, if anything;
    `report` says what it sent."""

    def __init__(self, name: str) -> None:
        self.report: NativeReport | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._guarded, daemon=True, name=name)

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def _run(self) -> None:
        raise NotImplementedError

    def start(self):
        self.thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"{self.thread.name} failed: {self.error!r}") from self.error


class NativeProducer(_Sender):
    """ProducerPerformance sending `count` records at `rate` per second (-1: as fast as it can) to `topic`."""

    def __init__(self, settings: Settings, topic: str, payload: Path, count: int, rate: int) -> None:
        super().__init__("bench-native-producer")
        self.command = [
            *kafka_tool(settings, "org.apache.kafka.tools.ProducerPerformance"),
            "--topic",
            topic,
            "--num-records",
            str(count),
            "--throughput",
            str(rate),
            "--payload-file",
            str(payload),
            "--producer-props",
            f"bootstrap.servers={settings.kafka.bootstrap}",
            "acks=all",
            "linger.ms=20",
            # The topics are stored uncompressed (kafka.stored_compression): a batch is refused when
            # it holds more than max.message.bytes (1 MB) decompressed; 64 KiB of lz4 stays under it.
            "batch.size=65536",
            "compression.type=lz4",
        ]
        self.count = count

    def _run(self) -> None:
        done = subprocess.run(self.command, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if SUMMARY.match(line)]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"ProducerPerformance exited {done.returncode}: {done.stderr.strip()[-500:]}")
        match = SUMMARY.match(lines[-1])
        assert match is not None
        sent = int(match.group(1))
        self.report = NativeReport(sent=sent, rate=float(match.group(2)), failed=self.count - sent)


EVENT_ID_AT = slice(13, 49)  # the event_id of a generator record: {"event_id":"<36 characters>",...


def base_records(count: int, seed: int, url_prefix: str) -> list[bytes]:
    """`count` valid generator records (the platform's URL, user, country and device mix), each
    starting with its event_id, for UniqueRecordsProducer to send with ids of their own."""
    config = GeneratorConfig(seed=seed, count=count, url_prefix=url_prefix)
    values = [r.value for r in ClickstreamGenerator(config).records() if r.value]
    if not values or any(v[: EVENT_ID_AT.start] != b'{"event_id":"' or v[EVENT_ID_AT.stop] != 34 for v in values):
        raise ValueError("the generator's records no longer start with their event_id")
    return values


def unique_record(base: list[bytes], tag: int, n: int) -> bytes:
    """Record `n` of a step tagged `tag`: a base record with the event_id `tag`/`n` (UUID-shaped)."""
    value = base[n % len(base)]
    event_id = f"{tag & 0xFFFFFFFF:08x}-0000-4000-8000-{n:012x}".encode()
    return value[: EVENT_ID_AT.start] + event_id + value[EVENT_ID_AT.stop :]


class UniqueRecordsProducer(_Sender):
    """Kafka's console producer (the JVM client: no Python on its sending path) fed `count` records at
    `rate` per second, each with an event_id of its own, so the speed layer counts every one (the
    performance tool draws its records from its payload at random: copies the speed layer drops).
    A thread writes the lines to its input on schedule, in 20 ms chunks (~1 µs of Python a record);
    the rate offered is what that thread got written."""

    CHUNK_S = 0.02

    def __init__(self, settings: Settings, topic: str, base: list[bytes], count: int, rate: int, tag: int) -> None:
        super().__init__("bench-unique-producer")
        self.command = [
            *kafka_tool(settings, "kafka.tools.ConsoleProducer"),
            "--bootstrap-server",
            settings.kafka.bootstrap,
            "--topic",
            topic,
            "--compression-codec",
            "lz4",
            "--producer-property",
            "acks=all",
            "--producer-property",
            "linger.ms=20",
            "--producer-property",
            "batch.size=65536",  # under the topic's max.message.bytes decompressed (NativeProducer)
        ]
        self.base, self.count, self.rate, self.tag = base, count, rate, tag

    def _run(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"a rate of {self.rate} records/s: the console producer is fed at a positive rate")
        proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stderr is not None
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)  # type: ignore[union-attr]
        reader.start()
        started = time.monotonic()
        written = 0
        try:
            while written < self.count:
                due = min(self.count, int((time.monotonic() - started) * self.rate) + 1)
                if due > written:
                    lines = (unique_record(self.base, self.tag, n) + b"\n" for n in range(written, due))
                    proc.stdin.write(b"".join(lines))
                    written = due
                time.sleep(self.CHUNK_S)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the producer ended early: its exit status and log say why
        code = proc.wait()
        elapsed = time.monotonic() - started  # until the producer sent what it buffered
        reader.join(timeout=10)
        # Its callback logs each record Kafka refused or that timed out ("Error when sending message").
        failed = sum(1 for line in errors if b"Error when sending" in line)
        if code != 0 or written < self.count:
            tail = b"".join(errors[-5:]).decode(errors="replace")[-500:]
            raise RuntimeError(f"ConsoleProducer exited {code} after {written:,} of {self.count:,} records: {tail}")
        self.report = NativeReport(sent=written - failed, rate=written / elapsed, failed=failed)
