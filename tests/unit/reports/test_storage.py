"""Storage: one place stores, lists and reads back reports, for the CLI, the API and the build
(HDFS replaced by an in-memory stand-in; no service)."""

from __future__ import annotations

import json
import os

import pytest
from fastapi.testclient import TestClient

from definitions.layer_settings import BatchSettings
from reports import storage
from tests.support.tripwire_api import LOCAL_URL

REPORTS_PATH = BatchSettings().reports_path  # the default, which the tests' settings keep


class MemoryHdfs:
    files: dict[str, bytes] = {}
    dirs: set[str] = set()

    def __init__(self, settings, timeout_s: float = 10.0) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def mkdirs(self, path: str) -> None:
        self.dirs.add(path)

    def write(self, path: str, data: bytes, overwrite: bool = True) -> None:
        self.files[path] = data

    def replace(self, source: str, destination: str) -> None:
        self.files[destination] = self.files.pop(source)

    from stores.webhdfs import WebHdfs

    write_whole = WebHdfs.write_whole  # the real one, over this stand-in's write and replace
    del WebHdfs

    def list(self, path: str) -> list[str]:
        return sorted(name.rsplit("/", 1)[1] for name in self.files if name.rsplit("/", 1)[0] == path)

    def delete(self, path: str, recursive: bool = False) -> bool:
        return self.files.pop(path, None) is not None


@pytest.fixture
def local(settings, tmp_path, monkeypatch):
    MemoryHdfs.files, MemoryHdfs.dirs = {}, set()
    monkeypatch.setattr("stores.webhdfs.WebHdfs", MemoryHdfs)
    return settings.model_copy(update={"state_dir": tmp_path})


def doc(rid: str, **extra) -> dict:
    return {"id": rid, "created": "2026-01-01T10:00:00Z", "window": {"start": "a", "end": "b"}, "summary": {}, **extra}


def test_a_report_stored_is_listed_and_read_back_by_id(local):
    older, newer = doc("20260101T100000Z-v1", version=1), doc("20260101T110000Z-v2", version=2)
    paths = storage.store_report(local, older, "<p>older</p>")
    storage.store_report(local, newer, "<p>newer</p>")
    assert paths["json"] == str(local.state_dir / "reports" / "20260101T100000Z-v1.json")
    assert json.loads(open(paths["json"]).read()) == older and open(paths["html"]).read() == "<p>older</p>"
    assert paths["hdfs_json"].endswith(f"{REPORTS_PATH}/20260101T100000Z-v1.json")
    assert MemoryHdfs.dirs == {REPORTS_PATH}
    assert json.loads(MemoryHdfs.files[f"{REPORTS_PATH}/20260101T110000Z-v2.json"]) == newer
    assert MemoryHdfs.files[f"{REPORTS_PATH}/20260101T110000Z-v2.html"] == b"<p>newer</p>"

    listed = storage.list_reports(local)
    assert [r.id for r in listed] == [newer["id"], older["id"]], "newest first"
    assert listed[0].report == newer
    assert [r.id for r in storage.list_reports(local, 1)] == [newer["id"]]
    assert storage.read_report(local, older["id"]) == older
    assert storage.read_report_html(local, newer["id"]) == "<p>newer</p>"
    assert not list((local.state_dir / "reports").glob(".*.tmp")), "written whole, then renamed"


def test_unreadable_files_are_not_listed(local):
    folder = storage.reports_dir(local)
    folder.mkdir(parents=True)
    (folder / "20260101T100000Z-broken.json").write_text("{not json")
    (folder / "20260101T100001Z-list.json").write_text("[1, 2]")
    (folder / "probe.html").write_text("<p>an html page alone is never listed</p>")
    storage.store_report(local, doc("20260101T090000Z-ok"), "<p>ok</p>")
    assert [r.id for r in storage.list_reports(local)] == ["20260101T090000Z-ok"]
    assert storage.read_report_html(local, "probe") == "<p>an html page alone is never listed</p>"


@pytest.mark.parametrize(
    "bad", ["../etc/passwd", "a/b", "", "x" * 101, "id with space", "ok\n", "é", ".", "..", "...", ".x.json.tmp"]
)
def test_invalid_ids_are_refused_before_any_path_is_made(local, bad):
    with pytest.raises(storage.InvalidReportId):
        storage.read_report(local, bad)
    with pytest.raises(storage.InvalidReportId):
        storage.read_report_html(local, bad)
    with pytest.raises(storage.InvalidReportId):
        storage.store_report(local, doc(bad), "")
    assert not MemoryHdfs.files


def test_unknown_ids_are_not_found(local):
    with pytest.raises(storage.ReportNotFound):
        storage.read_report(local, "20260101T100000Z-none")
    with pytest.raises(storage.ReportNotFound):
        storage.read_report_html(local, "20260101T100000Z-none")


def test_the_api_serves_what_storage_holds(local):
    from api.app import create_app

    storage.store_report(local, doc("20260101T100000Z-v1", version=1), "<p>page</p>")
    with TestClient(create_app(local), base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        listed = client.get("/api/v1/reports").json()["reports"]
        assert [r["id"] for r in listed] == ["20260101T100000Z-v1"]
        assert listed[0]["html"] == "/api/v1/reports/20260101T100000Z-v1/html"
        assert client.get("/api/v1/reports/20260101T100000Z-v1").json()["version"] == 1
        page = client.get("/api/v1/reports/20260101T100000Z-v1/html")
        assert page.status_code == 200 and page.text == "<p>page</p>"
        assert "script-src" not in page.headers["content-security-policy"]
        assert client.get("/api/v1/reports/20260101T100000Z-none").status_code == 404
        assert client.get("/api/v1/reports/20260101T100000Z-none/html").status_code == 404
        assert client.get("/api/v1/reports/bad id").status_code == 422
        assert client.get("/api/v1/reports/bad%20id/html").status_code == 422


def test_a_report_is_sent_as_stored_and_parsed_once_per_version_of_its_file(local, monkeypatch):
    """Every GET of a report parsed its megabytes and validated them again (asked without a token):
    a few parallel requests kept the workers busy. It is checked once per version of its file."""
    from api.app import create_app

    rid = "20260101T100000Z-v1"
    storage.store_report(local, doc(rid, version=1), "<p>page</p>")
    parsed = []
    read_report = storage.read_report
    monkeypatch.setattr(storage, "read_report", lambda *a: parsed.append(a[1]) or read_report(*a))
    with TestClient(create_app(local), base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        for _ in range(3):
            answer = client.get(f"/api/v1/reports/{rid}")
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            assert answer.json() == doc(rid, version=1)
        assert parsed == [rid]
        storage.store_report(local, doc(rid, version=2), "<p>page</p>")  # stored again under that id
        assert client.get(f"/api/v1/reports/{rid}").json()["version"] == 2
        assert parsed == [rid, rid]
        from api.routes import reports as route

        path = storage.reports_dir(local) / f"{rid}.json"
        fstat = route.os.fstat
        # The retention removes the file once it is opened for the answer: it is sent whole all the same.
        monkeypatch.setattr(route.os, "fstat", lambda fd: (path.unlink(), fstat(fd))[1])
        removed = client.get(f"/api/v1/reports/{rid}")
        assert removed.status_code == 200 and removed.json()["version"] == 2
        monkeypatch.setattr(route.os, "fstat", fstat)
        assert client.get(f"/api/v1/reports/{rid}").status_code == 404, "then it is gone"
        storage.store_report(local, doc(rid, version=2), "<p>page</p>")
        path.write_text("[1, 2]")  # no report document
        broken = client.get(f"/api/v1/reports/{rid}")
        assert broken.status_code == 404 and "cannot be read" in broken.json()["detail"]


def test_only_the_newest_reports_are_kept_here_and_on_hdfs(local):
    """Every batch run stores a report of megabytes; without retention they filled the disk, and
    the list (asked without a token) went through them all."""
    kept = local.model_copy(update={"batch": local.batch.model_copy(update={"keep_reports": 3})})
    folder = storage.reports_dir(kept)
    folder.mkdir(parents=True)
    stray = folder / ".20260101T000000Z-v0.json.123.tmp"  # left by a build killed long ago
    stray.write_text("{")
    import os

    os.utime(stray, (0, 0))
    ids = [f"20260101T1{i}0000Z-v{i}" for i in range(5)]
    for rid in ids:
        storage.store_report(kept, doc(rid), f"<p>{rid}</p>")
    assert [r.id for r in storage.list_reports(kept)] == ids[:1:-1]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{rid}{x}" for rid in ids[2:] for x in (".json", ".html")
    )
    assert sorted(MemoryHdfs.files) == sorted(f"{REPORTS_PATH}/{rid}{x}" for rid in ids[2:] for x in (".json", ".html"))


def test_the_page_is_in_place_before_the_report_is_listed(local, monkeypatch):
    """The list reads the JSON files: a build killed between the two left a listed report whose page
    was missing."""
    from pathlib import Path

    moved: list[str] = []
    replace = Path.replace

    def recorded(self, target):
        moved.append(Path(target).suffix)
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", recorded)
    storage.store_report(local, doc("20260101T100000Z-v1"), "<p>page</p>")
    assert moved == [".html", ".json"]
    assert [name.rsplit(".", 1)[1] for name in MemoryHdfs.files] == ["html", "json"]


def test_two_builds_of_one_id_at_once_leave_one_whole_report(local):
    from concurrent.futures import ThreadPoolExecutor

    rid = "20260101T100000Z-v1"
    big = {f"k{i}": "x" * 1000 for i in range(300)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: storage.store_report(local, doc(rid, n=n, **big), f"<p>{n}</p>" * 10_000), range(16)))
    report = storage.read_report(local, rid)
    assert report["k299"] == "x" * 1000
    assert not list(storage.reports_dir(local).glob(".*.tmp"))


@pytest.mark.parametrize("content", ["{not json", "[" * 100_000, ""])
def test_a_damaged_report_is_not_found_with_its_reason(local, content):
    folder = storage.reports_dir(local)
    folder.mkdir(parents=True)
    (folder / "20260101T100000Z-v1.json").write_text(content)
    with pytest.raises(storage.ReportNotFound, match="cannot be read"):
        storage.read_report(local, "20260101T100000Z-v1")


def test_a_report_hdfs_does_not_take_is_not_listed(local, monkeypatch):
    """It was listed first, then the HDFS copy failed the task: the retry listed a second report of
    the same run."""

    def refuse(self, path, data, overwrite=True):
        raise ConnectionError("hdfs away")

    monkeypatch.setattr(MemoryHdfs, "write", refuse)
    with pytest.raises(ConnectionError):
        storage.store_report(local, doc("20260101T100000Z-v1"), "<p>page</p>")
    assert storage.list_reports(local) == []
    folder = storage.reports_dir(local)
    assert not folder.exists() or not list(folder.iterdir())


def test_reports_made_within_one_second_have_ids_of_their_own_that_sort_by_creation():
    """Two ad-hoc reports in one second had one id: the second replaced the first."""
    from datetime import UTC, datetime

    from reports.build import report_id

    first = datetime(2026, 11, 30, 1, 2, 3, 4_000, tzinfo=UTC)
    second = first.replace(microsecond=5_000)
    later = first.replace(second=4, microsecond=0)
    ids = [report_id(t, "") for t in (first, second, later)]
    assert len(set(ids)) == 3, ids
    assert ids == sorted(ids), ids
    assert all(storage.check_id(i) for i in ids)
    # An id of the one-second form, made before, sorts beside those of its second.
    assert report_id(first, "") < "20261130T010203Z-adhoc" < ids[2]


def test_files_that_are_no_report_in_odd_ways_are_not_found_or_skipped(local):
    """A page that is not UTF-8 was a 500 from the API; a document nested past Python's recursion
    limit crashed `lambdactl report`'s listing."""
    folder = storage.reports_dir(local)
    folder.mkdir(parents=True)
    (folder / "20260101T100000Z-v1.html").write_bytes(b"<p>\xff\xfe</p>")
    (folder / "20260101T100000Z-v1.json").write_bytes(b'{"id": "\xff"}')
    (folder / "20260101T110000Z-deep.json").write_text("[" * 100_000)
    with pytest.raises(storage.ReportNotFound, match="cannot be read"):
        storage.read_report_html(local, "20260101T100000Z-v1")
    with pytest.raises(storage.ReportNotFound, match="cannot be read"):
        storage.read_report(local, "20260101T100000Z-v1")
    assert storage.list_reports(local) == []


def test_stored_reports_are_readable_by_other_users_of_the_state_directory(local):
    """Written through mkstemp they were 0600: an API running as another user (a shared volume)
    skipped them in its list and answered 500 for them."""
    import stat

    paths = storage.store_report(local, doc("20260101T090000Z-ok"), "<p>ok</p>")
    for suffix in ("json", "html"):
        assert stat.S_IMODE(os.stat(paths[suffix]).st_mode) == 0o644


def test_a_store_that_fails_half_way_leaves_no_temporary_file(local, monkeypatch):
    """A full disk while the page was written left its partial temporary file (several MB a report)
    for an hour at least, filling the disk further at every retry."""

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage.os, "fchmod", full)
    with pytest.raises(OSError, match="No space left"):
        storage.store_report(local, doc("20260101T100000Z-v1", version=1), "<p>page</p>")
    assert list((local.state_dir / "reports").iterdir()) == []


def test_a_page_that_holds_a_lone_surrogate_is_stored_escaped_not_refused(local):
    storage.store_report(local, doc("20260101T100000Z-v1", version=1), "<p>\ud800x</p>")
    assert (local.state_dir / "reports" / "20260101T100000Z-v1.html").read_bytes() == b"<p>\\ud800x</p>"


def test_listings_at_once_on_a_cold_cache_parse_each_report_once(local, monkeypatch):
    """After an API restart, N listings at once each parsed every report (megabytes each): N times
    the CPU, and N documents held at once."""
    import threading
    import time

    for hour in range(10, 16):
        storage.store_report(local, doc(f"20260101T{hour}0000Z-v{hour}", version=hour), "<p/>")
    storage._listed.clear()
    parsed = []
    real_loads = storage.json.loads

    def counting(text, *args, **kwargs):  # as slow as a report of megabytes
        parsed.append(1)
        time.sleep(0.05)
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(storage.json, "loads", counting)
    start = threading.Barrier(4)
    listed = []

    def listing():
        start.wait()
        listed.append(len(storage.list_summaries(local, 100)))

    threads = [threading.Thread(target=listing) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert listed == [6, 6, 6, 6]
    assert len(parsed) == 6, f"{len(parsed)} parses of 6 reports"


def test_a_store_whose_last_bytes_fail_at_the_close_leaves_no_temporary_file(local, monkeypatch):
    """A small page is written out at the close's flush: a full disk fails there, not at write()."""
    import tempfile

    real = tempfile.NamedTemporaryFile

    class FullAtClose:
        def __init__(self, *args, **kwargs):
            self.file = real(*args, **kwargs)
            self.name = self.file.name

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            self.file.__enter__()
            return self

        def __exit__(self, *exc):
            self.file.__exit__(*exc)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage.tempfile, "NamedTemporaryFile", FullAtClose)
    with pytest.raises(OSError, match="No space left"):
        storage.store_report(local, doc("20260101T100000Z-v1", version=1), "<p>page</p>")
    assert list((local.state_dir / "reports").iterdir()) == []


def test_a_copy_killed_while_written_to_hdfs_leaves_no_report_under_its_name(local, monkeypatch):
    """HDFS shows a file being created, empty, under its name until it is closed: a build killed
    while copying left an empty report there, kept until retention pruned it (its retry stores
    under a new id). Written beside it and moved over it, no name holds a part; what the killed
    write left beside it goes with its report's retention."""
    kept = local.model_copy(update={"batch": local.batch.model_copy(update={"keep_reports": 1})})
    killed = doc("20260101T100000Z-v1")

    def killed_while_writing(self, path: str, data: bytes, overwrite: bool = True) -> None:
        self.files[path] = data[:1]  # the part written before the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryHdfs, "write", killed_while_writing)
    with pytest.raises(KeyboardInterrupt):
        storage.store_report(kept, killed, "<p>page</p>")
    monkeypatch.undo()
    monkeypatch.setattr("stores.webhdfs.WebHdfs", MemoryHdfs)
    names = [name.rsplit("/", 1)[1] for name in MemoryHdfs.files]
    assert not [n for n in names if n.startswith(killed["id"]) and n.endswith((".html", ".json"))], names

    storage.store_report(kept, doc("20260101T110000Z-v2"), "<p>next</p>")
    assert sorted(MemoryHdfs.files) == [f"{REPORTS_PATH}/20260101T110000Z-v2{x}" for x in (".html", ".json")]


def test_cold_report_reads_at_once_parse_one_at_a_time_and_a_long_wait_is_refused(local, monkeypatch):
    """Each GET of a report not yet checked parsed its whole file (megabytes, ~10× in Python objects),
    as many at once as threads asked, without a token; ids asked past the 256 checked left each one
    cold again. Now one parse at a time per process, more ids kept checked than reports are kept,
    and a request that cannot have its turn within PARSE_WAIT_S is told to ask again (429)."""
    import threading
    import time

    from api.app import create_app

    ids = [f"20260101T{hour}0000Z-v{hour}" for hour in range(10, 16)]
    for hour, rid in zip(range(10, 16), ids, strict=True):
        storage.store_report(local, doc(rid, version=hour), "<p/>")
    storage._checked.clear()
    at_once = {"now": 0, "most": 0}
    real_loads = storage.json.loads

    def counting(text, *args, **kwargs):
        at_once["now"] += 1
        at_once["most"] = max(at_once["most"], at_once["now"])
        time.sleep(0.05)  # as slow as a report of megabytes
        at_once["now"] -= 1
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(storage.json, "loads", counting)
    start = threading.Barrier(len(ids))
    threads = [threading.Thread(target=lambda r=rid: (start.wait(), storage.report_file(local, r))) for rid in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert at_once["most"] == 1, f"{at_once['most']} reports parsed at once"
    assert storage._checked.maxsize > local.batch.keep_reports
    storage._checked.clear()
    monkeypatch.setattr(storage, "PARSE_WAIT_S", 0.2)
    with TestClient(create_app(local), base_url=LOCAL_URL, raise_server_exceptions=False) as client:
        with storage._parse_lock:  # another request's parse that takes long
            busy = client.get(f"/api/v1/reports/{ids[0]}")
            listing = client.get("/api/v1/reports")
        assert busy.status_code == 429 and busy.headers["retry-after"] == "2", busy.text
        assert "ask again" in busy.json()["detail"]
        assert listing.status_code == 429
        assert client.get(f"/api/v1/reports/{ids[0]}").status_code == 200, "its turn come: served"


def test_reports_go_to_the_stack_s_own_hdfs_directory_and_retention_keeps_to_it(local):
    """The HDFS directory was fixed: two stacks on one HDFS each pruned the other's reports."""
    other = local.model_copy(
        update={"batch": local.batch.model_copy(update={"reports_path": "/stack-b/reports", "keep_reports": 1})}
    )
    storage.store_report(local, doc("20260101T100000Z-v1"), "<p/>")
    storage.store_report(other, doc("20260101T110000Z-v2"), "<p/>")
    storage.store_report(other, doc("20260101T120000Z-v3"), "<p/>")
    assert sorted(MemoryHdfs.files) == [
        f"{REPORTS_PATH}/20260101T100000Z-v1.html",
        f"{REPORTS_PATH}/20260101T100000Z-v1.json",
        "/stack-b/reports/20260101T120000Z-v3.html",
        "/stack-b/reports/20260101T120000Z-v3.json",
    ]


def test_files_beside_the_reports_are_neither_counted_nor_pruned(local):
    """Names that sort above the ids the platform makes (a note, a page, an older tool's file)
    counted as the newest reports: every report was deleted right after it was stored, and the
    note with it; `lambdactl report` listed the note, and failed on its fields."""
    kept = local.model_copy(update={"batch": local.batch.model_copy(update={"keep_reports": 2})})
    folder = storage.reports_dir(kept)
    folder.mkdir(parents=True)
    foreign = {"notes.json": '{"window": "2026-01-01"}', "README.html": "<p>read me</p>", "0-keep-me.json": "{}"}
    for name, text in foreign.items():
        (folder / name).write_text(text)
        MemoryHdfs.files[f"{REPORTS_PATH}/{name}"] = text.encode()
    ids = [f"20260101T1{i}0000.000Z-v{i}" for i in range(3)]
    for rid in ids:
        storage.store_report(kept, doc(rid), f"<p>{rid}</p>")
    assert [r.id for r in storage.list_reports(kept)] == ids[:0:-1]
    assert [r.id for r in storage.list_summaries(kept, 10)] == ids[:0:-1]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*foreign, *(f"{rid}{x}" for rid in ids[1:] for x in (".json", ".html"))]
    )
    assert sorted(MemoryHdfs.files) == sorted(
        f"{REPORTS_PATH}/{n}" for n in [*foreign, *(f"{rid}{x}" for rid in ids[1:] for x in (".json", ".html"))]
    )


def test_the_list_of_reports_passes_over_a_document_of_other_fields(local, caplog):
    import argparse

    from lambdactl.report import cmd_report

    folder = storage.reports_dir(local)
    folder.mkdir(parents=True)
    (folder / "20260101T100000.000Z-odd.json").write_text('{"window": "2026-01-01", "version": 1}')
    storage.store_report(local, doc("20260101T110000.000Z-v2", version=2), "<p>v2</p>")
    assert cmd_report(local, argparse.Namespace(version=None, limit=10, json=False)) == 0
    out = caplog.text
    assert "20260101T110000.000Z-v2: a → b (version 2)" in out and "odd: None → None (version 1)" in out, out


def test_a_report_of_the_longest_id_is_listed():
    from datetime import UTC, datetime

    from reports.build import report_id

    rid = report_id(datetime(2026, 1, 1, tzinfo=UTC), "r" * 200)
    assert len(rid) == 100 and storage.check_id(rid) and storage._BUILT.fullmatch(rid)
