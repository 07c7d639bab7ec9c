"""The rules `lambdactl replay` decides by, without a store: where it starts, when Kafka no longer
holds what it must read, and the state a replayed view is in."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from lambdactl.replay_rules import Refused, resolve_from
from stores.kafka import PartitionSpan, lost_since
from stores.pointer import Pointer, ViewEntry
from stores.view_lifecycle import lifecycle, lifecycles

BUCKET_S = 60
NOW_MS = 1_795_000_000_000


def test_from_defaults_to_the_views_batch_cutoff_on_the_bucket_grid():
    assert resolve_from(None, 1_794_999_960_000, BUCKET_S, NOW_MS) == 1_794_999_960_000
    assert resolve_from("", 0, BUCKET_S, NOW_MS) == 0  # no batch yet: from the beginning


def test_from_a_time_is_floored_to_a_whole_ingest_bucket():
    assert resolve_from("2026-11-17T09:00:30.5Z", 0, BUCKET_S, NOW_MS) == 1_794_906_000_000
    assert resolve_from("2026-11-17T10:00:59+01:00", 0, BUCKET_S, NOW_MS) == 1_794_906_000_000


def test_a_from_before_the_views_cutoff_is_raised_to_it():
    """No answer reads a view's realtime rows below its batch cutoff: rebuilding them was work for
    nothing, and a replay was refused when Kafka's retention had deleted only records below it."""
    said = []
    cutoff = 1_794_999_960_000
    assert resolve_from("2026-11-17T09:00:30Z", cutoff, BUCKET_S, NOW_MS, on_raised=said.append) == cutoff
    assert said and "raised to the view's batch cutoff" in said[0]
    times = {(0, 10): 1_794_906_070_000}
    assert resolve_from("offsets:0=10", cutoff, BUCKET_S, NOW_MS, lambda p, o: times[(p, o)]) == cutoff
    assert resolve_from("2026-11-18T11:05:30Z", cutoff - 120_000, BUCKET_S, NOW_MS) == 1_794_999_900_000


def test_a_mark_dated_ahead_of_this_hosts_clock_orders_the_replay_but_does_not_move_its_split():
    """A replay is named after every mark it read (the newest overlay answers), and its split came
    from that name: a mark made on a host whose clock ran a day ahead made a `--resume` sleep that
    day before its split (for centuries ahead, an OverflowError)."""
    from lambdactl.replay_rules import replay_start
    from stores.replays import ReplayMark, shadow_name

    day = 86_400_000
    ahead = ReplayMark("page_views", 0, NOW_MS + day, shadow_name("page_views", NOW_MS + day))
    assert replay_start(NOW_MS, [ahead]) == (NOW_MS + day + 1, NOW_MS)
    behind = ReplayMark("page_views", 0, NOW_MS - day, shadow_name("page_views", NOW_MS - day))
    assert replay_start(NOW_MS, [behind]) == (NOW_MS, NOW_MS)
    assert replay_start(NOW_MS, []) == (NOW_MS, NOW_MS)


def test_the_wait_for_a_split_sleeps_no_longer_than_its_timeout(monkeypatch):
    """The brokers' clock ahead puts the split ahead of this host's: it slept the whole skew before
    asking Kafka, where records after the split were there already."""
    from lambdactl import replay

    slept: list[float] = []
    monkeypatch.setattr(replay.time, "sleep", slept.append)
    monkeypatch.setattr("stores.kafka.spans_between", lambda *_a: [])
    hour_ahead = int(replay.time.time() * 1000) + 3_600_000
    assert replay._wait_for_split(None, "page_views", 0, hour_ahead, timeout_s=180) == []
    assert slept and max(slept) <= 180


def test_from_offsets_starts_at_the_earliest_of_their_ingest_times():
    times = {(0, 10): 1_794_906_070_000, (1, 5): 1_794_906_010_000}
    got = resolve_from("offsets:0=10,1=5", 0, BUCKET_S, NOW_MS, lambda p, o: times[(p, o)])
    assert got == 1_794_906_000_000


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("yesterday", "not an ISO time"),
        ("2026-11-17T09:00:00", "give the time zone"),
        ("2999-01-01T00:00:00Z", "in the future"),
        ("offsets:0=x", "PARTITION=OFFSET"),
        ("offsets:", "PARTITION=OFFSET"),
        ("offsets:0=\u00b2", "PARTITION=OFFSET"),  # a digit to str.isdigit, not to int()
        ("offsets:\u0661=5", "PARTITION=OFFSET"),
        ("offsets:0=" + "9" * 5000, "PARTITION=OFFSET"),  # int() refuses over 4300 digits: a bare ValueError
        ("offsets:" + "9" * 20 + "=1", "PARTITION=OFFSET"),
        ("1969-12-31T23:59:59Z", "before 1970"),  # was taken as 0: the whole topic replayed
        ("0001-01-01T00:00:00+00:01", "before 1970"),
        # each pair asked Kafka with a consumer of its own: 100,000 copies of one ran for hours
        ("offsets:" + ",".join(["0=5"] * 100_000), "partition 0 is named twice"),
        ("offsets:0=5,1=3,0=7", "partition 0 is named twice"),
    ],
)
def test_a_bad_from_is_refused_naming_what_is_wrong(text, words):
    with pytest.raises(Refused, match=words):
        resolve_from(text, 0, BUCKET_S, NOW_MS, lambda p, o: 0)


def test_a_from_time_is_read_to_the_millisecond_in_whole_numbers():
    """Through a float, 1970-01-13T04:31:39.096Z came out 1 ms early."""
    from lambdactl.replay_rules import parse_from

    assert parse_from("1970-01-13T04:31:39.096Z") == ((12 * 24 + 4) * 3600 + 31 * 60 + 39) * 1000 + 96
    assert parse_from(" 2026-11-17T10:00:00.5+01:00 ") == parse_from("2026-11-17T09:00:00.500Z")


def span(first_kept: int, first_kept_ms: int | None, partition: int = 0) -> PartitionSpan:
    return PartitionSpan(
        partition, start=first_kept, end=first_kept + 10, first_kept=first_kept, first_kept_ms=first_kept_ms
    )


def test_kafka_must_keep_every_record_from_the_start_of_the_replay():
    from_ms = 1_000
    assert lost_since([span(0, 5_000)], from_ms) == []  # nothing deleted
    assert lost_since([span(7, 999)], from_ms) == []  # deleted records are older than the first kept
    # A deleted record may be as late as the first kept one: at or after from_ms, it is lost.
    assert lost_since([span(7, 1_000)], from_ms) and lost_since([span(7, 9_000)], from_ms)
    assert lost_since([span(7, None)], from_ms)  # everything deleted: unknown, so refused
    lost = lost_since([span(0, 5), span(3, 2_000, partition=4)], from_ms)
    assert len(lost) == 1 and lost[0].startswith("partition 4 deleted offsets below 3")


def test_a_view_being_replayed_is_replaying_while_the_others_serve():
    pointer = Pointer({"a": ViewEntry("a_v1", 1, 60_000), "b": ViewEntry("b_v1", 1, 60_000)}, version=1)
    states = {s.name: s for s in lifecycles(["a", "b"], {"a": 0, "b": 0}, pointer, replaying={"a": 60_000})}
    assert states["a"].state == "replaying" and "lambdactl replay" in states["a"].reason
    assert states["b"].state == "serving"
    # A view still building stays building: there is nothing exact to come back to yet.
    assert lifecycle("a", {"a": 120_000}, pointer, replaying={"a": 60_000}).state == "building"


def test_offsets_kafka_does_not_keep_are_refused_not_a_crash():
    def ingest_time_at(partition: int, offset: int) -> int:
        raise ValueError(f"partition {partition} keeps offsets 0 to 9, not {offset}")

    with pytest.raises(Refused, match="--from offsets: partition 0 keeps offsets 0 to 9, not 99"):
        resolve_from("offsets:0=99", 0, BUCKET_S, NOW_MS, ingest_time_at)


def test_a_replays_rows_go_below_their_views_cutoff_and_its_overlay_once_the_cutoff_reaches_the_split():
    from stores.replay_cleanup import overlay_cutoffs
    from stores.replays import ReplayMark, shadow_name

    ahead = ReplayMark("page_views", 60_000, 1, shadow_name("page_views", 1), 600_000)
    reached = ReplayMark("top_pages", 60_000, 2, shadow_name("top_pages", 2), 300_000)
    unserved = ReplayMark("unique_visitors", 0, 3, shadow_name("unique_visitors", 3), 300_000)
    overlays = {o.view: o for o in (ahead, reached, unserved)}
    shadows, finished = overlay_cutoffs(overlays, {"page_views": 300, "top_pages": 300})
    assert shadows == {ahead.shadow: 300, reached.shadow: 300}, "no cutoff for unique_visitors: all its rows stay"
    assert finished == [reached], "page_views' split (600 s) is past its cutoff: still read"


def test_a_replay_mark_reads_back_as_written_and_an_old_claim_reads_as_unswitched():
    from stores.replays import ReplayMark

    switched = ReplayMark("page_views", 60_000, 7, "page_views~replay-7", 120_000)
    assert ReplayMark.from_json("page_views", switched.to_json()) == switched and switched.switched
    old = ReplayMark.from_json("page_views", b'{"from_ms": 5, "started_ms": 6}')
    assert old == ReplayMark("page_views", 5, 6) and not old.switched


class Fs:
    """The directory listing and reads of replay marks; a value of None: listed (100 bytes), then
    deleted before its read; DIR: a directory."""

    DIR = object()

    def __init__(self, files: dict) -> None:
        self.files = files
        self.read_names: list[str] = []

    def entries(self, directory: str) -> list[tuple[str, str, int]]:
        return [
            (
                name,
                "DIRECTORY" if data is Fs.DIR else "FILE",
                100 if data is None else 0 if data is Fs.DIR else len(data),
            )
            for name, data in self.files.items()
        ]

    def read(self, path: str, max_bytes: int | None = None) -> bytes | None:
        name = path.rsplit("/", 1)[1]
        self.read_names.append(name)
        data = self.files[name]
        assert data is not Fs.DIR
        return data if max_bytes is None or data is None else data[: max_bytes + 1]


class WritableFs(Fs):
    """Fs that writes and deletes too (WebHdfs as a context manager); a file not there reads as None."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def read(self, path: str, max_bytes: int | None = None) -> bytes | None:
        return super().read(path, max_bytes) if path.rsplit("/", 1)[1] in self.files else None

    def mkdirs(self, path: str) -> None:
        return None

    def write(self, path, data, overwrite=True):
        self.files[path.rsplit("/", 1)[1]] = data

    def delete(self, path, recursive=False):
        return self.files.pop(path.rsplit("/", 1)[1], None) is not None

    def rename(self, source, destination):  # HDFS's: refused when the destination exists
        if destination.rsplit("/", 1)[1] in self.files:
            return False
        self.replace(source, destination)
        return True

    def replace(self, source, destination):
        self.files[destination.rsplit("/", 1)[1]] = self.files.pop(source.rsplit("/", 1)[1])

    def write_whole(self, path, data):  # WebHdfs's: beside it, then moved over it
        self.write(f"{path}.tmp", data)
        self.replace(f"{path}.tmp", path)


def test_replay_marks_read_while_a_switch_deletes_one_are_listed_again_and_the_newest_overlay_counts():
    from stores.replays import ReplayMark, _read_listed

    older = ReplayMark("page_views", 0, 1, "page_views~replay-1", 60_000)
    newer = ReplayMark("page_views", 0, 2, "page_views~replay-2", 120_000)
    claim = ReplayMark("top_pages", 0, 3, "top_pages~replay-3")

    files = {
        "page_views.switched-1.json": older.to_json(),
        "page_views.switched-2.json": newer.to_json(),
        "top_pages.json": claim.to_json(),
        "unique_visitors.json": b"",  # being created
    }
    claims, overlays = _read_listed(Fs(files), "d")
    assert (claims["top_pages"], overlays) == (claim, {"page_views": newer})
    # Claims are written whole: an empty one was left by a crash, and refuses its view until --resume.
    assert claims["unique_visitors"].unreadable == "unique_visitors.json: empty: a claim whose write was interrupted"
    empty: set[str] = set()
    _read_listed(Fs(files), "d", empty)
    assert empty == {"unique_visitors"}, "an empty claim file is named (the orphan clean-up keeps its view's rows)"
    files["page_views.switched-2.json"] = None  # listed, then deleted before its read: a switch meanwhile
    assert _read_listed(Fs(files), "d") is None, "read again rather than miss an overlay"


class _ReaderWithoutSkip:  # a plug-in realtime reader written before replays: no skip_ingest
    def series(self, view, granularity, key, buckets, min_ingest_bucket, with_sketches=False): ...

    def bucket(self, view, granularity, buckets, min_ingest_bucket): ...

    def close(self): ...


class _ReaderTakingKeywords:
    def series(self, view, granularity, key, buckets, min_ingest_bucket, **options): ...

    def bucket(self, view, granularity, buckets, min_ingest_bucket, skip_ingest=None): ...


def test_a_replay_is_refused_up_front_when_the_realtime_reader_cannot_leave_replayed_buckets_out():
    from lambdactl.replay_rules import reader_refusal
    from stores.realtime import RealtimeReader

    assert reader_refusal(RealtimeReader, "cassandra") is None
    assert reader_refusal(_ReaderTakingKeywords, "x.Reader") is None
    refusal = reader_refusal(_ReaderWithoutSkip, "plugin.Reader")
    assert refusal is not None
    assert "stores.realtime_reader = 'plugin.Reader'" in refusal and "series, bucket" in refusal
    assert "skip_ingest" in refusal and "--force" in refusal


def test_lambdactl_replay_with_such_a_reader_exits_2_before_any_store_is_asked(settings, caplog):
    from definitions.store_settings import StoresSettings
    from lambdactl.cli import build_parser
    from lambdactl.replay import cmd_replay

    path = f"{__name__}._ReaderWithoutSkip"
    chosen = settings.model_copy(update={"stores": StoresSettings.model_construct(realtime_reader=path)})
    args = build_parser().parse_args(["replay", "--view", "page_views"])
    with caplog.at_level("INFO"):
        assert cmd_replay(chosen, args) == 2  # a store asked would fail: none runs in unit tests
    assert "replay refused, nothing changed: stores.realtime_reader" in caplog.text


def test_the_split_follows_whichever_clock_is_ahead_so_later_buckets_hold_only_records_appended_after_the_start():
    from lambdactl.replay_rules import split_after

    bucket = BUCKET_S * 1000
    start = NOW_MS - NOW_MS % bucket + 10_000  # 10 s into a bucket by this host's clock
    assert split_after(start, None, bucket) == start - 10_000 + bucket  # an empty topic: the host's clock
    assert split_after(start, start - 5_000, bucket) == start - 10_000 + bucket  # the brokers behind
    # The brokers 70 s ahead (80 s into the bucket by their clock): records stamped in the next bucket
    # were appended before the start, so the split is the boundary after that one.
    assert split_after(start, start + 70_000, bucket) == start - 10_000 + 2 * bucket
    assert split_after(start, start - 10_000 + bucket, bucket) == start - 10_000 + 2 * bucket  # on a boundary


@pytest.mark.parametrize(
    "data",
    [
        b'{"from_ms": 253402300800000, "started_ms": 1, "shadow": ""}',  # after the year 9999
        b'{"from_ms": -1, "started_ms": 1}',
        b'{"from_ms": 1e20, "started_ms": 1}',
        b'{"from_ms": true, "started_ms": 1}',
        b'{"from_ms": "5", "started_ms": 1}',
        b'{"from_ms": 5, "started_ms": 6, "shadow": "top_pages~replay-6"}',  # another view's rows
        b'{"from_ms": 5, "started_ms": 6, "shadow": "page_views~replay-6", "split_ms": 4}',  # split before from
        b'{"from_ms": 5}',
        b"[1]",
        b"1e400",
        b"Infinity",
        b"[" * 1500 + b"]" * 1500,
        b"\xff\xfe",
        b"null",
    ],
)
def test_a_mark_that_is_not_one_is_a_value_error_whatever_its_bytes(data):
    from stores.replays import ReplayMark

    with pytest.raises(ValueError):
        ReplayMark.from_json("page_views", data)


def test_a_mark_file_that_cannot_be_read_makes_its_view_refuse_until_resume_and_the_others_read_on():
    from stores.replays import MAX_MARK_BYTES, ReplayMark, _read_listed

    good = ReplayMark("page_views", 0, 2, "page_views~replay-2", 120_000)
    claim = ReplayMark("top_pages", 0, 3, "top_pages~replay-3")
    files = {
        "page_views.switched-2.json": good.to_json(),
        "top_pages.json": claim.to_json(),
        "unique_visitors.json": b'{"from_ms": 253402300800000, "started_ms": 1}',
        "clicks.switched-9.json": b"[1]",
        "huge.json": b" " * (MAX_MARK_BYTES + 1),
        "folder.json": Fs.DIR,
        "being_created.json": b"",  # claims are written whole: left by a crash
        "notes.txt": b"x",
        "x.switched-abc.json": b"{}",
        "a b.json": b"{}",
        ".hidden.json": b"{}",
    }
    fs = Fs(files)
    claims, overlays = _read_listed(fs, "d")
    assert overlays == {"page_views": good}
    assert claims["top_pages"] == claim
    assert set(claims) == {"top_pages", "unique_visitors", "clicks", "huge", "folder", "being_created"}
    for view in ("unique_visitors", "clicks", "huge", "folder", "being_created"):
        bad = claims[view]
        assert bad.unreadable and not bad.shadow and bad.from_ms == 0, bad  # a --resume replays from the cutoff
    assert "huge.json" not in fs.read_names and "folder.json" not in fs.read_names, "never read: too big, or no file"
    assert not {"notes.txt", "x.switched-abc.json", "a b.json", ".hidden.json"} & set(fs.read_names)


def test_resume_refuses_while_the_replay_holding_the_claim_still_runs_on_this_host():
    import os
    import socket
    import subprocess
    import sys

    import psutil

    from lambdactl.replay_rules import running_holder
    from stores.replays import ReplayMark
    from tests.support.polling import wait_for

    here = socket.gethostname()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "lambdactl", "replay"])
    try:
        # Until the child has exec'd, its command line is this process's (a busy machine: a moment).
        wait_for(
            lambda: "replay" in psutil.Process(holder.pid).cmdline(),
            "the child to run its command",
            30,
            interval_s=0.01,
        )
        started_ms = int(time.time() * 1000)  # a claim is made after its process started
        live = ReplayMark("page_views", 0, started_ms, f"page_views~replay-{started_ms}", host=here, pid=holder.pid)
        assert running_holder(live) == holder.pid
        assert ReplayMark.from_json("page_views", live.to_json()) == live, "the holder is written with the claim"
        # The process id of a holder that ended, taken by a replay (of another view, say) started after
        # the claim was made: not its holder, so `--resume` and `--cancel` go on.
        reused = replace(live, started_ms=started_ms - 60_000, shadow=f"page_views~replay-{started_ms - 60_000}")
        assert running_holder(reused) is None
    finally:
        holder.kill()
        holder.wait(10)
    assert running_holder(live) is None, "its process ended: the claim is interrupted, --resume takes it"
    assert running_holder(ReplayMark("page_views", 0, 1, host="elsewhere", pid=os.getpid())) is None  # unknowable
    assert running_holder(ReplayMark("page_views", 0, 1, host=here, pid=os.getpid())) is None  # not a replay
    assert running_holder(ReplayMark("page_views", 0, 1)) is None  # an earlier release's claim


def test_a_claim_names_its_holder_by_its_start_since_boot_whatever_the_wall_clock_did():
    """A claim's holder was told by its wall-clock start: a clock stepped ahead after the claim made
    a running replay look started after it, so `--resume` took its claim over."""
    import socket
    import subprocess
    import sys

    from definitions.files import boot_id, start_ticks
    from lambdactl.replay_rules import running_holder
    from stores.replays import ReplayMark

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = start_ticks(holder.pid)
        assert ticks is not None
        # Made an hour "before" the process started, as a clock stepped an hour ahead since shows it.
        hour_ago = int(time.time() * 1000) - 3_600_000
        claim = ReplayMark(
            "page_views",
            0,
            hour_ago,
            f"page_views~replay-{hour_ago}",
            host=socket.gethostname(),
            pid=holder.pid,
            pid_start_ticks=ticks,
            boot_id=boot_id() or "",
        )
        assert running_holder(claim) == holder.pid
        assert ReplayMark.from_json("page_views", claim.to_json()) == claim, "written with the claim"
        assert running_holder(replace(claim, pid_start_ticks=ticks - 1)) is None, "its process id reused"
        assert running_holder(replace(claim, boot_id="another-boot")) is None, "made before a reboot"
    finally:
        holder.kill()
        holder.wait(10)
    assert running_holder(claim) is None, "its process ended"


@pytest.mark.parametrize(
    "data",
    [
        b'{"from_ms": 5, "started_ms": 6, "pid": "x"}',
        b'{"from_ms": 5, "started_ms": 6, "host": 7}',
        b'{"from_ms": 5, "started_ms": 6, "pid_start_ticks": 9, "boot_id": false}',
        b'{"from_ms": 5, "started_ms": 6, "pid_start_ticks": 9, "boot_id": 0}',
        b'{"from_ms": 5, "started_ms": 6, "pid_start_ticks": true, "boot_id": "b"}',
        b'{"from_ms": 5, "started_ms": 6, "pid_start_ticks": -1, "boot_id": "b"}',
        b'{"from_ms": 5, "started_ms": 6, "pid_start_ticks": 9.5, "boot_id": "b"}',
    ],
)
def test_a_claims_holder_of_the_wrong_type_is_no_mark(data):
    from stores.replays import ReplayMark

    with pytest.raises(ValueError):
        ReplayMark.from_json("page_views", data)


def test_a_switch_deletes_older_overlays_and_files_that_are_none_keeps_a_newer_replay_and_needs_its_claim_or_a_resume_of_it(
    settings, monkeypatch
):
    from stores import replays, webhdfs

    claim = replays.ReplayMark("page_views", 0, 50, "page_views~replay-50")
    newer = replays.ReplayMark("page_views", 0, 90, "page_views~replay-90", 120_000)
    taken_over = replays.ReplayMark("page_views", 0, 70, "page_views~replay-70")  # a --resume elsewhere
    files = {
        "page_views.switched-10.json": replays.ReplayMark("page_views", 0, 10, "page_views~replay-10", 60).to_json(),
        "page_views.switched-90.json": newer.to_json(),
        "page_views.switched-99.json": b"[1]",
        "page_views.json": taken_over.to_json(),
        "top_pages.switched-5.json": replays.ReplayMark("top_pages", 0, 5, "top_pages~replay-5", 60).to_json(),
    }

    fs = WritableFs(files)
    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: fs)
    before = dict(files)
    with pytest.raises(replays.ReplayMarked, match="no longer this replay's"):
        replays.switch(settings, claim, 60_000)  # another replay claimed the view (not taking this one over)
    assert files == before
    resumed = replays.ReplayMark("page_views", 0, 70, "page_views~replay-70", replaces=(50, 20))
    files["page_views.json"] = resumed.to_json()  # a --resume took this claim over: this one may switch
    replays.switch(settings, claim, 60_000)
    assert set(files) == {
        "page_views.switched-50.json",
        "page_views.switched-90.json",
        "page_views.json",
        "top_pages.switched-5.json",
    }, "the resume's claim stays"
    assert replays.ReplayMark.from_json("page_views", files["page_views.json"]) == resumed
    files["page_views.json"] = claim.to_json()
    replays.switch(settings, claim, 60_000)
    assert "page_views.json" not in files, "its own claim goes once switched"


def test_a_broken_overlay_file_keeps_the_views_readable_claim_and_its_holder():
    from stores.replays import ReplayMark, _read_listed

    claim = ReplayMark("page_views", 5_000, 7, "page_views~replay-7", host="h", pid=42)
    for files in (
        {"page_views.json": claim.to_json(), "page_views.switched-9.json": b"[1]"},
        {"page_views.switched-1.json": b"[1]", "page_views.json": claim.to_json()},
    ):
        held = _read_listed(Fs(files), "d")[0]["page_views"]
        assert held.unreadable and (held.shadow, held.host, held.pid) == (claim.shadow, "h", 42), held
        assert held.from_ms == 0, "a --resume replays from the cutoff: the broken file's range is unknown"


def test_a_view_named_beyond_ascii_has_its_marks_read():
    from stores.replays import ReplayMark, _read_listed

    claim = ReplayMark("ventes_été", 0, 3, "ventes_été~replay-3")
    assert _read_listed(Fs({"ventes_été.json": claim.to_json()}), "d")[0] == {"ventes_été": claim}


def test_a_cancelled_claim_is_released_only_while_it_is_still_its_views_claim_and_its_replay_cannot_switch(
    settings, monkeypatch
):
    from stores import replays, webhdfs

    claim = replays.ReplayMark("page_views", 0, 50, "page_views~replay-50")
    taken_over = replays.ReplayMark("page_views", 0, 70, "page_views~replay-70")  # a --resume elsewhere
    files = {"page_views.json": taken_over.to_json()}
    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: WritableFs(files))
    assert not replays.release(settings, claim), "a claim taken over since is not the one to release"
    assert files == {"page_views.json": taken_over.to_json()}
    files["page_views.json"] = claim.to_json()
    assert replays.release(settings, claim)
    assert files == {}
    with pytest.raises(replays.ReplayMarked, match="cancelled"):
        replays.switch(settings, claim, 60_000)  # the replay that held it, still running elsewhere
    assert files == {}, "no overlay: its rows are about to be deleted"
    files["page_views.json"] = later = replays.ReplayMark("page_views", 0, 80, "page_views~replay-80").to_json()
    with pytest.raises(replays.ReplayMarked):
        replays.switch(settings, claim, 60_000)  # nor once a new replay claimed the view after the cancel
    assert files == {"page_views.json": later}


def test_a_cancel_that_lands_between_the_switchs_check_and_its_overlay_withdraws_the_overlay(settings, monkeypatch):
    """The replay switches on another host: it read its claim, then (a slow HDFS, a pause) `--cancel`
    released the claim, waited, found no overlay and deleted the rows, and the overlay appeared after:
    answers read the view's speed part from deleted rows, still said complete."""
    from stores import replays, webhdfs

    claim = replays.ReplayMark("page_views", 0, 50, "page_views~replay-50")
    files = {"page_views.json": claim.to_json()}

    class CancelledMeanwhile(WritableFs):
        def write(self, path, data, overwrite=True):
            self.files.pop("page_views.json", None)  # the cancel's release, just before the overlay lands
            super().write(path, data, overwrite)

    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: CancelledMeanwhile(files))
    with pytest.raises(replays.ReplayMarked, match="cancelled"):
        replays.switch(settings, claim, 60_000)
    assert files == {}, "the overlay it wrote is taken back: no answer reads the rows being deleted"


@pytest.mark.parametrize(
    ("claim", "words"),
    [
        (None, "no replay holds"),
        ("page_views~replay-1", None),
        ("", "in place"),
        ("unreadable", "only `--resume`"),
    ],
)
def test_cancel_refuses_what_it_cannot_undo_and_names_the_rows_it_deletes(settings, monkeypatch, claim, words):
    from lambdactl import replay_cancel as replay
    from stores import replays

    held = {} if claim is None else {"page_views": replays.ReplayMark("page_views", 0, 1, claim)}
    if claim == "unreadable":
        held = {"page_views": replays.ReplayMark("page_views", 0, 1, "page_views~replay-1", unreadable="x: [1]")}
    released: list[replays.ReplayMark] = []
    _marks_in_memory(monkeypatch, held, {}, released)
    deleted = _deletions(monkeypatch)
    if words is not None:
        with pytest.raises(replay.Refused, match=words):
            replay.cancel(settings, "page_views")
        assert not released and not deleted
    else:
        assert replay.cancel(settings, "page_views") == {
            "view": "page_views",
            "shadow": claim,
            "rows_deleted": 7,
            "switched": False,
        }
        assert released == [replays.ReplayMark("page_views", 0, 1, claim)] and deleted == [claim]


def _marks_in_memory(
    monkeypatch, claims: dict, overlays: dict, released: list | None = None, being_written: set | None = None
) -> None:
    """The replay marks (claims, overlays) as `claims` and `overlays` hold them, and the views whose
    claim file is being written (`being_written`); a release takes the claim off."""
    from stores import replays

    def release(_settings, mark):
        if released is not None:
            released.append(mark)
        return claims.pop(mark.view, None) is not None

    monkeypatch.setattr(replays, "read_replays", lambda _settings: (dict(claims), dict(overlays)))
    monkeypatch.setattr(
        replays,
        "read_replays_and_empty_claims",
        lambda _settings: (dict(claims), dict(overlays), set(being_written or ())),
    )
    monkeypatch.setattr(replays, "release", release)
    monkeypatch.setattr("lambdactl.views.refresh_api", lambda _settings: None)
    monkeypatch.setattr(
        "stores.view_versions.read_versions", lambda _settings: SimpleNamespace(storages=lambda names: list(names))
    )
    monkeypatch.setattr("lambdactl.replay_cancel._settle", lambda _seconds: None)


def _deletions(monkeypatch, cleanup=None) -> list[str]:
    """The storage names whose rows the realtime clean-up is asked to delete (7 rows each, or `cleanup`)."""
    from stores import realtime_cleanup

    deleted: list[str] = []
    done = cleanup or realtime_cleanup.Cleanup(0, rows_below_cutoff=7)
    monkeypatch.setattr(realtime_cleanup, "delete_absorbed", lambda _settings, cutoffs: deleted.extend(cutoffs) or done)
    return deleted


def test_cancel_names_what_it_left_a_switch_it_lost_to_and_finds_a_claim_under_the_name_given(settings, monkeypatch):
    from lambdactl import replay_cancel as replay
    from stores import realtime_cleanup, replays

    held = replays.ReplayMark("page_views__ab12", 0, 1, "page_views__ab12~replay-1")
    claims = {"page_views__ab12": held}
    overlays: dict = {}
    _marks_in_memory(monkeypatch, claims, overlays)

    def stores_down(_settings):
        raise ConnectionError("HBase is down")

    monkeypatch.setattr("stores.view_versions.read_versions", stores_down)
    from stores.realtime_scan import Unreadable

    partial = realtime_cleanup.Cleanup(0, rows_below_cutoff=3, unreadable=[Unreadable("t", 0, 1, "timeout")])
    _deletions(monkeypatch, partial)
    # The storage name as given needs no store to resolve it; a deletion that could not read every
    # token range says how far it got.
    with pytest.raises(replay.CancelIncomplete, match="3 of its rows") as incomplete:
        replay.cancel(settings, "page_views__ab12")
    assert incomplete.value.summary["complete"] is False and incomplete.value.summary["rows_deleted"] == 3
    with pytest.raises(replay.Refused, match="no replay holds page_views's mark"):
        replay.cancel(settings, "page_views")  # its storage names cannot be read: only the name given
    claims["page_views__ab12"] = held
    monkeypatch.setattr(  # it switched as the cancel began
        "lambdactl.replay_cancel._settle",
        lambda _seconds: overlays.update(page_views__ab12=replace(held, split_ms=60_000)),
    )
    assert replay.cancel(settings, "page_views__ab12")["switched"] is True


@pytest.mark.parametrize("replaces", ['"1"', "[1.5]", "[-1]", '["x"]', "{}"])
def test_a_claims_replaces_of_the_wrong_type_is_no_mark(replaces):
    from stores.replays import ReplayMark

    with pytest.raises(ValueError, match="replaces"):
        ReplayMark.from_json("page_views", f'{{"from_ms": 5, "started_ms": 6, "replaces": {replaces}}}'.encode())


def test_a_resume_of_a_claim_that_left_the_rows_short_keeps_its_view_refused_until_it_switches(settings, monkeypatch):
    """A claim of an earlier release's replay (no shadow: it deleted the view's rows, then rewrote
    them in place) or one that is no mark refuses the view (409) until `--resume` ends. The resume's
    own claim has a shadow: the view answered (short) as complete from the moment it began, and
    `--cancel` then dropped the claim altogether."""
    from serving_layer.speed_state import SpeedState
    from stores import replays, webhdfs

    in_place = replays.ReplayMark("page_views", 0, 40)
    broken = replays.ReplayMark("top_pages", 0, 0, unreadable="not JSON (JSONDecodeError)")
    healthy = replays.ReplayMark("unique_visitors", 0, 30, "unique_visitors~replay-30")
    assert in_place.rows_short and broken.rows_short and not healthy.rows_short
    files: dict = {"page_views.json": in_place.to_json(), "unique_visitors.json": healthy.to_json()}
    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: WritableFs(files))
    for held, started in ((in_place, 50), (broken, 60), (healthy, 70)):
        resumed = replays.mark(
            settings,
            held.view,
            0,
            started,
            take_over=True,
            shadow=replays.shadow_name(held.view, started),
            short=held.rows_short,
        )
        assert replays.ReplayMark.from_json(held.view, files[f"{held.view}.json"]) == resumed
    claims, _ = replays.read_replays(settings)
    assert claims["page_views"].short and claims["top_pages"].short and not claims["unique_visitors"].short

    state = SpeedState(settings)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: (claims, {}))
    state._read_replays(0.0, state._epoch)
    assert state.in_place == {"page_views", "top_pages"}, "refused until the resume switches"
    switched = replace(claims["page_views"], split_ms=120_000)
    assert not switched.rows_short, "once switched, its shadow rows answer for the buckets it replayed"


def test_cancel_refuses_a_claim_that_left_the_rows_short(settings, monkeypatch):
    from lambdactl import replay_cancel
    from stores import replays

    short = replays.ReplayMark("page_views", 0, 50, "page_views~replay-50", short=True)
    monkeypatch.setattr(replays, "read_replays", lambda _settings: ({"page_views": short}, {}))
    with pytest.raises(Refused, match="own rows are short.*--resume"):
        replay_cancel.cancel(settings, "page_views")


def test_the_split_moves_on_while_records_appended_before_the_replay_are_ingested_after_it():
    """The split came from this host's clock when the brokers' latest ingest time could not be read
    (a slow broker): with the brokers' clock ahead, records appended before the replay began were
    stamped after the split, and left to the view's own (lost, or wrong) rows."""
    from lambdactl.replay_rules import settled_split

    appended = {0: 100, 1: 40}  # end offsets when the replay began
    ends_at = {60_000: {0: 80, 1: 40}, 120_000: {0: 100, 1: 45}}  # first offset ingested at/after the split
    asked = []

    def wait(split_ms):
        asked.append(split_ms)
        return [replace(span(0, 0, p), end=e) for p, e in ends_at[split_ms].items()]

    spans, split = settled_split(wait, 60_000, appended, 60_000)
    assert split == 120_000 and asked == [60_000, 120_000]
    assert {s.partition: s.end for s in spans} == {0: 100, 1: 45}
    spans, split = settled_split(wait, 120_000, appended, 60_000)
    assert split == 120_000, "every record appended before it is below the split: it stays"


def test_an_interrupted_replay_says_what_it_left_and_how_to_go_on(monkeypatch, caplog):
    """Ctrl-C after the claim ended the command in silence, the view claimed."""
    import argparse
    import logging

    from lambdactl import replay

    monkeypatch.setattr(replay, "_plan", lambda settings, args: (type("V", (), {"name": "page_views"})(), 0, []))

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(replay, "_run", interrupted)
    monkeypatch.setattr(replay, "_left", lambda settings, view: f"{view} stays claimed: --resume or --cancel")
    args = argparse.Namespace(view="page_views", from_=None, resume=False, cancel=False, json=False)
    with caplog.at_level(logging.INFO):
        assert replay.cmd_replay(None, args) == 130
    assert "replay of page_views interrupted; page_views stays claimed: --resume or --cancel" in caplog.text


def test_a_store_failing_while_the_replay_is_planned_is_said_not_thrown(monkeypatch, caplog):
    """Kafka down while the replay looked up `--from`'s offsets: a traceback, where every later
    failure is said in one line."""
    import argparse
    import logging

    from lambdactl import replay

    def no_brokers(settings, args):
        raise ConnectionError("NoBrokersAvailable")

    monkeypatch.setattr(replay, "_plan", no_brokers)
    monkeypatch.setattr(replay, "_left", lambda settings, view: f"{view} is not claimed")
    args = argparse.Namespace(view="page_views", from_="2026-11-17T09:00:00Z", resume=False, cancel=False, json=False)
    with caplog.at_level(logging.INFO):
        assert replay.cmd_replay(None, args) == 1
    assert (
        "replay of page_views failed before it read Kafka: ConnectionError: NoBrokersAvailable; page_views is not claimed"
        in caplog.text
    )


def test_a_from_with_spaces_around_it_is_read():
    assert resolve_from(" 2026-11-17T09:00:30Z\n", 0, BUCKET_S, NOW_MS) == 1_794_906_000_000


def test_a_mistyped_from_is_refused_before_any_store_is_asked(settings, caplog):
    """It was read after HDFS and HBase were: with the stack down, a typo showed as a connection error."""
    from lambdactl.cli import build_parser
    from lambdactl.replay import cmd_replay

    away = settings.model_copy(
        update={"hdfs": settings.hdfs.model_copy(update={"http_port": 9, "webhdfs_urls": ["http://127.0.0.1:9"]})}
    )
    args = build_parser().parse_args(["replay", "--view", "page_views", "--from", "yesterday"])
    with caplog.at_level("INFO"):
        assert cmd_replay(away, args) == 2
    assert "replay refused, nothing changed: --from: not an ISO time" in caplog.text


def test_a_claim_is_written_whole_and_the_first_to_move_its_file_holds_the_view(settings, monkeypatch):
    """HDFS shows a file being written as empty, so a claim written in place and killed half-way
    stayed empty: no replay command could take it over. It is written beside, then moved."""
    from stores import replays, webhdfs

    files: dict = {}

    class Killed(WritableFs):
        def rename(self, source, destination):
            raise KeyboardInterrupt  # killed between the write and the move

    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: Killed(files))
    with pytest.raises(KeyboardInterrupt):
        replays.mark(settings, "page_views", 0, 10, shadow=replays.shadow_name("page_views", 10))
    assert "page_views.json" not in files and len(files) == 1, files
    assert replays._read_listed(WritableFs(files), "d") == ({}, {}), "a file being written is no claim"

    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: WritableFs(files))
    first = replays.mark(settings, "page_views", 0, 20, shadow=replays.shadow_name("page_views", 20))
    with pytest.raises(replays.ReplayMarked, match="holds its mark"):
        replays.mark(settings, "page_views", 0, 30, shadow=replays.shadow_name("page_views", 30))
    assert replays.ReplayMark.from_json("page_views", files["page_views.json"]) == first
    assert sorted(files) == ["page_views.json", f"page_views.json.tmp-10-{os.getpid()}"], "the loser leaves nothing"

    files["top_pages.json"] = b""  # an earlier release's claim, killed as it was written
    with pytest.raises(replays.ReplayMarked):
        replays.mark(settings, "top_pages", 0, 40, shadow=replays.shadow_name("top_pages", 40))
    claims, _ = replays._read_listed(WritableFs(files), "d")
    assert claims["top_pages"].unreadable, "refused (409) until --resume: the view may be short"
    resumed = replays.mark(settings, "top_pages", 0, 50, take_over=True, shadow=replays.shadow_name("top_pages", 50))
    assert replays.ReplayMark.from_json("top_pages", files["top_pages.json"]) == resumed
    from definitions.files import boot_id, start_ticks

    assert (resumed.pid, resumed.pid_start_ticks, resumed.boot_id) == (os.getpid(), start_ticks(os.getpid()), boot_id())


def test_resume_of_a_retired_view_keeps_the_claim_of_a_replay_still_running_here(settings, monkeypatch):
    """`--resume` on a retired name took the claim off without the check every other `--resume`
    makes: a replay still running lost its claim, and was refused at its switch."""
    import argparse
    import socket
    import subprocess
    import sys

    from definitions.files import boot_id, start_ticks
    from definitions.view_versions import Versions
    from definitions.views import Registry
    from lambdactl import replay
    from stores import checkpoints, registry, replay_cleanup, replays, view_versions
    from stores.pointer import Pointer

    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "replay"])
    try:
        now_ms = int(time.time() * 1000)
        claim = replays.ReplayMark(
            "old_view",
            0,
            now_ms,
            replays.shadow_name("old_view", now_ms),
            host=socket.gethostname(),
            pid=holder.pid,
            pid_start_ticks=start_ticks(holder.pid),  # as replays.mark writes it
            boot_id=boot_id() or "",
        )
        pointer = Pointer(version=1, retiring=("old_view",))
        unmarked: list[str] = []
        monkeypatch.setattr(registry, "adapter_class", lambda _s, _k: object)
        monkeypatch.setattr(replay, "reader_refusal", lambda _cls, _name: None)
        monkeypatch.setattr(checkpoints, "read_marker", lambda _s: None)
        monkeypatch.setattr(registry, "version_store", lambda _s: type("V", (), {"pointer": lambda self: pointer})())
        monkeypatch.setattr(view_versions, "read_versions", lambda *_a, **_k: Versions(maintained=Registry()))
        monkeypatch.setattr(replays, "read_replays", lambda _s: ({"old_view": claim}, {}))
        monkeypatch.setattr(replay_cleanup, "forget_claim", lambda _s, held: unmarked.append(held.view))
        args = argparse.Namespace(view="old_view", resume=True, from_=None)
        with pytest.raises(Refused, match=f"still runs \\(pid {holder.pid} on this host\\)"):
            replay._plan(settings, args)
        assert unmarked == []
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(replay.MarkCleared, match="old_view is retired"):
        replay._plan(settings, args)
    assert unmarked == ["old_view"]


def _cancel_beside(settings, monkeypatch, during_wait, being_written: set | None = None):
    """`--cancel` of page_views's replay (started 50), with marks in memory; `during_wait(claims,
    overlays)` is what happens elsewhere while it waits. (its result, the storage names it deleted)."""
    from lambdactl import replay_cancel as replay
    from stores import replays

    claims = {"page_views": replays.ReplayMark("page_views", 0, 50, "page_views~replay-50")}
    overlays: dict = {}
    _marks_in_memory(monkeypatch, claims, overlays, being_written=being_written)
    monkeypatch.setattr(replay, "_settle", lambda _seconds: during_wait(claims, overlays))
    deleted = _deletions(monkeypatch)
    return replay.cancel(settings, "page_views"), deleted


def test_a_cancel_keeps_the_rows_a_resume_took_over_while_it_waited(settings, monkeypatch):
    """`--cancel` and `--resume` at once: the cancel released the claim, the resume claimed the view
    taking the cancelled replay over (which lets that replay, still running on another host, switch
    to its rows), and the cancel deleted the rows after its wait: answers then read deleted rows."""
    from stores import replays

    def resume(claims, _overlays):
        claims["page_views"] = replays.ReplayMark("page_views", 0, 90, "page_views~replay-90", replaces=(50,))

    result, deleted = _cancel_beside(settings, monkeypatch, resume)
    assert deleted == [], "the rows a claim names again are kept"
    assert result["rows_deleted"] == 0 and result["switched"] is False and result["kept"] == "taken_over"


def test_a_cancel_says_why_it_kept_rows_a_mark_named_only_for_a_moment(settings, monkeypatch):
    """A claim file of the view was being written when the cancel looked again (a replay claiming the
    view, which may yet switch under it), and is gone by the time it says why: the rows are left for
    the clean-up, and the cancel did cancel."""
    being_written: set = set()
    result, deleted = _cancel_beside(
        settings, monkeypatch, lambda _claims, _overlays: being_written.add("page_views"), being_written
    )
    assert deleted == [] and result["kept"] == "named_meanwhile" and result["switched"] is False


def test_a_cancel_deletes_rows_only_once_no_mark_names_them_after_its_wait(settings, monkeypatch):
    result, deleted = _cancel_beside(settings, monkeypatch, lambda _claims, _overlays: None)
    assert deleted == ["page_views~replay-50"]
    assert result == {"view": "page_views", "shadow": "page_views~replay-50", "rows_deleted": 7, "switched": False}


def test_a_resume_takes_over_only_the_claim_it_was_planned_against(settings, monkeypatch):
    """A `--resume` planned while replay A held the claim, writing its own after a `--cancel` released
    A's: the cancel deleted A's rows, and A (still running elsewhere) switched to them under the
    resume's claim, which names A as taken over. Now the resume is refused, and the claim stays off."""
    from stores import replays, webhdfs

    files: dict = {}
    monkeypatch.setattr(webhdfs, "WebHdfs", lambda _settings: WritableFs(files))

    def resume(started: int, over: int) -> replays.ReplayMark:
        shadow = replays.shadow_name("page_views", started)
        return replays.mark(settings, "page_views", 0, started, take_over=True, shadow=shadow, replaces=(over,))

    with pytest.raises(replays.ReplayMarked, match="changed since this `--resume` read it"):
        resume(90, 50)  # A's claim (50) was released meanwhile
    assert files == {}, "nothing claimed, nothing left beside"
    files["page_views.json"] = replays.ReplayMark("page_views", 0, 70, "page_views~replay-70").to_json()
    with pytest.raises(replays.ReplayMarked):
        resume(90, 50)  # another replay claimed the view since
    assert replays.ReplayMark.from_json("page_views", files["page_views.json"]).started_ms == 70
    assert resume(95, 70).replaces == (70,), "the claim it was planned against is taken over"
    files["page_views.json"] = b"{broken"
    assert resume(99, 0).started_ms == 99, "an unreadable claim is what such a resume takes over"


def test_a_claim_resumed_again_and_again_stays_a_readable_mark():
    """Each `--resume` named every claim before it: after about 220 kills and resumes the claim
    passed a mark's 4,096 bytes, read as no mark, and the view's answers were refused for good."""
    from lambdactl.replay_rules import MAX_REPLACED, taken_over
    from stores.replays import MAX_MARK_BYTES, ReplayMark, shadow_name

    now = 1_796_000_000_000
    claim = ReplayMark("page_views", 0, now, shadow=shadow_name("page_views", now))
    for n in range(1, 400):  # killed, then resumed, 400 times
        started = now + n * 1_000
        claim = ReplayMark(
            "page_views", 0, started, shadow=shadow_name("page_views", started), replaces=taken_over([claim])
        )
        data = claim.to_json()
        assert len(data) <= MAX_MARK_BYTES
        assert ReplayMark.from_json("page_views", data) == claim
    assert len(claim.replaces) == MAX_REPLACED
    assert claim.replaces[0] == now + 398 * 1_000, "the claim taken over first, then its own chain"
    switched = ReplayMark("page_views", 0, now, shadow=shadow_name("page_views", now), split_ms=now)
    assert taken_over([switched]) == (), "a switched replay is no claim to take over"


@pytest.mark.parametrize(
    ("failure", "says"),
    [
        (ConnectionError("HDFS went away"), r"\(ConnectionError: HDFS went away\)"),
        (KeyboardInterrupt(), r"\(interrupted\)"),
    ],
)
def test_a_switch_that_fails_after_its_overlay_is_written_says_the_view_answers_from_the_replay(
    monkeypatch, failure, says
):
    """The switch wrote its overlay, then failed deleting the claim: the replay said "the view keeps
    answering as before", though the view already answered from the replayed rows. Ctrl-C there said the same."""
    from definitions.settings import Settings
    from lambdactl import replay_switch
    from stores import replays
    from stores.replays import ReplayMark, shadow_name

    claim = ReplayMark("page_views", 0, 5_000, shadow=shadow_name("page_views", 5_000))
    overlay = ReplayMark("page_views", 0, 5_000, shadow=claim.shadow, split_ms=9_000)

    def fails_after_the_overlay(settings, held, split_ms):
        raise failure

    monkeypatch.setattr(replays, "switch", fails_after_the_overlay)
    monkeypatch.setattr(replays, "read_overlays", lambda _settings: {"page_views": overlay})
    with pytest.raises(
        replay_switch.SwitchUnfinished, match=rf"switched \(it answers from the replayed rows\).*{says}.*--cancel"
    ):
        replay_switch.switched_to(Settings(), claim, 9_000)
    # No overlay of this replay: the failure is the switch's own, the view as it was.
    monkeypatch.setattr(replays, "read_overlays", lambda _settings: {})
    with pytest.raises(type(failure)):
        replay_switch.switched_to(Settings(), claim, 9_000)
    monkeypatch.setattr(
        replays, "read_overlays", lambda _settings: {"page_views": ReplayMark("page_views", 0, 4_000, "x", 6_000)}
    )
    with pytest.raises(type(failure)):
        replay_switch.switched_to(Settings(), claim, 9_000)


def test_the_split_moves_on_at_most_ten_minutes_then_the_replay_stops_naming_the_clocks():
    """Each bucket the split moves past this host's clock is waited out: with the brokers' clock an
    hour ahead, a replay waited an hour before it read Kafka."""
    from lambdactl.replay_rules import settled_split

    asked = []

    def always_early(split_ms):
        asked.append(split_ms)
        assert len(asked) < 200, "the split moved on without end"
        return [replace(span(0, 0, 0), end=10)]

    with pytest.raises(SystemExit, match=r"more than 600 s ahead.*replay --view page_views --resume"):
        settled_split(always_early, 60_000, {0: 100}, 30_000, "page_views")
    assert asked[-1] == 60_000 + 600_000 and len(asked) == 21
    asked.clear()
    with pytest.raises(SystemExit, match=r"more than 10800 s ahead"):
        settled_split(always_early, 3_600_000, {0: 100}, 3_600_000, "page_views")
    assert len(asked) == 4, "at least three buckets"


def test_a_topic_the_speed_layer_does_not_read_as_it_is_refused():
    """A replay with another kafka.events_topic (a variable in the operator's shell), or of a topic not
    there or made again, read nothing or only new records, and switched the view to those rows: every
    realtime count since the cutoff gone from answers served as exact."""
    from lambdactl.replay_rules import topic_refusal
    from stores.kafka import PartitionSpan

    spans = [PartitionSpan(p, 10, 100, 0, 1) for p in (0, 1)]
    assert topic_refusal("events", spans, {0: 90, 1: 100}, True) is None
    assert topic_refusal("events", spans, None, False) is None, "the speed layer has not committed yet"
    assert "no partitions (no such topic)" in (topic_refusal("evnets", [], None, False) or "")
    assert "reads no topic evnets" in (topic_refusal("evnets", spans, None, True) or "")
    assert "partitions [0, 1], the speed layer reads [0, 1, 2]" in (
        topic_refusal("events", spans, {0: 1, 1: 1, 2: 1}, True) or ""
    )
    assert "deleted and made again" in (topic_refusal("events", spans, {0: 90, 1: 101}, True) or "")
    assert topic_refusal("events", spans, {0: 90}, True) is None, "a partition added since its last commit"
