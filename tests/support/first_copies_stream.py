"""Validated records streamed through the speed layer's de-duplication (speed_layer.first_copies) on
a local Spark: one step a micro-batch, each a JSON file the file source reads to its end
(availableNow), the checkpoint kept from step to step."""

from __future__ import annotations

import json
from pathlib import Path

from speed_layer.first_copies import first_copies_within_window


def stream_steps(spark, folder: Path, schema: str, steps: list[list[dict]], settings, dedupe: str):
    """(the rows each step's micro-batches emitted, the progress of each step's micro-batches)."""
    source, checkpoint = folder / f"in-{dedupe}", folder / f"ck-{dedupe}"
    source.mkdir()
    emitted, progress = [], []
    for number, records in enumerate(steps):
        (source / f"{number:02d}.json").write_text("".join(json.dumps(r) + "\n" for r in records))
        events = spark.readStream.schema(schema).json(source.as_uri())
        rows: list = []
        query = (
            first_copies_within_window(events, settings, dedupe)
            .writeStream.foreachBatch(lambda batch, _id, rows=rows: rows.extend(batch.collect()))
            .outputMode("append")
            .option("checkpointLocation", checkpoint.as_uri())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        emitted.append(rows)
        progress.append(list(query.recentProgress))
    return emitted, progress
