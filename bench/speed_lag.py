"""How far the speed layer (or another query on `events`) is behind: Kafka's end offsets of `events`
against the offsets of its last committed micro-batch (read from its checkpoint on HDFS), and its
progress file."""

from __future__ import annotations

import json
import logging
import time

from definitions.settings import Settings
from speed_layer.job import JOB, QUERY
from stores.progress import read_local_progress
from stores.webhdfs import WebHdfs

log = logging.getLogger("bench.speed")


class LagProbe:
    """The lag of a streaming query reading topic `events`; the speed layer's unless `checkpoint`
    names another query's checkpoint directory on HDFS."""

    def __init__(self, settings: Settings, checkpoint: str | None = None) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.settings = settings
        self.topic = settings.kafka.events_topic
        self.consumer = KafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap, enable_auto_commit=False, client_id="lambda-bench-speed"
        )
        partitions = self.consumer.partitions_for_topic(self.topic) or set(range(settings.kafka.partitions))
        self.partitions = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        self.fs = WebHdfs(settings)
        self.checkpoint = (checkpoint or settings.speed.checkpoint_dir).rstrip("/")
        self._last_batch: int | None = None
        self._last_committed = 0

    def end_offsets(self) -> int:
        return sum(self.consumer.end_offsets(self.partitions).values())

    def committed(self) -> tuple[int | None, int]:
        """(batch id, sum of its end offsets) of the speed layer's last committed micro-batch."""
        batches = [int(n) for n in self.fs.list(f"{self.checkpoint}/commits") if n.isdigit()]
        if not batches:
            return None, 0
        last = max(batches)
        if last != self._last_batch:
            raw = self.fs.read(f"{self.checkpoint}/offsets/{last}")
            if raw is None:
                return self._last_batch, self._last_committed
            offsets = json.loads(raw.decode().strip().splitlines()[-1])
            self._last_committed = sum(int(v) for v in offsets.get(self.topic, {}).values())
            self._last_batch = last
        return self._last_batch, self._last_committed

    def sample(self) -> dict:
        end = self.end_offsets()
        batch, committed = self.committed()
        return {"t": time.time(), "end": end, "committed": committed, "batch": batch, "lag": max(0, end - committed)}

    def close(self) -> None:
        self.consumer.close()
        self.fs.close()


def _progress_file(settings: Settings) -> dict:
    try:
        return read_local_progress(settings, JOB)
    except RuntimeError as exc:
        log.warning("speed-layer progress: %s", exc)
        return {}


def speed_progress(settings: Settings) -> dict | None:
    return _progress_file(settings).get("queries", {}).get(QUERY)


def speed_dedupe(settings: Settings) -> dict:
    """The running speed layer's de-duplication, as its progress file names it: the checkpoint's operator
    (which can differ from the setting's) and the window. None where the file does not say."""
    top = _progress_file(settings)
    return {"operator": top.get("dedupe_operator"), "window_s": top.get("dedupe_window_s")}
