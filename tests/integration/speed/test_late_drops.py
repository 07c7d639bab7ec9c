"""The speed layer's record of rows it dropped as later than its watermark, on the real HDFS: the
newest watermark below which it dropped rows, and how many, kept across writes."""

from __future__ import annotations

import pytest

from stores import checkpoints
from stores.webhdfs import WebHdfs


@pytest.fixture
def scratch(settings, unique):
    speed = settings.speed.model_copy(update={"checkpoint_dir": f"/lambda/test/drops-{unique}/checkpoint"})
    yield settings.model_copy(update={"speed": speed})
    with WebHdfs(settings) as fs:
        fs.delete(f"/lambda/test/drops-{unique}", recursive=True)


def test_late_drops_are_recorded_with_the_highest_watermark_and_the_total(scratch, stack):
    assert checkpoints.read_late_drops(scratch) is None
    checkpoints.record_late_drops(scratch, 5_000, 3)
    checkpoints.record_late_drops(scratch, 4_000, 2)  # a batch whose watermark was lower: the highest stays
    assert checkpoints.read_late_drops(scratch) == (5_000, 5)
    with WebHdfs(scratch) as fs:
        fs.write(checkpoints.late_drops_path(scratch), b"{broken")
    checkpoints.record_late_drops(scratch, 6_000, 1)  # a record that cannot be read is started again
    assert checkpoints.read_late_drops(scratch) == (6_000, 1)
