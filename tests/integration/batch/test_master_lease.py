"""One compaction of the master dataset at a time across hosts and state directories: the lease on
the real HDFS (stores.master_lease). Two takers at once never both hold it; a lease left by a
compaction that died is taken over (expired by the namenode's clock, or of this host and a process
that no longer runs); a compaction whose lease went stops before it moves anything."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import pytest

from batch_layer.compaction import CompactionRefused, compact_master
from stores import master_lease
from stores.master_compacted import HOUR_MS, read_compacted
from stores.master_lease import LeaseHeld, LeaseLost, compaction_lease, leases_path
from stores.webhdfs import WebHdfs
from tests.integration.batch.test_master_compaction import archive, complete_before, rows
from tests.support.polling import wait_for


@pytest.fixture
def scratch(settings, unique, tmp_path):
    root = f"/lambda/test-lease-{unique}"
    archiver = settings.archiver.model_copy(
        update={"master_path": f"{root}/master", "completeness_path": f"{root}/completeness"}
    )
    yield settings.model_copy(update={"archiver": archiver, "state_dir": tmp_path / "state"}), root
    with WebHdfs(settings) as fs:
        fs.delete(root, recursive=True)


def _leases(settings) -> list[str]:
    with WebHdfs(settings) as fs:
        return fs.list(leases_path(settings))


def _take(settings, start: threading.Barrier, holding: threading.Barrier, outcomes: list, together: list) -> None:
    """Take the lease when the other taker does; while held, wait for the other to hold it too."""
    start.wait()
    try:
        with compaction_lease(settings):
            outcomes.append("held")
            try:
                holding.wait()  # passes only when both hold it at once
                together.append(True)
            except threading.BrokenBarrierError:
                pass
    except LeaseHeld:
        outcomes.append("refused")
        holding.abort()
    except Exception as exc:  # an HDFS failure: seen in the outcomes, and the holder freed
        outcomes.append(repr(exc))
        holding.abort()


def test_two_takers_at_once_never_both_hold_the_lease(stack, scratch):
    scratch, _ = scratch
    together: list = []
    for _ in range(12):
        # A holder waits until the other was refused (or failed): a slow taker never finds the lease
        # given back and takes it after, which would look like both holding it.
        start, holding, outcomes = threading.Barrier(2), threading.Barrier(2, timeout=120), []
        takers = [threading.Thread(target=_take, args=(scratch, start, holding, outcomes, together)) for _ in range(2)]
        for t in takers:
            t.start()
        for t in takers:
            t.join(180)
        # Both may be refused (they wrote before either listed), never both hold it.
        assert len(outcomes) == 2 and set(outcomes) <= {"held", "refused"}, outcomes
        assert outcomes.count("held") <= 1, outcomes
        assert _leases(scratch) == [], "a refused taker deletes its file, a holder its own when done"
    assert together == []
    # One taking it while another holds it is refused: the rule the racing rounds rely on.
    with compaction_lease(scratch):
        outcomes = []
        late = threading.Thread(
            target=_take, args=(scratch, threading.Barrier(1), threading.Barrier(1), outcomes, together)
        )
        late.start()
        late.join(180)
        assert outcomes == ["refused"]
    assert _leases(scratch) == []


def test_a_dead_compactions_lease_is_taken_over_and_a_live_ones_refuses_naming_it(stack, spark, scratch):
    scratch, _ = scratch
    folder = leases_path(scratch)
    gone = subprocess.Popen(["true"])
    gone.wait()
    with WebHdfs(scratch) as fs:
        fs.mkdirs(folder)
        # Another host's, last renewed more than a lease ago (by the namenode's clock).
        fs.write(f"{folder}/old.json", json.dumps({"host": "elsewhere", "pid": 7}).encode())
        status = fs.status(f"{folder}/old.json")
        fs.client.set_times(
            f"{folder}/old.json",
            modification_time=status["modificationTime"] - int(master_lease.LEASE_S * 1000) - 60_000,
        )
        # This host's, of a process that no longer runs: no need to wait a lease.
        fs.write(f"{folder}/dead.json", json.dumps({"host": socket.gethostname(), "pid": gone.pid}).encode())
    with compaction_lease(scratch):
        assert len(_leases(scratch)) == 1, "the dead compactions' leases are deleted"
        # Another host's compaction (its own state directory) is refused, naming the holder.
        with pytest.raises(
            CompactionRefused, match=r"another compaction of the master dataset holds its lease \(host "
        ):
            compact_master(scratch, spark=spark)
    assert _leases(scratch) == []
    with WebHdfs(scratch) as fs:  # another host's lease renewed just now
        fs.write(f"{folder}/live.json", json.dumps({"host": "elsewhere", "pid": 7}).encode())
    with pytest.raises(LeaseHeld, match="host elsewhere, pid 7"):
        with compaction_lease(scratch):
            pass
    assert _leases(scratch) == ["live.json"]


def test_a_compaction_whose_lease_went_stops_before_it_moves_anything(stack, spark, scratch, tmp_path, monkeypatch):
    """Paused longer than a lease, a compaction is taken for dead and its file deleted: it must not
    then move hours in beside the one that took over."""
    scratch, root = scratch
    first = (int(time.time() * 1000) // HOUR_MS - 3) * HOUR_MS
    archive(spark, scratch, root, tmp_path / "in", first, 2)
    complete_before(scratch, first + 2 * HOUR_MS)
    before = rows(spark, scratch)
    from batch_layer import compaction

    real = compaction._committed

    def taken_for_dead(*args, **kwargs):
        for name in _leases(scratch):
            with WebHdfs(scratch) as fs:
                fs.delete(f"{leases_path(scratch)}/{name}")
        return real(*args, **kwargs)

    monkeypatch.setattr(compaction, "_committed", taken_for_dead)
    with pytest.raises(LeaseLost, match="is gone"):
        compact_master(scratch, spark=spark)
    monkeypatch.undo()
    with WebHdfs(scratch) as fs:
        assert read_compacted(fs, scratch) is None or read_compacted(fs, scratch).through_ms == first
    assert rows(spark, scratch) == before
    done = compact_master(scratch, spark=spark)
    assert done.compacted_hours == [first, first + HOUR_MS]
    assert rows(spark, scratch) == before


def test_renewal_never_writes_a_lease_back_once_it_is_gone(stack, scratch, monkeypatch):
    scratch, _ = scratch
    monkeypatch.setattr(master_lease, "RENEW_S", 0.5)
    with compaction_lease(scratch) as lease:
        (name,) = _leases(scratch)
        renewed = lease.renewed
        wait_for(lambda: lease.renewed > renewed or None, "a renewal", timeout_s=60, interval_s=0.05)
        with WebHdfs(scratch) as fs:
            fs.delete(f"{leases_path(scratch)}/{name}")
        wait_for(lambda: lease.lost or None, "a renewal to fail", timeout_s=60, interval_s=0.05)
        assert _leases(scratch) == []
        with pytest.raises(LeaseLost, match="is gone"):
            lease.check()
