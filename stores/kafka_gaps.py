"""Records Kafka deleted before a streaming job read them, and the operator's acceptance of that loss.

A streaming job (the archiver, the speed layer) resumes from its checkpoint: per partition of
`events`, the next offset after its last committed micro-batch. When Kafka's retention
(`kafka.retention_hours`) deleted records past that offset while the job was down or behind, those
records are gone: the job can neither archive nor count them. Its Kafka source fails on such a gap
(failOnDataLoss), so the job would fail at every restart, and nothing said which records were lost.

Each job asks `resume_check` before it starts Spark:
- no gap: it runs as always, and fails on any later loss;
- a gap not accepted: `DataLost`, naming each partition's lost offsets and the command that accepts
  them (`lambdactl accept-loss JOB`); the job exits;
- a gap the operator accepted (`accept` wrote the gaps it saw beside the checkpoint, and nothing
  more is missing since): the loss is recorded for good (`<checkpoint>-losses/<accepted ms>.json`,
  once however often the job starts) and the job runs from the first offsets Kafka keeps (its
  source no longer fails on a loss, until its next start). The acceptance stays until a start finds
  nothing missing: a start that fails before it commits past the gap needs no new acceptance.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from definitions import jobs
from definitions.settings import Settings
from stores.progress import source_offsets
from stores.webhdfs import WebHdfs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Gap:
    """Offsets [first_lost, first_kept) of a partition, deleted before the job read them."""

    checkpoint: str
    partition: int
    first_lost: int
    first_kept: int

    def describe(self) -> str:
        return f"partition {self.partition}: offsets {self.first_lost} to {self.first_kept - 1} ({self.checkpoint})"


class DataLost(RuntimeError):
    """Kafka deleted records a job had not read, and no operator accepted the loss."""


def checkpoint_dirs(settings: Settings, job: str) -> list[str]:
    """The checkpoints (HDFS paths) of `job`'s queries that read `events`."""
    if job == jobs.ARCHIVER:
        root = settings.archiver.checkpoint_dir.rstrip("/")
        return [f"{root}/master", f"{root}/dlq"]
    if job == jobs.SPEED_LAYER:
        return [settings.speed.checkpoint_dir.rstrip("/")]
    raise ValueError(f"no streaming job {job!r}: {jobs.ARCHIVER} or {jobs.SPEED_LAYER}")


def committed_position(fs: WebHdfs, checkpoint: str, topic: str) -> dict[int, int] | None:
    """Per partition of `topic`, the next offset after the last committed micro-batch of the query
    checkpointed at `checkpoint`; None before its first commit."""
    return committed_positions(fs, checkpoint).get(topic)


def committed_positions(fs: WebHdfs, checkpoint: str) -> dict[str, dict[int, int]]:
    """Per topic the last committed micro-batch of the query checkpointed at `checkpoint` read, its
    next offset per partition; empty before its first commit, or when its offsets are unreadable."""
    commits = [int(name) for name in fs.list(f"{checkpoint}/commits") if name.isdigit()]
    if not commits:
        return {}
    raw = fs.read(f"{checkpoint}/offsets/{max(commits)}")
    if raw is None:
        return {}
    found: dict[str, dict[int, int]] = {}
    for line in raw.decode(errors="replace").splitlines()[2:]:  # "v1", the batch metadata, then one line per source
        try:
            offsets = source_offsets(line)
        except ValueError:
            continue
        found = {**offsets, **found}  # the first source naming a topic, as before
    return found


def gaps(settings: Settings, job: str) -> list[Gap]:
    """What Kafka deleted past where `job`'s queries resume, per checkpoint and partition."""
    from stores.kafka import first_offsets

    topic = settings.kafka.events_topic
    with WebHdfs(settings) as fs:
        positions = {c: committed_position(fs, c, topic) for c in checkpoint_dirs(settings, job)}
    if not any(positions.values()):
        if job != jobs.ARCHIVER:
            return []
        kept = first_offsets(settings)
        # A new archive (the master rebuilt from Kafka) beside views a batch computed from the old one:
        # what Kafka deleted is in neither, and the next batch run would replace those views. With no
        # view served yet, nothing was archived: what Kafka deleted before is no loss of the platform's.
        # (The pointer, in HBase, is read only when Kafka deleted something.)
        if not any(kept.values()) or not _views_served(settings):
            return []
        return missing({c: {} for c in positions}, kept)
    return missing(positions, first_offsets(settings))


def _views_served(settings: Settings) -> bool:
    """Whether a batch run computed views the platform serves (the pointer names one)."""
    from stores.registry import version_store

    return version_store(settings).pointer() is not None


def missing(positions: dict[str, dict[int, int] | None], kept: dict[int, int]) -> list[Gap]:
    """The gaps between where each checkpoint resumes (`positions`, per partition) and the first
    offsets Kafka keeps (`kept`). A partition added since a checkpoint's last commit is read from its
    offset 0 (Spark's Kafka source fails when it starts later: records were deleted unread)."""
    return [
        Gap(checkpoint, p, position.get(p, 0), first)
        for checkpoint, position in positions.items()
        if position is not None
        for p, first in sorted(kept.items())
        if position.get(p, 0) < first
    ]


def _acceptance_path(settings: Settings, job: str) -> str:
    return f"{checkpoint_dirs(settings, job)[0]}-accepted-loss.json"


def _encode(found: Iterable[Gap], **extra) -> bytes:
    return json.dumps({**extra, "gaps": [asdict(g) for g in found]}, sort_keys=True).encode()


def _decode(data: bytes) -> list[Gap]:
    return _gaps(json.loads(data))


def _gaps(doc: dict[str, Any]) -> list[Gap]:
    """The gaps a record or an acceptance names (ValueError when it holds anything else: a number of
    another type or beyond Kafka's offsets, a gap that ends before it starts)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gaps"), list):
        raise ValueError("no list of gaps")
    out = []
    for g in doc["gaps"]:
        if not isinstance(g, dict) or set(g) != _GAP_KEYS or not isinstance(g["checkpoint"], str):
            raise ValueError(f"not a gap: {g!r:.100}")
        gap = Gap(g["checkpoint"], *(_offset(g[k], k) for k in ("partition", "first_lost", "first_kept")))
        if gap.first_lost > gap.first_kept:
            raise ValueError(f"a gap that ends before it starts: {g!r:.100}")
        out.append(gap)
    return out


_GAP_KEYS = {"checkpoint", "partition", "first_lost", "first_kept"}


def _offset(value: Any, name: str) -> int:
    """A whole number within Kafka's offsets (and times in ms): not a bool, a float or a text."""
    if type(value) is not int or not 0 <= value < 2**63:
        raise ValueError(f"{name} is not a whole number of Kafka's range: {value!r:.40}")
    return value


def read_record(data: bytes) -> tuple[int, list[Gap]]:
    """(recorded ms, gaps) of a loss record's bytes; ValueError when they are no such record."""
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return _offset(doc.get("recorded_ms"), "recorded_ms"), _gaps(doc)


def accept(settings: Settings, job: str, found: list[Gap]) -> None:
    """Record that the operator accepts losing `found`: `job`'s next start runs past them."""
    with WebHdfs(settings) as fs:
        # Whole or not at all: HDFS shows a file being written as empty, and a kill would leave it so.
        fs.write_whole(_acceptance_path(settings, job), _encode(found, accepted_ms=int(time.time() * 1000)))


def covered(accepted: list[Gap], found: list[Gap]) -> bool:
    """Each gap found is one accepted, or a part of one: the same checkpoint, partition and first
    lost offset, no more records lost (retention deleting more since asks for a new acceptance)."""
    by_start = {(g.checkpoint, g.partition, g.first_lost): g.first_kept for g in accepted}
    return all(by_start.get((g.checkpoint, g.partition, g.first_lost), -1) >= g.first_kept for g in found)


def resume_check(settings: Settings, job: str) -> list[Gap]:
    """Before `job` starts: the accepted gaps it may run past (their loss now recorded), or [] when
    nothing is missing. DataLost when records are missing that no operator accepted."""
    found = gaps(settings, job)
    path = _acceptance_path(settings, job)
    with WebHdfs(settings) as fs:
        raw = fs.read(path)
        if not found:
            if raw is not None:
                fs.delete(path)  # the job got past the gap (or nothing was lost): used up
            return []
        try:
            accepted, accepted_ms = (
                (_decode(raw), _offset(json.loads(raw)["accepted_ms"], "accepted_ms")) if raw is not None else ([], 0)
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise DataLost(
                f"the acceptance of lost records {path} cannot be read ({type(exc).__name__}: {str(exc)[:200]}): "
                f"`lambdactl accept-loss {job}` writes it again"
            ) from None
        if raw is None or not covered(accepted, found):
            raise DataLost(
                f"Kafka's retention deleted records {job} had not read ("
                + "; ".join(g.describe() for g in found)
                + f"): they cannot be {'archived' if job == jobs.ARCHIVER else 'counted'}. "
                f"`lambdactl accept-loss {job}` accepts the loss; the next start then runs from the "
                "first offsets Kafka keeps"
            )
        fs.write_whole(
            f"{checkpoint_dirs(settings, job)[0]}-losses/{accepted_ms}.json",
            _encode(found, job=job, accepted_ms=accepted_ms, recorded_ms=int(time.time() * 1000)),
        )
    return found


LOSSES_READ = 100  # the newest loss records read (each an operator's acceptance: a handful in years)


def recorded_losses(
    settings: Settings, job: str, known: dict[tuple[str, int, int], tuple[int, list[Gap]]] | None = None
) -> tuple[tuple[int, int], ...]:
    """((when an accepted loss of `job` was recorded, ms; the records it lost that no earlier loss
    record names), ...), oldest first; () when no loss is on record. Every record a loss lost was
    ingested before its time. Retention deleting more of a gap before the job got past it is
    accepted again, and recorded again naming the whole gap: its records are counted once, with the
    first record that names them. One listing and one read per record (the newest LOSSES_READ:
    names are the times they were accepted). Raises WebHdfsError when HDFS cannot be read; a record
    that cannot be read is passed over, named in the log.

    `known`: records read before, by (path, modification time, length), kept up to date here: a
    caller that reads often (the API, at every marker read) then reads only the listing and the
    records new or rewritten since (a start rewrites its record while the acceptance stands)."""
    folder = f"{checkpoint_dirs(settings, job)[0]}-losses"
    read: list[tuple[int, list[Gap]]] = []
    known = {} if known is None else known
    with WebHdfs(settings) as fs:
        records = [v for v in fs.versions(folder) if v[0].endswith(".json")]  # not a record being written
        listed = [(f"{folder}/{name}", modified, size) for name, modified, size in records[-LOSSES_READ:]]
        for version in listed:
            if version not in known:
                try:
                    known[version] = read_record(fs.read(version[0]) or b"{}")
                except (ValueError, RecursionError) as exc:
                    log.warning("the loss record %s cannot be read: %s: %s", version[0], type(exc).__name__, exc)
                    continue  # read again next time: it may have been caught half-written
            read.append(known[version])
    for version in set(known) - set(listed):
        if version[0].startswith(f"{folder}/"):
            del known[version]  # rewritten, deleted, or past the newest LOSSES_READ
    return newly_lost(read, checkpoint_dirs(settings, job)[0])


def newly_lost(records: Iterable[tuple[int, list[Gap]]], checkpoint: str | None = None) -> tuple[tuple[int, int], ...]:
    """((recorded ms, offsets its gaps name that no earlier record's do), ...), oldest first, records
    that name none left out (they flag no answer: what they name was lost before an earlier one); per
    partition, the gaps of the query at `checkpoint` (None: of every query). The archiver's records
    are counted by its master query's gaps: its dead-letter query, usually a trigger behind, lost
    offsets the master query had read, whose records were archived or were no event."""
    named: dict[int, list[tuple[int, int]]] = {}
    out = []
    for recorded_ms, gaps in sorted(records, key=lambda r: r[0]):
        new = 0
        for gap in gaps:
            if checkpoint is not None and gap.checkpoint != checkpoint:
                continue
            spans = named.setdefault(gap.partition, [])
            new += _uncovered(spans, gap.first_lost, gap.first_kept)
            spans.append((gap.first_lost, gap.first_kept))
        if new:  # a record naming only what earlier ones did (or what only the dead-letter query lost)
            out.append((recorded_ms, new))
    return tuple(out)


def _uncovered(spans: list[tuple[int, int]], start: int, end: int) -> int:
    """Offsets of [start, end) in none of `spans`."""
    count, at = 0, start
    for lo, hi in sorted(spans):
        if hi <= at:
            continue
        if lo >= end:
            break
        count += max(0, lo - at)
        at = max(at, hi)
        if at >= end:
            break
    return count + max(0, end - at)


def accepted_past(settings: Settings, job: str) -> list[Gap]:
    """The accepted gaps `job` runs past this start ([]: none; its Kafka source then fails on any
    loss). Exits (SystemExit, the message in the job's log) on a loss not accepted."""
    try:
        past = resume_check(settings, job)
    except DataLost as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    for gap in past:
        log.warning("running past records Kafka deleted, as accepted: %s", gap.describe())
    return past


def passed(positions: dict[str, dict[int, int] | None], past: list[Gap]) -> bool:
    """Whether every checkpoint has committed past the gaps it ran past (`positions`: where each
    resumes, per partition)."""
    return all((positions.get(g.checkpoint) or {}).get(g.partition, 0) >= g.first_kept for g in past)


def strict_once_past(
    settings: Settings,
    job: str,
    past: list[Gap],
    queries: Sequence[Any],
    start: Callable[[bool], Sequence[Any]],
    stopping: threading.Event,
    check_s: float = 5.0,
) -> Sequence[Any]:
    """Queries started past accepted gaps (`past`; their source skips whatever Kafka deleted) run so
    only until each has committed past them; then they are stopped and started again by
    `start(fail_on_data_loss)`, failing on any later loss. A loss met while catching up (retention
    deleting more) was skipped unseen, and the archiver's completeness moved past it. Returns the
    queries running (to watch); exits, as at a start, on a loss found since that is not accepted."""
    topic = settings.kafka.events_topic
    while past and not stopping.is_set() and all(q.isActive for q in queries):
        try:
            with WebHdfs(settings) as fs:
                positions = {c: committed_position(fs, c, topic) for c in {g.checkpoint for g in past}}
        except Exception as exc:  # HDFS blinking: asked again at the next look
            log.warning("cannot read where %s's queries are (%s: %s)", job, type(exc).__name__, exc)
            positions = {}
        if positions and passed(positions, past):
            log.info("%s is past the records Kafka deleted: its queries start again, failing on any later loss", job)
            for query in queries:
                query.stop()
            past = accepted_past(settings, job)
            queries = start(not past)
            continue
        stopping.wait(check_s)
    return queries
