"""A DAG run whose cutoff a run beside it overtook (an operator's `lambdactl batch` swapped at or past
it first) has nothing left to do: with --skip-if-overtaken its step exits 3 (the DAG skips it)
instead of refusing with 2 (the DAG failed the run). Every other refusal stays one, also when
whether the run was overtaken cannot be read. The stores are stand-ins here;
tests/integration/airflow/test_dags.py runs the DAG's side and the real command."""

from __future__ import annotations

import argparse

import pytest

import batch_layer.job
import lambdactl.batch as batch
import stores.registry
from definitions.settings import Settings
from stores.batch_writer import VerificationError
from stores.pointer import CutoffError, Overtaken, Pointer, PointerMoved, ViewEntry

C = 1_795_000_000_000  # the run's cutoff, 2026-11-18T11:06:40Z
STEP = 60_000
VIEWS = ["page_views", "clicks"]


def pointer(version: int = 9, **cutoffs: int) -> Pointer:
    return Pointer({name: ViewEntry(f"{name}_{version}", version, c) for name, c in cutoffs.items()}, version=version)


def basis(current: Pointer) -> dict:
    """What a run read (stores.pointer_moves.run_basis): the entries of its views."""
    return {"entries": {n: [e.table, e.version, e.cutoff_ms] for n, e in current.entries.items()}}


READ = basis(pointer(version=8, page_views=C - STEP, clicks=C - STEP))  # both behind the run's cutoff


@pytest.mark.parametrize(
    "current",
    [pointer(page_views=C + STEP, clicks=C), pointer(page_views=C, clicks=C)],
    ids=["one past it, one at it", "all at it"],
)
def test_views_another_run_moved_to_or_past_the_cutoff_overtake_a_written_run(current):
    why = batch.overtaken(current, VIEWS, C, 12, READ)
    assert "a run beside this one swapped first" in why and "page_views (version 9" in why, why
    assert "clicks (version 9" in why, why


def test_a_view_served_at_the_cutoff_already_when_the_run_read_leaves_nothing_to_do_beside_a_moved_one():
    """clicks served at the cutoff when the run read the pointer and still does; page_views moved past it."""
    read = basis(pointer(version=8, page_views=C - STEP, clicks=C))
    now = Pointer(
        {"page_views": ViewEntry("page_views_9", 9, C + STEP), "clicks": ViewEntry("clicks_8", 8, C)}, version=9
    )
    why = batch.overtaken(now, VIEWS, C, 12, read)
    assert "page_views (version 9" in why and "clicks" not in why, why
    assert batch.overtaken(now, VIEWS, C + STEP, 12, read) == "", "clicks below that cutoff: its recompute serves"


@pytest.mark.parametrize(
    "current",
    [pointer(page_views=C + STEP, clicks=C - STEP), pointer(page_views=C)],
    ids=["one past it, one behind", "one of two at it, the other not served"],
)
def test_a_run_some_of_whose_views_no_other_run_moved_is_not_overtaken(current):
    """Skipped ("nothing to do", exit 3: the DAG run green), its recompute of the other views never
    served, and a request for them was dropped unseen: the refusal stands (exit 2), naming why."""
    assert batch.overtaken(current, VIEWS, C, 12, READ) == ""


def test_without_what_the_run_read_only_a_view_past_the_cutoff_overtakes_it():
    """A recompute refused before it wrote anything: a view at its cutoff may have served so when it planned."""
    assert "page_views (version 9" in batch.overtaken(pointer(page_views=C + STEP, clicks=C + STEP), VIEWS, C)
    assert "page_views (version 9" in batch.overtaken(pointer(page_views=C + STEP, clicks=C), VIEWS, C)
    assert batch.overtaken(pointer(page_views=C, clicks=C), VIEWS, C) == ""


@pytest.mark.parametrize(
    "current, own, read",
    [
        (None, None, READ),
        (pointer(page_views=C - STEP, clicks=C - STEP), None, READ),
        (pointer(page_views=C), 9, READ),
        (pointer(page_views=C, clicks=C - STEP), 12, basis(pointer(page_views=C, clicks=C - 2 * STEP))),
    ],
    ids=[
        "no pointer",
        "all behind it (the pointer moved otherwise)",
        "served by its own version",
        "at it already when the run read the pointer",
    ],
)
def test_a_run_no_other_run_got_ahead_of_is_not_overtaken(current, own, read):
    assert batch.overtaken(current, VIEWS, C, own, read) == ""


class Store:
    def __init__(self, current: Pointer, runs: dict):
        self.current, self.recorded = current, runs

    def pointer(self) -> Pointer:
        return self.current

    def runs(self) -> dict:
        return self.recorded


def args(**given) -> argparse.Namespace:
    base = dict(
        plan=False, verify=None, swap=None, no_swap=True, cutoff=None, views=None, force=False, json=True,
        no_report=True, skip_if_overtaken=True,
    )  # fmt: skip
    return argparse.Namespace(**{**base, **given})


@pytest.fixture
def refused(monkeypatch):
    """cmd_batch against a pointer serving page_views and clicks at C + STEP (no store is asked); the
    run and the swap refuse with the error the test sets."""
    state = {"error": CutoffError("refused"), "store": Store(pointer(page_views=C + STEP, clicks=C + STEP), {})}

    def refuse(*_args, **_kwargs):
        raise state["error"]

    monkeypatch.setattr(batch_layer.job, "run_batch", refuse)
    monkeypatch.setattr(batch_layer.job, "swap_version", refuse)
    monkeypatch.setattr(stores.registry, "version_store", lambda _settings: state["store"])
    monkeypatch.setattr(batch, "planned_names", lambda _settings, _current, names: list(names or VIEWS))
    return state


def test_a_recompute_overtaken_exits_3_with_the_flag_and_2_without(refused, caplog):
    run = args(cutoff="2026-11-18T11:06:40Z", views=["page_views"])
    refused["error"] = Overtaken("cutoff 2026-11-18T11:06:40Z is behind what serves page_views")
    assert batch.cmd_batch(Settings(), run) == batch.NOTHING_NEW
    assert "nothing to do: a run beside this one swapped first" in caplog.text
    assert batch.cmd_batch(Settings(), args(**{**vars(run), "skip_if_overtaken": False})) == 2


def test_a_swap_overtaken_exits_3_and_one_with_something_left_refuses(refused):
    refused["error"] = PointerMoved("the pointer moved since this run read it")
    refused["store"].recorded = {12: {"views": VIEWS, "cutoff_ms": C, "basis": READ}}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == batch.NOTHING_NEW
    refused["store"].recorded = {12: {"views": VIEWS, "cutoff_ms": C, "basis": basis(refused["store"].current)}}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2, "what serves is what it read: refused"
    refused["store"].recorded = {12: {"views": VIEWS, "cutoff_ms": C + 2 * STEP}}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2, "its views would move on: refused"
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=13)) == 2, "an unknown run: refused"


@pytest.mark.parametrize(
    "error",
    [
        VerificationError("version 12's tables were dropped"),
        CutoffError("unknown view 'x'"),
        CutoffError("the speed layer keys realtime rows by 60s ingest buckets"),
    ],
    ids=["tables dropped", "unknown view", "bucket size"],
)
def test_a_refusal_no_other_run_caused_stays_one_though_views_are_ahead(refused, error):
    refused["error"] = error
    refused["store"].recorded = {12: {"views": VIEWS, "cutoff_ms": C}}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2
    assert batch.cmd_batch(Settings(), args(cutoff="2026-11-18T11:06:40Z")) == 2


@pytest.mark.parametrize(
    "record",
    [{"views": VIEWS, "cutoff_ms": True}, {"views": "page_views", "cutoff_ms": C}, {"views": [["x"]], "cutoff_ms": C}],
    ids=["a bool for a cutoff", "views not a list", "a view not a name"],
)
def test_a_malformed_run_record_is_refused_not_skipped(refused, record):
    refused["error"] = PointerMoved("the pointer moved since this run read it")
    refused["store"].recorded = {12: record}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2


def test_a_store_that_cannot_say_leaves_the_refusal_not_a_failure(refused, monkeypatch):
    """Reading the pointer to tell failed: the refusal stands (exit 2: the DAG fails at once), not exit 1."""

    class Down(Store):
        def pointer(self) -> Pointer:
            raise ConnectionError("hbase-thrift did not answer")

    refused["error"] = PointerMoved("the pointer moved since this run read it")
    refused["store"] = Down(pointer(), {})
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2
