"""Accepted losses are counted once: retention deleting more of a gap before the job got past it is
accepted again and recorded again naming the whole gap, and the answers' flag counted the first
offsets twice. The archiver's records count its master query's gaps (its dead-letter query's add no
lost event)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stores.kafka_gaps import Gap, _uncovered, newly_lost


def gap(partition: int, first_lost: int, first_kept: int, checkpoint: str = "/c/master") -> Gap:
    return Gap(checkpoint, partition, first_lost, first_kept)


def hdfs_of(files: dict[str, bytes], written: dict[str, int], reads: list[str]):
    """A WebHdfs stand-in over `files` (path → bytes; `written`: path → modification time), each read's
    file name appended to `reads`."""

    class Hdfs:
        def __init__(self, settings) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def versions(self, folder: str) -> list[tuple[str, int, int]]:
            return sorted(
                (p.rsplit("/", 1)[1], written[p], len(data)) for p, data in files.items() if p.startswith(folder + "/")
            )

        def read(self, path: str) -> bytes:
            reads.append(path.rsplit("/", 1)[1])
            return files[path]

    return Hdfs


def test_a_gap_accepted_again_after_more_was_deleted_counts_only_what_is_new():
    first = [gap(0, 4, 7), gap(0, 4, 7, "/c/dlq")]  # both queries of the archiver: the same 3
    second = [gap(0, 4, 9), gap(0, 4, 9, "/c/dlq"), gap(1, 0, 5)]
    assert newly_lost([(2_000, second), (1_000, first)], "/c/master") == ((1_000, 3), (2_000, 2 + 5))


def test_the_archivers_dead_letter_query_behind_its_master_query_adds_no_lost_records():
    """Records the dead-letter query lost that the master query had read were archived (or were
    invalid, never part of a view): the union of both queries' gaps counted 100 where 50 were lost."""
    both = [gap(0, 150, 200), gap(0, 100, 200, "/c/dlq")]
    assert newly_lost([(1_000, both)], "/c/master") == ((1_000, 50),)
    # Nothing the views count was lost: no answer is flagged ("0 records lost", complete: false).
    assert newly_lost([(1_000, [gap(0, 100, 200, "/c/dlq")])], "/c/master") == ()
    assert newly_lost([(1_000, [gap(0, 4, 7)]), (2_000, [gap(0, 4, 7)])]) == ((1_000, 3),), "named before"
    assert newly_lost([(1_000, both)]) == ((1_000, 100),), "without a query named: every gap counts"


def test_losses_of_other_partitions_and_disjoint_gaps_all_count():
    assert newly_lost([(1, [gap(0, 0, 10), gap(0, 20, 25), gap(2, 0, 10)])]) == ((1, 25),)
    assert newly_lost([]) == ()


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)), max_size=6),
    st.integers(0, 60),
    st.integers(0, 30),
)
def test_uncovered_offsets_are_those_of_no_span(spans, start, length):
    spans = [(lo, lo + n) for lo, n in spans]
    end = start + length
    expected = sum(1 for o in range(start, end) if not any(lo <= o < hi for lo, hi in spans))
    assert _uncovered(spans, start, end) == expected


def test_loss_records_read_before_are_not_read_again_and_deleted_ones_are_forgotten(monkeypatch):
    """The API reads the loss records at every marker read: with what it read before, only the
    listing and the records new or rewritten since; a record caught half-written is read again."""
    import json

    from definitions.settings import Settings
    from stores import kafka_gaps

    files: dict[str, bytes] = {}
    written: dict[str, int] = {}  # path → its modification time
    reads: list[str] = []

    Hdfs = hdfs_of(files, written, reads)

    def record(name: str, recorded_ms: int, lost: int) -> None:
        doc = {
            "recorded_ms": recorded_ms,
            "gaps": [{"checkpoint": checkpoint, "partition": 0, "first_lost": 0, "first_kept": lost}],
        }
        files[f"{folder}/{name}"] = json.dumps(doc).encode()
        written[f"{folder}/{name}"] = recorded_ms

    monkeypatch.setattr(kafka_gaps, "WebHdfs", Hdfs)
    settings = Settings()
    checkpoint = kafka_gaps.checkpoint_dirs(settings, "speed-layer")[0]  # the query whose gaps the record names
    folder = f"{checkpoint}-losses"
    known: dict = {}
    record("1.json", 1_000, 3)
    files[f"{folder}/2.json"] = b'{"recorded_'  # caught while being written (by an earlier release)
    written[f"{folder}/2.json"] = 1_500
    files[f"{folder}/3.json.tmp"] = b'{"recorded_ms": 3000, "gaps": ['  # written beside, not moved yet
    written[f"{folder}/3.json.tmp"] = 3_000
    assert kafka_gaps.recorded_losses(settings, "speed-layer", known) == ((1_000, 3),)
    assert reads == ["1.json", "2.json"], "a record being written beside its name is not read"
    del files[f"{folder}/3.json.tmp"]
    record("2.json", 2_000, 5)
    reads.clear()
    assert kafka_gaps.recorded_losses(settings, "speed-layer", known) == ((1_000, 3), (2_000, 2))
    assert reads == ["2.json"], "the record read before was read again"
    del files[f"{folder}/1.json"]
    reads.clear()
    assert kafka_gaps.recorded_losses(settings, "speed-layer", known) == ((2_000, 5),)
    assert reads == [] and [path for path, _, _ in known] == [f"{folder}/2.json"]
    record("2.json", 2_500, 6)  # a start rewrote it while the acceptance stands
    assert kafka_gaps.recorded_losses(settings, "speed-layer", known) == ((2_500, 6),)
    assert reads == ["2.json"] and len(known) == 1


def test_a_mistyped_loss_record_is_passed_over_and_the_others_still_flag_answers(monkeypatch):
    """A record of the right shape with a number too large (`1e400`, read as infinity) or an offset
    as text made every record unreadable: the API kept no loss at all, and answers missing records
    Kafka deleted were served as complete."""
    import json

    import pytest

    from definitions.settings import Settings
    from stores import kafka_gaps

    settings = Settings()
    checkpoint = kafka_gaps.checkpoint_dirs(settings, "speed-layer")[0]
    folder = f"{checkpoint}-losses"
    good = {
        "recorded_ms": 1_000,
        "gaps": [{"checkpoint": checkpoint, "partition": 0, "first_lost": 0, "first_kept": 3}],
    }
    bad_gap = {"checkpoint": checkpoint, "partition": 0, "first_lost": 5, "first_kept": 9}
    mistyped = {
        "a.json": b'{"recorded_ms": 1e400, "gaps": []}',
        "b.json": json.dumps({"recorded_ms": 2_000, "gaps": [{**bad_gap, "first_lost": "5"}]}).encode(),
        "c.json": json.dumps({"recorded_ms": 2_000, "gaps": [{**bad_gap, "partition": True}]}).encode(),
        "d.json": json.dumps({"recorded_ms": 2_000, "gaps": [{**bad_gap, "first_kept": 2}]}).encode(),
        "e.json": json.dumps({"recorded_ms": 2_000, "gaps": [{**bad_gap, "extra": 1}]}).encode(),
        "f.json": json.dumps({"recorded_ms": 2_000, "gaps": {"0": bad_gap}}).encode(),
        "g.json": json.dumps({"recorded_ms": 2.5, "gaps": [bad_gap]}).encode(),
        "h.json": json.dumps({"recorded_ms": 2_000, "gaps": [{**bad_gap, "first_kept": 2**70}]}).encode(),
    }
    files = {f"{folder}/{name}": data for name, data in mistyped.items()} | {
        f"{folder}/z.json": json.dumps(good).encode()
    }

    Hdfs = hdfs_of(files, dict.fromkeys(files, 1), [])

    monkeypatch.setattr(kafka_gaps, "WebHdfs", Hdfs)
    assert kafka_gaps.recorded_losses(settings, "speed-layer", {}) == ((1_000, 3),)
    for data in mistyped.values():
        with pytest.raises(ValueError):
            kafka_gaps.read_record(data)
