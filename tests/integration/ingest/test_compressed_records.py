"""Records from producers that compress their batches, with each codec a Kafka client may choose,
on the real stack: archived (the completeness marker, which reads records back with kafka-python,
passes them), dead-lettered when invalid, and counted exactly by the speed layer."""

from __future__ import annotations

import uuid

from ingest.generator import INVALID_KINDS, GeneratorConfig
from stores import completeness
from stores.kafka import COMPRESSION_CODECS
from tests.integration.ingest.test_archiver import dlq_records
from tests.support.events import VALID_KINDS, fresh_seed, master_rows, send, wait_archived
from tests.support.realtime import wait_until_exact


def test_every_compression_codec_is_archived_dead_lettered_and_counted(settings, stack, spark):
    prefix = f"/codec-{uuid.uuid4().hex[:8]}"
    sent = {
        codec: send(
            settings,
            GeneratorConfig(
                seed=fresh_seed(),
                count=400,
                pages=10,
                url_prefix=f"{prefix}-{codec}",
                duplicate_fraction=0.05,
                invalid_fraction=0.05,
                compression=codec,
            ),
        )
        for codec in COMPRESSION_CODECS
    }
    everything = [r for records in sent.values() for r in records]
    assert {r.kind for r in everything} & set(INVALID_KINDS), "the workload holds invalid records"

    # Completeness reads the newest archived record of each partition back: a codec it cannot decode
    # fails the marker of every batch whose last record it compressed.
    wait_archived(settings, everything, timeout_s=180)
    for codec, records in sent.items():
        last = {}
        for r in records:
            if r.offset > last.get(r.partition, (-1, 0))[0]:
                last[r.partition] = (r.offset, r.ingest_time_ms)
        progress = completeness.progress_from_end_offsets(settings, {p: offset + 1 for p, (offset, _) in last.items()})
        assert {p: pp.complete_before_ms for p, pp in progress.items()} == {p: t for p, (_, t) in last.items()}, codec

    rows = master_rows(spark, settings, everything)
    archived = {(row.kafka_partition, row.kafka_offset) for row in rows}
    for codec, records in sent.items():
        valid = {(r.partition, r.offset) for r in records if r.kind in VALID_KINDS}
        assert valid and valid <= archived, f"{codec}: {len(valid - archived)} valid records not archived"
    assert len(rows) == len(archived) == sum(1 for r in everything if r.kind in VALID_KINDS)

    invalid = {(r.partition, r.offset) for r in everything if r.kind in INVALID_KINDS}
    assert set(dlq_records(settings, invalid)) == invalid, "every invalid record is dead-lettered"

    wait_until_exact(settings, everything, timeout_s=180)
