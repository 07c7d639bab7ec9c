"""Kafka source offsets as Spark reports them are parsed in one place (no services)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stores.progress import rows_behind, source_offsets


def test_offsets_are_parsed_to_integers_per_topic_and_partition():
    assert source_offsets('{"events": {"0": 12, "1": "7"}}') == {"events": {0: 12, 1: 7}}
    assert source_offsets(None) == {}


@pytest.mark.parametrize("text", ['["events"]', '{"events": 3}', '{"events": {"x": 1}}', "{"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError):
        source_offsets(text)


def test_rows_behind_is_latest_minus_end_over_every_partition():
    source = SimpleNamespace(endOffset='{"events": {"0": 10, "1": 5}}', latestOffset='{"events": {"0": 15, "1": 5}}')
    assert rows_behind(SimpleNamespace(sources=[source])) == 5
    broken = SimpleNamespace(endOffset="not json", latestOffset="{}")
    assert rows_behind(SimpleNamespace(sources=[broken])) is None
