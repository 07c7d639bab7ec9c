"""Every compression codec a Kafka producer may use can be read by the platform's Python clients.

A producer chooses its codec (gzip, snappy, lz4 or zstd; Kafka's own tools and many clients use lz4
or zstd), and the brokers keep batches as the producer compressed them. The archiver's completeness
marker, the accuracy report and the replay read records with kafka-python: a codec it cannot decode
would stop completeness for good at the first such batch. kafka-python decodes snappy, lz4 and zstd
only through optional libraries, which the platform's dependencies must therefore include.
"""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

# Kafka's attribute bits for each codec (DefaultRecordBatch.CODEC_*).
CODECS = {
    "gzip": DefaultRecordBatch.CODEC_GZIP,
    "snappy": DefaultRecordBatch.CODEC_SNAPPY,
    "lz4": DefaultRecordBatch.CODEC_LZ4,
    "zstd": DefaultRecordBatch.CODEC_ZSTD,
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_record_batch_compressed_with_each_codec_reads_back(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    values = [f'{{"event_id":"{n:06d}","url":"/page/{n % 7}"}}'.encode() * 20 for n in range(200)]
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000 + offset, key=b"user", value=value, headers=[])
    batch = DefaultRecordBatch(bytes(builder.build()))
    assert batch.compression_type == CODECS[codec]
    records = list(batch)
    assert [r.value for r in records] == values
    assert [r.timestamp for r in records] == [1_700_000_000_000 + n for n in range(200)]
