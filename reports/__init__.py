"""Accuracy reports: what the speed layer said versus what the batch layer computed, like for like.

For one ingest window [previous cutoff, cutoff) — the records a batch run absorbed — every cell
(view, granularity, key, event bucket, ingest bucket) of both layers is compared and every
difference traced to a cause (docs/reports.md). One module per responsibility:

  cells      the vocabulary: a cell, both of its sides, the sketch's tolerance
  read       the two sides: realtime rows from Cassandra, batch cells recomputed with Spark from
             the master dataset; waiting for the speed layer to pass the window's end
  attribute  the causes of one cell's difference
  compare    matching the two sides and the figures (pure: no I/O, no Spark)
  build      the report document, and the window of a batch version (one lookup for every caller)
  charts     SVG charts drawn with matplotlib
  render     the HTML page (Jinja2 templates under templates/, autoescaped)
  storage    the one place reports are stored, listed and read back (the CLI, the API, the build)

`python -m reports` builds, renders and stores the report of the serving version's window.
"""
