"""The realtime tables are declared once (stores.realtime_schema.TABLES): schema, writer and clean-up keys
all come from the declaration (no services)."""

from __future__ import annotations

from definitions.settings import Settings
from stores.realtime_cleanup import TARGETS
from stores.realtime_schema import BY_BUCKET, BY_KEY, TABLES, schema


def test_schema_declares_each_table_with_its_primary_key():
    by_key, by_bucket, marks, origin = schema(Settings())
    assert "realtime_by_key (view_name text, granularity text, key text, event_bucket bigint" in by_key
    assert "PRIMARY KEY ((view_name, granularity, key), event_bucket, ingest_bucket)) WITH" in by_key
    assert "sketch blob" in by_key and "sketch" not in by_bucket
    assert "PRIMARY KEY ((view_name, granularity, event_bucket), ingest_bucket, key)) WITH" in by_bucket
    assert "default_time_to_live = 259200" in by_key
    assert "realtime_writes (shard int, writer text, generation bigint, PRIMARY KEY ((shard), writer))" in marks
    assert origin.endswith("realtime_origin (name text PRIMARY KEY, started_ms bigint)"), "no TTL: it outlives rows"


def test_the_writer_binds_every_column_in_declared_order():
    statement = TABLES[BY_KEY].insert()
    assert statement == (
        "INSERT INTO realtime_by_key (view_name, granularity, key, event_bucket, ingest_bucket, value, sketch, "
        "updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
    )
    assert TABLES[BY_BUCKET].insert().count("?") == len(TABLES[BY_BUCKET].columns) + 1 == 8


def test_the_clean_up_deletes_by_the_declared_keys():
    assert TARGETS[BY_KEY] == (("view_name", "granularity", "key"), ("event_bucket",))
    assert TARGETS[BY_BUCKET] == (("view_name", "granularity", "event_bucket"), ())


def test_a_key_nested_past_pythons_recursion_limit_is_a_bad_row_not_a_crash():
    """json.loads raises RecursionError, not ValueError, on a key of thousands of "[": the serving
    layer's top-N read escaped its BadRealtimeRow handling with it (a 500 for the view)."""
    import pytest

    from stores.realtime import BadRealtimeRow, canonical_key

    with pytest.raises(BadRealtimeRow, match="not a JSON array of strings"):
        canonical_key("[" * 100_000)
    assert canonical_key('[ "/a" ]') == '["/a"]'
    # A lone surrogate (valid JSON, no text): the event contract refuses it, so no event wrote it.
    with pytest.raises(BadRealtimeRow, match="JSON array of strings"):
        canonical_key('["\\ud800x"]')
