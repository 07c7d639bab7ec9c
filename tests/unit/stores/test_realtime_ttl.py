"""The realtime tables' TTL record: a raise leaves older rows on the old TTL, a lowering reaches
every row; a comment that is no record, or a TTL changed by hand, never makes a row live longer
than it may (no services)."""

from __future__ import annotations

import json

import pytest

from stores.realtime_ttl import (
    CHANGE_MARGIN_MS,
    FOREVER_S,
    MAX_CHANGES,
    combined,
    earliest_expiry,
    effective_changes,
    parse_changes,
    record_change,
)

DAY = 86_400
NOW_MS = 1_800_000_000_000


def test_a_raise_counts_from_after_the_change_so_older_rows_expire_on_the_old_ttl():
    comment = record_change((), 3 * DAY, 30 * DAY, NOW_MS)
    record = effective_changes(30 * DAY, parse_changes(comment))
    assert record == ((0, 3 * DAY), (NOW_MS + CHANGE_MARGIN_MS, 30 * DAY))
    written = NOW_MS - DAY * 1000  # a row written a day before the raise
    assert earliest_expiry(record, written) == (written / 1000 + 3 * DAY, 3 * DAY, written)
    later = NOW_MS + 2 * CHANGE_MARGIN_MS  # rows written after it all carry the new TTL
    assert earliest_expiry(record, later)[:2] == (later / 1000 + 30 * DAY, 30 * DAY)


def test_rows_written_just_after_a_raise_are_still_held_to_the_old_ttl():
    record = effective_changes(30 * DAY, parse_changes(record_change((), 3 * DAY, 30 * DAY, NOW_MS)))
    assert earliest_expiry(record, NOW_MS + 1_000)[1] == 3 * DAY


def test_a_lowering_counts_from_before_the_change_and_bounds_older_rows_by_when_the_new_ones_go():
    record = parse_changes(record_change((), 30 * DAY, DAY, NOW_MS))
    assert record == ((0, 30 * DAY), (NOW_MS - CHANGE_MARGIN_MS, DAY))
    # Rows written long before keep 30 days, but those written from the change on expire after a day.
    expiry, ttl, written = earliest_expiry(record, NOW_MS - 10 * DAY * 1000)
    assert (expiry, ttl, written) == ((NOW_MS - CHANGE_MARGIN_MS) / 1000 + DAY, DAY, NOW_MS - CHANGE_MARGIN_MS)


def test_a_lowering_soon_after_a_raise_supersedes_it():
    raised = record_change((), 3 * DAY, 30 * DAY, NOW_MS)
    lowered = parse_changes(record_change(parse_changes(raised), 30 * DAY, 3 * DAY, NOW_MS + 60_000))
    assert lowered == ((0, 3 * DAY), (NOW_MS + 60_000 - CHANGE_MARGIN_MS, 3 * DAY))
    assert all(ttl == 3 * DAY for _, ttl in lowered)


def test_a_ttl_lowered_by_hand_after_the_record_bounds_every_entry():
    record = parse_changes(record_change((), 3 * DAY, 30 * DAY, NOW_MS))
    assert effective_changes(DAY, record) == ((0, DAY), (NOW_MS + CHANGE_MARGIN_MS, DAY))


def test_with_no_record_every_row_carries_the_current_ttl_and_none_means_for_ever():
    assert effective_changes(3 * DAY, ()) == ((0, 3 * DAY),)
    assert effective_changes(0, ()) == ((0, FOREVER_S),)
    record = parse_changes(record_change((), 0, 3 * DAY, NOW_MS))
    assert record == ((0, FOREVER_S), (NOW_MS - CHANGE_MARGIN_MS, 3 * DAY))


@pytest.mark.parametrize(
    "comment",
    [
        None,
        "",
        "realtime rows",
        "[[0, 5]]",
        '{"ttl_changes": [[0, true]]}',
        '{"ttl_changes": [[0, 1.5]]}',
        '{"ttl_changes": [[0, -5]]}',
        '{"ttl_changes": [[0]]}',
        '{"ttl_changes": [[0, 5, 6]]}',
        '{"ttl_changes": {"0": 5}}',
        '{"ttl_changes": [[0, [5]]]}',
        '{"ttl_changes": [' + "[0, 5]," * 2_000 + "[0, 5]]}",
        '{"ttl_changes": [[0, 86400], [' + "9" * 400 + ", 86400]]}",  # a float division overflowed on it
        '{"ttl_changes": [[0, ' + "9" * 400 + "]]}",
        "[" * 100_000,
    ],
)
def test_a_comment_that_is_no_record_records_nothing(comment):
    assert parse_changes(comment) == ()


def test_the_record_stays_bounded_and_folds_older_changes_into_their_shortest_ttl():
    changes: tuple = ()
    ttl = 3 * DAY
    for i in range(3 * MAX_CHANGES):
        new = 3 * DAY + (i % 7) * DAY
        changes = parse_changes(record_change(changes, ttl, new, NOW_MS + i * 3_600_000))
        ttl = new
    assert len(changes) <= MAX_CHANGES
    assert changes[0] == (0, 3 * DAY)
    assert len(json.dumps(changes)) < 4_096


def test_two_tables_combine_into_the_shorter_ttl_at_every_time():
    a = (3 * DAY, parse_changes(record_change((), 3 * DAY, 30 * DAY, NOW_MS)))  # raise not yet applied here
    b = (30 * DAY, parse_changes(record_change((), 3 * DAY, 30 * DAY, NOW_MS + 3_600_000)))
    record = combined([a, b])
    assert record == (
        (0, 3 * DAY),
        (NOW_MS + CHANGE_MARGIN_MS, 3 * DAY),
        (NOW_MS + 3_600_000 + CHANGE_MARGIN_MS, 3 * DAY),
    )
    assert combined([]) == ()


def test_rows_are_all_there_from_the_first_write_time_no_ttl_has_ended_for():
    from stores.realtime_ttl import alive_from_ms

    at = NOW_MS + 10 * DAY * 1000
    assert alive_from_ms(((0, 3 * DAY),), at) == at - 3 * DAY * 1000 + 1
    raised = NOW_MS + CHANGE_MARGIN_MS  # 3 days, then 30 from the raise on
    record = ((0, 3 * DAY), (raised, 30 * DAY))
    assert alive_from_ms(record, raised + DAY * 1000) == raised - 2 * DAY * 1000 + 1, "older rows: 3 days"
    assert alive_from_ms(record, raised + 4 * DAY * 1000) == raised, "every row before the raise is gone"
    lowered = ((0, 30 * DAY), (NOW_MS, DAY))  # rows after the lowering go first
    assert alive_from_ms(lowered, NOW_MS + 2 * DAY * 1000) == NOW_MS + DAY * 1000 + 1


def test_a_raise_after_a_lowering_keeps_the_rows_before_the_lowering_on_their_own_ttl():
    lowered = parse_changes(record_change((), 30 * DAY, DAY, NOW_MS))
    raised_at = NOW_MS + 2 * DAY * 1000
    record = effective_changes(10 * DAY, parse_changes(record_change(lowered, DAY, 10 * DAY, raised_at)))
    assert record == ((0, 30 * DAY), (NOW_MS - CHANGE_MARGIN_MS, DAY), (raised_at + CHANGE_MARGIN_MS, 10 * DAY))
    long_ago = NOW_MS - 20 * DAY * 1000
    assert earliest_expiry(record, long_ago)[:2] == ((NOW_MS - CHANGE_MARGIN_MS) / 1000 + DAY, DAY)
