"""The speed layer's write timestamps grow across restarts, not only within one run: a clock stepped
back across a restart (an NTP step at boot, a driver on another host) stamped the new values below
the old ones, and Cassandra kept the old (last write wins by timestamp)."""

from __future__ import annotations

import time

from definitions.settings import Settings
from definitions.views import PAGE_VIEWS, Registry
from speed_layer.job import BatchWriter


def test_timestamps_start_past_what_the_store_says_its_rows_were_stamped_at():
    ahead_us = time.time_ns() // 1000 + 60_000_000  # the run before the restart, on a clock a minute ahead
    writer = BatchWriter(Settings(), Registry((PAGE_VIEWS,)), floor_us=ahead_us)
    first = writer.batch_timestamp_us()
    assert ahead_us < first < writer.batch_timestamp_us()
    assert BatchWriter(Settings(), Registry((PAGE_VIEWS,))).batch_timestamp_us() <= time.time_ns() // 1000 + 1
