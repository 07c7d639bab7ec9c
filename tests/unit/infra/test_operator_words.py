"""What the operator reads says what is known, in words and units: never "None" or "?"."""

from __future__ import annotations

from lambdactl.demo import speed_line


def test_speed_line_before_the_first_batch():
    assert speed_line({}) == "not running yet (no progress reported)"
    line = speed_line({"running": True, "input_rows_per_s": None, "records_behind": None, "freshness_s": None})
    assert line == "input rate not measured yet, backlog not measured yet, no micro-batch finished yet"


def test_speed_line_with_progress():
    line = speed_line({"running": True, "input_rows_per_s": 1234.4, "records_behind": 56789, "freshness_s": 4.2})
    assert line == "1,234 records/s in, 56,789 records behind Kafka, last micro-batch 4 s ago"
