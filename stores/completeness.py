"""How far, in ingest time, the master dataset is complete.

After each committed micro-batch the archiver knows, per Kafka partition, the next offset it has
not archived. Kafka stamps records with LogAppendTime, so timestamps never decrease within a
partition: if the last archived record of partition p was stamped t, every record of p stamped
before t is in the master dataset. The marker records that t per partition; the master dataset is
complete for ingest times below the minimum over all partitions. Tick records (ingest.ticker)
keep idle partitions advancing.

Markers are small JSON files on HDFS, one per batch, written under a temporary name and renamed
into place (atomic); readers take the newest.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field

from definitions.settings import Settings
from stores.webhdfs import WebHdfs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionProgress:
    next_offset: int
    complete_before_ms: int


@dataclass(frozen=True)
class Completeness:
    batch_id: int
    written_ms: int
    partitions: dict[int, PartitionProgress] = field(default_factory=dict)
    expected_partitions: int = 0

    @property
    def complete_before_ms(self) -> int | None:
        """Every record stamped before this (epoch ms) is archived; None until every partition has progress."""
        if not self.partitions or len(self.partitions) < self.expected_partitions:
            return None
        return min(p.complete_before_ms for p in self.partitions.values())

    def to_json(self) -> str:
        doc = asdict(self)
        doc["partitions"] = {str(k): asdict(v) for k, v in self.partitions.items()}
        doc["complete_before_ms"] = self.complete_before_ms
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Completeness:
        doc = json.loads(text)
        parts = {int(k): PartitionProgress(**v) for k, v in doc["partitions"].items()}
        return cls(doc["batch_id"], doc["written_ms"], parts, doc.get("expected_partitions", 0))


def last_stamps(settings: Settings, end_offsets: dict[int, int], timeout_s: float = 30.0) -> dict[int, int]:
    """Per partition of topic `events`, the ingest timestamp (ms) of the last record below its end
    offset.

    That is the record at `end - 1`, unless a transactional producer's commit or abort marker holds
    that offset: no consumer is given a marker, so the last record before it is taken. Timestamps
    never decrease within a partition (LogAppendTime), so its stamp bounds what comes after as
    safely. The read is uncommitted: a record of an aborted transaction is no event (no job reads
    it, stores.kafka_source), but its stamp is an ingest time like any other."""
    from kafka import TopicPartition

    from stores.kafka import consumer as kafka_consumer

    ends = {p: end for p, end in end_offsets.items() if end > 0}
    if not ends:
        return {}
    topic = settings.kafka.events_topic
    parts = {p: TopicPartition(topic, p) for p in ends}
    client = kafka_consumer(settings, "lambda-completeness", isolation_level="read_uncommitted", max_poll_records=500)
    try:
        client.assign(list(parts.values()))
        begins = client.beginning_offsets(list(parts.values()))
        found: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + timeout_s
        lookback = 1
        pending = set(ends)
        while pending:
            starts = {p: max(begins[parts[p]], ends[p] - lookback) for p in pending}
            for p in pending:
                client.seek(parts[p], starts[p])
            client.resume(*[parts[p] for p in pending])
            reading = set(pending)
            while reading:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"could not read partitions {sorted(reading)} of {topic} up to {[ends[p] for p in sorted(reading)]}"
                    )
                for tp, messages in client.poll(timeout_ms=1000).items():
                    for msg in messages:
                        if msg.offset < ends[tp.partition] and msg.offset >= found.get(tp.partition, (-1, 0))[0]:
                            found[tp.partition] = (msg.offset, msg.timestamp)
                for p in list(reading):
                    if (p in found and found[p][0] == ends[p] - 1) or client.position(parts[p]) >= ends[p]:
                        client.pause(parts[p])
                        reading.discard(p)
            exhausted = {p for p in pending if p not in found and starts[p] <= begins[parts[p]]}
            if exhausted:
                raise RuntimeError(f"partitions {sorted(exhausted)} of {topic} keep no record below their end offsets")
            pending = {p for p in pending if p not in found}
            lookback *= 32
        return {p: stamp for p, (_, stamp) in found.items()}
    finally:
        client.close()


def progress_from_end_offsets(settings: Settings, end_offsets: dict[int, int]) -> dict[int, PartitionProgress]:
    """Archived up to (excluding) `end_offsets` → per-partition completeness."""
    stamps = last_stamps(settings, end_offsets)
    return {p: PartitionProgress(end_offsets[p], stamps[p]) for p in stamps}


def publish(settings: Settings, marker: Completeness) -> None:
    root = settings.archiver.completeness_path
    name = f"{marker.batch_id:012d}.json"
    with WebHdfs(settings) as fs:
        fs.mkdirs(root)
        tmp = f"{root}/_tmp-{name}"
        fs.write(tmp, marker.to_json().encode())
        fs.delete(f"{root}/{name}")  # a replayed batch may have published this one already
        if not fs.rename(tmp, f"{root}/{name}"):
            raise RuntimeError(f"could not move completeness marker into {root}/{name}")
        markers = [n for n in fs.list(root) if not n.startswith("_")]
        for old in markers[: -settings.archiver.keep_markers]:
            fs.delete(f"{root}/{old}")


def latest(settings: Settings) -> Completeness | None:
    """The newest completeness marker, or None if the archiver has published none."""
    root = settings.archiver.completeness_path
    with WebHdfs(settings) as fs:
        for name in reversed([n for n in fs.list(root) if not n.startswith("_")]):
            data = fs.read(f"{root}/{name}")
            if data is not None:
                return Completeness.from_json(data)
    return None
