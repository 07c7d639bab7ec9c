"""The speed layer's write times only grow, across its restarts too: a batch's rows replace the rows
an earlier batch wrote only when their write time is larger (Cassandra keeps the newest)."""

from __future__ import annotations

import time

from definitions.view_loading import load_views
from speed_layer.job import BatchWriter


def test_write_times_start_above_the_latest_a_store_holds_even_if_the_clock_stepped_back(settings):
    stored_us = time.time_ns() // 1000 + 3_600 * 1_000_000  # written before the clock stepped back an hour
    sink = BatchWriter(settings, load_views(settings), floor_us=stored_us)
    first = sink.batch_timestamp_us()
    assert first > stored_us
    assert sink.batch_timestamp_us() > first


def test_a_store_that_cannot_say_starts_from_this_hosts_clock(settings):
    before = time.time_ns() // 1000
    assert BatchWriter(settings, load_views(settings)).batch_timestamp_us() >= before
