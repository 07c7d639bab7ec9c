"""A DAG run whose cutoff a run beside it overtook (an operator's `lambdactl batch` swapped past it, or
at it, first) has nothing left to do: with --skip-if-overtaken its step exits 3 (the DAG skips it)
instead of refusing with 2 (the DAG failed the run). Any other refusal stays one. The stores are
stand-ins here; tests/integration/airflow/test_dags.py runs the DAG's side."""

from __future__ import annotations

import argparse

import pytest

import batch_layer.job
import lambdactl.batch as batch
import stores.registry
from definitions.settings import Settings
from stores.pointer import CutoffError, Pointer, PointerMoved, ViewEntry

C = 1_795_000_000_000  # the run's cutoff
STEP = 60_000


def pointer(**cutoffs: int) -> Pointer:
    return Pointer({name: ViewEntry(f"{name}_9", 9, cutoff) for name, cutoff in cutoffs.items()}, version=9)


def test_a_view_served_past_the_cutoff_overtakes_the_run():
    why = batch.overtaken(pointer(page_views=C + STEP, clicks=C - STEP), ["page_views", "clicks"], C)
    assert "moved serving past its cutoff" in why and "page_views (version 9" in why and "clicks" not in why


def test_every_view_served_at_the_cutoff_overtakes_the_run():
    assert "every view of this run serves at its cutoff" in batch.overtaken(
        pointer(page_views=C, clicks=C), ["page_views", "clicks"], C
    )


@pytest.mark.parametrize(
    "current",
    [None, pointer(page_views=C - STEP), pointer(page_views=C, clicks=C - STEP), pointer(clicks=C)],
    ids=["no pointer", "behind", "one of two at it", "view not served"],
)
def test_a_run_with_something_left_to_serve_is_not_overtaken(current):
    assert batch.overtaken(current, ["page_views", "clicks"], C) == ""


class Store:
    def __init__(self, current: Pointer, runs: dict[int, dict]):
        self.current, self.recorded = current, runs

    def pointer(self) -> Pointer:
        return self.current

    def runs(self) -> dict[int, dict]:
        return self.recorded


def args(**given) -> argparse.Namespace:
    base = dict(
        plan=False, verify=None, swap=None, no_swap=True, cutoff=None, views=None, force=False, json=True,
        no_report=True, skip_if_overtaken=True,
    )  # fmt: skip
    return argparse.Namespace(**{**base, **given})


@pytest.fixture
def refused(monkeypatch):
    """cmd_batch against a pointer serving page_views and clicks at C + STEP; the run and the swap
    refuse with the error the test sets."""
    state = {"error": CutoffError("refused"), "store": Store(pointer(page_views=C + STEP, clicks=C + STEP), {})}

    def refuse(*_args, **_kwargs):
        raise state["error"]

    monkeypatch.setattr(batch_layer.job, "run_batch", refuse)
    monkeypatch.setattr(batch_layer.job, "swap_version", refuse)
    monkeypatch.setattr(stores.registry, "version_store", lambda _settings: state["store"])
    return state


def test_a_recompute_overtaken_exits_3_with_the_flag_and_2_without(refused, caplog):
    settings = Settings()
    run = args(cutoff="2026-11-18T11:06:40Z", views=["page_views"])
    refused["error"] = CutoffError("cutoff 2026-11-18T11:06:40Z is behind what serves page_views")
    assert batch.cmd_batch(settings, run) == batch.NOTHING_NEW
    assert "nothing to do: a run beside this one moved serving past its cutoff" in caplog.text
    assert batch.cmd_batch(settings, args(**{**vars(run), "skip_if_overtaken": False})) == 2


def test_a_swap_overtaken_exits_3_and_one_with_something_left_refuses(refused):
    settings = Settings()
    refused["error"] = PointerMoved("the pointer moved since this run read it")
    refused["store"].recorded = {12: {"views": ["page_views", "clicks"], "cutoff_ms": C}}
    assert batch.cmd_batch(settings, args(no_swap=False, swap=12)) == batch.NOTHING_NEW
    refused["store"].recorded = {12: {"views": ["page_views", "clicks"], "cutoff_ms": C + 2 * STEP}}
    assert batch.cmd_batch(settings, args(no_swap=False, swap=12)) == 2, "its views would move on: refused"
    assert batch.cmd_batch(settings, args(no_swap=False, swap=13)) == 2, "an unknown run: refused"


def test_a_refusal_that_is_no_cutoffs_stays_one(refused):
    from stores.batch_writer import VerificationError

    refused["error"] = VerificationError("version 12's tables were dropped")
    refused["store"].recorded = {12: {"views": ["page_views"], "cutoff_ms": C}}
    assert batch.cmd_batch(Settings(), args(no_swap=False, swap=12)) == 2
