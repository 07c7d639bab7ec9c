"""A computed view's HBase cells as a Spark frame: binary columns `row`, `qualifier` (within family
`d`) and `value`, byte for byte what stores/batch_layout gives the Thrift writer, built from Spark
SQL expressions only (no Python worker touches a row). The bulk load (stores/batch_bulk_load)
writes them into HFiles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from definitions.views import View
from stores import batch_layout as layout

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

MAX_KEY_PART_BYTES = 0xFFFF
VALUE_QUALIFIER = layout.VALUE.split(b":", 1)[1]
SKETCH_QUALIFIER = layout.SKETCH.split(b":", 1)[1]


def _big_endian(value: Column, size: int) -> Column:
    """`size` bytes, big-endian, of an integer column (two's complement for a negative bigint)."""
    from pyspark.sql import functions as F

    return F.unhex(F.lpad(F.hex(value), size * 2, "0"))


def _key_part(name: str) -> Column:
    """A key part as in layout.encode_key: its UTF-8 bytes after their 2-byte length; the job fails
    on a part longer than 65,535 bytes (as encode_key raises)."""
    from pyspark.sql import functions as F

    raw = F.col(name).cast("string").cast("binary")
    length = F.octet_length(raw)
    checked = F.when(
        length > MAX_KEY_PART_BYTES,
        F.raise_error(F.concat(F.lit(f"key part {name} longer than {MAX_KEY_PART_BYTES} bytes: "), length)),
    ).otherwise(length)
    return F.concat(_big_endian(checked.cast("int"), 2), raw)


def _encoded_key(view: View) -> Column:
    from pyspark.sql import functions as F

    return F.concat(*[_key_part(k) for k in view.keys])


def _bucket_suffix(granularity: str) -> Column:
    from pyspark.sql import functions as F

    code = layout.GRANULARITY_CODE[granularity]
    return F.concat(F.lit(code), _big_endian(F.col("event_bucket").cast("bigint"), 8))


def table_cells(view: View, granularity: str, computed: DataFrame) -> DataFrame:
    """One row per cell: the value cell of every computed row and, where `sketch` is set, its sketch cell."""
    from pyspark.sql import functions as F

    suffix = _bucket_suffix(granularity)
    # A missing value fails the job, as the Thrift writer fails on it (an empty cell would pass
    # for a value until verification decodes it).
    present = F.when(
        F.col("value").isNull(), F.raise_error(F.lit(f"view {view.name}/{granularity}: a cell without a value"))
    ).otherwise(F.col("value"))
    value = _big_endian(present.cast("bigint"), 8)
    if view.layout == "by_bucket":
        return computed.select(suffix.alias("row"), _encoded_key(view).alias("qualifier"), value.alias("value"))
    row = F.concat(_encoded_key(view), suffix)
    cells = computed.select(row.alias("row"), F.lit(VALUE_QUALIFIER).alias("qualifier"), value.alias("value"))
    if "sketch" not in computed.columns:
        return cells
    sketches = computed.where(F.col("sketch").isNotNull()).select(
        row.alias("row"), F.lit(SKETCH_QUALIFIER).alias("qualifier"), F.col("sketch").cast("binary").alias("value")
    )
    return cells.unionByName(sketches)
