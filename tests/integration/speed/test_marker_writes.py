"""The speed layer's checkpoint marker is replaced whole: a writer killed half-way leaves the marker
it had (HDFS shows a file being created as empty until it is closed, and a missing marker reads as
"every view maintained from the start"), and one that cannot be read is an error naming it."""

from __future__ import annotations

import pytest

from stores import checkpoints
from stores.webhdfs import WebHdfs


def test_a_writer_killed_after_creating_the_file_leaves_the_marker_it_had(scratch, monkeypatch, stack):
    checkpoints.write_marker(scratch, 1_000, {"page_views": 1_000}, dedupe=None, cells=None)
    created = WebHdfs.write

    def killed(self, path, data, overwrite=True):
        created(self, path, b"", overwrite)  # what HDFS shows of a file whose writer died before closing it
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(WebHdfs, "write", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.write_marker(scratch, 2_000, {"page_views": 1_000, "top_pages": 2_000}, dedupe=None, cells=None)
    monkeypatch.undo()
    kept = checkpoints.read_marker(scratch)
    assert kept is not None
    assert (kept.started_ms, kept.views) == (1_000, {"page_views": 1_000})
    checkpoints.write_marker(scratch, 3_000, {"page_views": 1_000, "top_pages": 3_000}, dedupe=None, cells=None)
    assert checkpoints.read_marker(scratch).views == {"page_views": 1_000, "top_pages": 3_000}


@pytest.mark.parametrize("content", [b"", b"{not json", b"[]", b'{"started_ms": 5}'])
def test_a_marker_that_cannot_be_read_is_an_error_naming_it(scratch, content, stack):
    with WebHdfs(scratch) as fs:
        fs.write(checkpoints.marker_path(scratch), content)
    with pytest.raises(checkpoints.MarkerUnreadable, match=checkpoints.marker_path(scratch)):
        checkpoints.read_marker(scratch)
