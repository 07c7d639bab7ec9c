"""Input at rates a Python producer cannot send: Kafka's own producer performance tool
(`org.apache.kafka.tools.ProducerPerformance`, in the Kafka jars the stack runs) in a background
thread, sending records drawn from a payload file of generator records.

The payload file holds `--payload-records` records of ingest.generator (valid, late and invalid,
one per line; the tool sends them in random order, so an event_id recurs: the archiver keeps every
record as received, which is what its benchmark measures). The tool has no keys and no Python on the
sending path; it reports what it sent on its last line.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
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


class NativeProducer:
    """ProducerPerformance sending `count` records at `rate` per second (-1: as fast as it can) to `topic`."""

    def __init__(self, settings: Settings, topic: str, payload: Path, count: int, rate: int) -> None:
        java = find_java(settings.stack.java_home)
        self.command = [
            str(java.executable),
            "-Xmx256m",
            "-cp",
            f"{settings.jars_dir / 'kafka'}/*",
            "org.apache.kafka.tools.ProducerPerformance",
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
        self.report: NativeReport | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-native-producer")

    def _run(self) -> None:
        try:
            done = subprocess.run(self.command, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if SUMMARY.match(line)]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"ProducerPerformance exited {done.returncode}: {done.stderr.strip()[-500:]}")
            match = SUMMARY.match(lines[-1])
            assert match is not None
            sent = int(match.group(1))
            self.report = NativeReport(sent=sent, rate=float(match.group(2)), failed=self.count - sent)
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def start(self) -> NativeProducer:
        self.thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"native producer failed: {self.error!r}") from self.error
