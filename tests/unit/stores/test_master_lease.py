"""Which leases on the master's compaction stop a compaction that just wrote its own: told by the
namenode's modification times alone (no service: the lease folder's listing as values)."""

from __future__ import annotations

import pytest

from stores.master_lease import LeaseFile, rivals

LEASE_MS = 600_000


def test_another_lease_renewed_within_a_lease_stops_this_one_and_an_older_one_is_expired():
    mine = LeaseFile("b.json", 10_000_000)
    live = LeaseFile("a.json", 10_000_000 - LEASE_MS)  # renewed exactly a lease before: still live
    later = LeaseFile("c.json", 10_000_500)  # written after this one (it lists after, and gives way)
    expired = LeaseFile("d.json", 10_000_000 - LEASE_MS - 1)
    assert rivals([mine, live, later, expired], "b.json", LEASE_MS) == ([live, later], [expired])
    assert rivals([mine], "b.json", LEASE_MS) == ([], [])


def test_a_host_clock_plays_no_part_only_the_times_the_namenode_wrote():
    """A lease renewed at namenode time T is live for a compaction whose own file the namenode
    stamped up to T + LEASE_MS, whatever either host's clock says."""
    for t in (0, 1_800_000_000_000):
        other = LeaseFile("x.json", t)
        assert rivals([LeaseFile("y.json", t + LEASE_MS), other], "y.json", LEASE_MS)[0] == [other]
        assert rivals([LeaseFile("y.json", t + LEASE_MS + 1), other], "y.json", LEASE_MS)[1] == [other]


def test_a_lease_whose_own_file_is_not_listed_is_held_by_none_not_an_error():
    """This compaction's file deleted between its write and its listing (taken for dead): it was a
    bare StopIteration; it is refused like any other lease held."""
    from stores.master_lease import LeaseHeld

    with pytest.raises(LeaseHeld, match="gone before it was listed"):
        rivals([LeaseFile("a.json", 5)], "b.json", LEASE_MS)


def test_a_lease_record_names_the_process_also_where_there_is_no_proc(monkeypatch):
    """Without /proc (no start ticks, no boot id) a record lacking the process's start time was
    taken for a dead process's by stores.batch_views._may_run: a live compaction's lease taken over."""
    import os

    from stores import master_lease

    monkeypatch.setattr(master_lease, "start_ticks", lambda pid: None)
    monkeypatch.setattr(master_lease, "boot_id", lambda: None)
    record = master_lease._record()
    assert record["pid"] == os.getpid()
    assert not master_lease._dead(record), "this very process"
