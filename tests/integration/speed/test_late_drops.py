"""The speed layer's record of rows it dropped as later than its watermark, on the real HDFS: the
newest watermark below which it dropped rows, and how many, kept across writes."""

from __future__ import annotations

from stores import checkpoints
from stores.webhdfs import WebHdfs


def test_late_drops_are_recorded_with_the_highest_watermark_and_the_total(scratch, stack):
    assert checkpoints.read_late_drops(scratch) is None
    checkpoints.record_late_drops(scratch, 5_000, 3)
    checkpoints.record_late_drops(scratch, 4_000, 2)  # a batch whose watermark was lower: the highest stays
    assert checkpoints.read_late_drops(scratch) == (5_000, 5)
    with WebHdfs(scratch) as fs:
        fs.write(checkpoints.late_drops_path(scratch), b"{broken")
    checkpoints.record_late_drops(scratch, 6_000, 1)  # a record that cannot be read is started again
    assert checkpoints.read_late_drops(scratch) == (6_000, 1)


def test_each_mark_of_late_drops_moves_what_the_serving_layer_reads_on_the_real_cassandra(settings, stack, unique):
    """The speed layer moves the late-drops mark after each record; the serving layer, reading the
    write marks every api.realtime_check_s, sees it move and reads the record then."""
    from stores.clients import cassandra_cluster
    from stores.realtime_schema import ensure_keyspace
    from stores.realtime_writes import MarkReader, late_drops_mark
    from stores.registry import late_drops_marks

    mine = settings.model_copy(
        update={"cassandra": settings.cassandra.model_copy(update={"keyspace": f"drops_{unique}"})}
    )
    ensure_keyspace(mine)
    cluster = cassandra_cluster(mine, timeout_s=60)
    session = cluster.connect(mine.cassandra.keyspace)
    marks = late_drops_marks(mine)
    try:
        assert marks is not None, "the built-in realtime store has the mark"
        reader = MarkReader(session)
        assert late_drops_mark(reader.read()) is None
        marks.mark()
        first = late_drops_mark(reader.read())
        marks.mark()
        second = late_drops_mark(reader.read())
        assert first is not None and second is not None and second > first
    finally:
        marks and marks.close()
        session.execute(f"DROP KEYSPACE IF EXISTS {mine.cassandra.keyspace}")
        cluster.shutdown()
