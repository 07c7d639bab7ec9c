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
import re
from dataclasses import asdict, dataclass, field

from definitions.settings import Settings
from stores.webhdfs import WebHdfs

log = logging.getLogger(__name__)

MARKER_NAME = re.compile(r"\d{12}\.json")  # the archiver's own markers; anything else there is not one
TMP_NAME = re.compile(r"_tmp-(\d{12})\.json")  # one being written (publish)
MAX_INT = 2**53  # epoch ms, offsets and batch ids all fit well below this
PARTITION_KEY = re.compile(r"0|[1-9][0-9]{0,8}")


class MarkerMalformed(ValueError):
    """A completeness marker's file holds no marker (the message says what is wrong)."""


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INT:
        raise MarkerMalformed(f"{what}: {str(value)[:40]!r} is not a count")
    return value


def _no_constant(name: str) -> float:
    raise MarkerMalformed(f"{name} is not a number")


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
        """The marker `text` holds; MarkerMalformed naming what is wrong when it holds none."""
        try:
            doc = json.loads(text, parse_constant=_no_constant)
            if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), dict):
                raise MarkerMalformed("not an object with partitions")
            # The topic's partition count, which every marker the archiver writes carries (Kafka's
            # answer as it published: a broker not yet told of partitions added may say fewer than the
            # batch read): without it, or 0, one partition's progress was taken for the whole topic's.
            expected = _count(doc.get("expected_partitions"), "expected_partitions")
            if doc["partitions"] and expected == 0:
                raise MarkerMalformed("expected_partitions: 0 beside partitions' progress")
            parts = {}
            for key, value in doc["partitions"].items():
                if not isinstance(value, dict):
                    raise MarkerMalformed(f"partition {key[:20]!r}: not an object")
                # As the archiver writes it: int() also reads "7_7" (77), " 1", "+1" and other digits.
                if not PARTITION_KEY.fullmatch(key):
                    raise MarkerMalformed(f"partition {key[:20]!r}: not a partition number")
                parts[int(key)] = PartitionProgress(
                    _count(value.get("next_offset"), f"partition {key}: next_offset"),
                    _count(value.get("complete_before_ms"), f"partition {key}: complete_before_ms"),
                )
            return cls(
                _count(doc.get("batch_id"), "batch_id"), _count(doc.get("written_ms"), "written_ms"), parts, expected
            )
        except MarkerMalformed:
            raise
        except (ValueError, TypeError, RecursionError) as exc:  # not JSON, not UTF-8, a key not a number
            raise MarkerMalformed(f"{type(exc).__name__}: {str(exc)[:200]}") from None


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
        listed = fs.list(root)
        markers = [n for n in listed if MARKER_NAME.fullmatch(n)]
        for old in markers[: -settings.archiver.keep_markers]:
            fs.delete(f"{root}/{old}")
        # A publisher killed between its write and its move left its temporary file: one of an
        # earlier batch is nobody's any more (batches publish in order, one at a time).
        for left in listed:
            found = TMP_NAME.fullmatch(left)
            if found and int(found[1]) < marker.batch_id:
                fs.delete(f"{root}/{left}")


def drop_beyond(settings: Settings, planned: int | None) -> list[str]:
    """Delete the markers of batches after `planned`, the last batch the archiver's checkpoint has
    planned (None: none): they describe the master dataset of an earlier checkpoint (a rebuilt
    master, a changed checkpoint_dir), and the newest of them would say complete up to a time the
    archive being rebuilt has not reached. The marker names deleted."""
    root = settings.archiver.completeness_path
    with WebHdfs(settings) as fs:
        listed = fs.list(root)
        stale = [n for n in listed if MARKER_NAME.fullmatch(n) and (planned is None or int(n[:12]) > planned)]
        for name in stale:
            fs.delete(f"{root}/{name}")
        for name in listed:  # a killed publisher's file of such a batch: no later publish deletes it
            found = TMP_NAME.fullmatch(name)
            if found and (planned is None or int(found[1]) > planned):
                fs.delete(f"{root}/{name}")
    if stale:
        log.warning("deleted %d completeness marker(s) of an earlier checkpoint: %s", len(stale), ", ".join(stale[:5]))
    return stale


def latest(settings: Settings) -> Completeness | None:
    """The newest completeness marker, or None if the archiver has published none. A file there that
    is no marker of the archiver's is passed over (logged): an older marker says less, never more."""
    root = settings.archiver.completeness_path
    with WebHdfs(settings) as fs:
        for name in reversed([n for n in fs.list(root) if MARKER_NAME.fullmatch(n)]):
            data = fs.read(f"{root}/{name}")
            if data is None:
                continue
            try:
                marker = Completeness.from_json(data)
                # Named after its batch, as publish names it: one named otherwise (by hand) hid every
                # newer marker, and pruning (by name) never removed it.
                if name != f"{marker.batch_id:012d}.json":
                    raise MarkerMalformed(f"it holds batch {marker.batch_id}")
                return marker
            except MarkerMalformed as exc:
                log.warning("completeness marker %s/%s is not one (%s): passed over", root, name, exc)
    return None


# How far past this host's clock the newest marker may say the master is complete (the broker stamps
# records by its own clock).
MAX_AHEAD_MS = 300_000


def doubt(marker: Completeness, last_archived: int | None, now_ms: int, root: str) -> str | None:
    """Why the newest marker (under `root`) must not be trusted, or None: it is of a batch the master
    dataset does not hold (`last_archived`: its file sink's last batch), so it describes another
    archive (a master restored or rebuilt while the archiver was down: the archiver drops such
    markers when it starts); or it says complete far past now (a clock far off, or a file written
    by hand). Trusted, a run would take a cutoff the master has not reached."""
    from definitions.times import iso_ms

    name = f"{root}/{marker.batch_id:012d}.json"
    if last_archived is None or marker.batch_id > last_archived:
        held = "no batch" if last_archived is None else f"batches up to {last_archived}"
        return (
            f"completeness marker {name} is of archiver batch {marker.batch_id}, but the master dataset holds "
            f"{held}: a marker of another archive (restored or rebuilt while the archiver was down); start the "
            "archiver, which drops such markers, or delete it"
        )
    covered = marker.complete_before_ms
    if covered is not None and covered > now_ms + MAX_AHEAD_MS:
        return (
            f"completeness marker {name} says the master is complete up to {iso_ms(covered)}, more than "
            f"{MAX_AHEAD_MS // 1000}s after this host's clock ({iso_ms(now_ms)}): a clock far off, or a marker not "
            "the archiver's; set the clock right, or delete it"
        )
    return None
