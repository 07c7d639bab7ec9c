"""A run record's new state is written last (stores.batch_views.record_run_if): the state flipped to
"verified" first, and a recompute killed before its figures followed left a verified run without
them (`batch --verify` failed on a KeyError, `--swap` served a version with empty figures). No
service: the HBase connection is a stand-in recording what is sent in order; the real checkAndPut
is exercised in tests/integration/batch/test_pointer_store.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import happybase  # noqa: F401  (it loads the Hbase_thrift IDL record_run_if takes its Mutation from)
import pytest

from definitions.settings import Settings
from stores import batch_views


class Killed(Exception):
    pass


def connection(sent: list, kill_at: bytes | None = None, state: str = "writing"):
    def check_and_put(_table, _row, column, expected, mutation, _attributes):
        assert column == b"p:state"
        if mutation.column == kill_at:
            raise Killed
        if json.loads(expected) != state:
            return False
        sent.append(("if", mutation.column))
        return True

    meta = SimpleNamespace(name=b"meta", put=lambda _row, cells: sent.append(("put", *sorted(cells))))
    return SimpleNamespace(
        client=SimpleNamespace(checkAndPut=check_and_put), table=lambda _name: meta, close=lambda: None
    )


def test_the_new_state_is_written_after_every_other_field(monkeypatch):
    sent: list = []
    monkeypatch.setattr(batch_views, "hbase_connection", lambda _settings: connection(sent))
    store = batch_views.VersionStore(Settings())
    assert store.record_run_if(5, "writing", state="verified", stats={"events": 3}, verified_ms=7)
    assert sent == [("if", b"p:stats"), ("if", b"p:verified_ms"), ("if", b"p:state")]


def test_killed_before_its_state_a_run_stays_in_the_old_one(monkeypatch):
    sent: list = []
    monkeypatch.setattr(batch_views, "hbase_connection", lambda _settings: connection(sent, kill_at=b"p:state"))
    with pytest.raises(Killed):
        batch_views.VersionStore(Settings()).record_run_if(5, "writing", state="verified", stats={"events": 3})
    assert ("if", b"p:state") not in sent and ("if", b"p:stats") in sent


def test_a_record_not_in_the_expected_state_gets_nothing(monkeypatch):
    sent: list = []
    monkeypatch.setattr(batch_views, "hbase_connection", lambda _settings: connection(sent, state="dropped"))
    store = batch_views.VersionStore(Settings())
    assert not store.record_run_if(5, "writing", state="verified", stats={"events": 3}, verified_ms=7)
    assert not store.record_run_if(5, "writing", state="verified")
    assert not store.record_run_if(5, "writing", heartbeat_ms=9)
    assert sent == []
