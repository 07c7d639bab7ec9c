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


def progress_from_end_offsets(settings: Settings, end_offsets: dict[int, int]) -> dict[int, PartitionProgress]:
    """Archived up to (excluding) `end_offsets` → per-partition completeness."""
    from stores.kafka import last_stamps

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
