"""Views, declared once. Both layers derive their Spark code from these declarations.

A view is: a name, the event columns it is keyed by, an optional filter on events, an
aggregation (count, sum of a column, or distinct values of a column) and the event-time bucket
sizes it is kept at. The batch layer computes it over the master dataset; the speed layer over
the stream, additionally keyed by ingest bucket; the serving layer merges the two. Adding a view
means adding a declaration here (or in a module listed in settings) and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from definitions.events import FIELD_NAMES, FIELDS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

GRANULARITIES: dict[str, int] = {"minute": 60, "hour": 3_600, "day": 86_400}
HLL_LG_K = 12  # 4096 registers: relative standard error 1.04 / sqrt(4096) = 1.6 %
# The largest sketch either layer stores: an HLL_8 sketch of HLL_LG_K registers and its header.
MAX_SKETCH_BYTES = 2**HLL_LG_K + 64
# Tables, replays' shadow names and HDFS mark files are named from a view's name (HDFS: 255 bytes a name).
MAX_NAME_CHARS = 64
# A changed definition's storage name adds `__` and up to a whole fingerprint (definitions.view_versions);
# declared names never hold `__` (load_views), so only storage names use the extra characters.
STORAGE_SUFFIX_CHARS = 2 + 16
_DISTINCT_VALUE = "__distinct_value"  # the counted column, beside the keys, while a distinct view is computed

Aggregation = Literal["count", "sum", "distinct"]
AGGREGATIONS: tuple[str, ...] = ("count", "sum", "distinct")
LAYOUTS: tuple[str, ...] = ("by_key", "by_bucket")


@dataclass(frozen=True)
class View:
    name: str
    keys: tuple[str, ...]
    aggregation: Aggregation
    column: str | None = None  # what `sum` adds up or `distinct` counts
    where: str | None = None  # Spark SQL predicate on the event columns
    granularities: tuple[str, ...] = ("minute", "hour", "day")
    description: str = ""
    # How the stores lay it out: "by_key" for series of one key over time (range scans by key,
    # then time); "by_bucket" keeps every key of an event bucket together, for "top N" queries.
    layout: Literal["by_key", "by_bucket"] = "by_key"
    # What a field added by a later schema_version stands for in events older than that version
    # (which cannot carry it): {"channel": "web"}. Applies to the view's keys and column; `where`
    # sees the events as stored. Kept as sorted (field, value) pairs, so a view stays hashable.
    defaults: Mapping[str, str] | tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for names in ("keys", "granularities"):  # a text is a sequence of names too: `keys="url"` read u, r, l
            value = getattr(self, names)
            if not isinstance(value, (tuple, list)) or not all(isinstance(n, str) for n in value):
                raise ValueError(f"view {self.name}: {names} must be a tuple or list of names, got {value!r:.100}")
            object.__setattr__(self, names, tuple(value))
        _check_choices(self)
        pairs = tuple(sorted(dict(self.defaults).items()))
        object.__setattr__(self, "defaults", pairs)
        for name, value in pairs:
            _check_default(self.name, name, value)
        if not (self.name.isascii() and self.name.isidentifier()):
            raise ValueError(
                f"view name must be an identifier of ASCII letters, digits and _ (tables are named from it): "
                f"{self.name[:100]!r}"
            )
        limit = MAX_NAME_CHARS + (STORAGE_SUFFIX_CHARS if "__" in self.name else 0)
        if len(self.name) > limit:
            raise ValueError(f"view name must be at most {limit} characters: {self.name[:100]!r}…")
        unknown = [k for k in (*self.keys, *([self.column] if self.column else [])) if k not in FIELD_NAMES]
        if unknown:
            raise ValueError(f"view {self.name}: unknown event column(s) {unknown}; known: {FIELD_NAMES}")
        if not self.keys:
            raise ValueError(f"view {self.name}: needs at least one key column")
        timed = [k for k in self.keys if _FIELD_BY_NAME[k].kind == "timestamp"]
        if timed:  # one row key per cell needs one text for it, in Python and in Spark alike
            raise ValueError(
                f"view {self.name}: {timed[0]} cannot be a key (a view buckets event time by its granularities; "
                "keys are text or number fields)"
            )
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"view {self.name}: a key column is named twice: {list(self.keys)}")
        if self.aggregation in ("sum", "distinct") and not self.column:
            raise ValueError(f"view {self.name}: {self.aggregation} needs a column")
        if self.aggregation == "sum" and self.column and _FIELD_BY_NAME[self.column].kind != "int":
            raise ValueError(
                f"view {self.name}: sum needs a number column; {self.column} is a {_FIELD_BY_NAME[self.column].kind}"
            )
        if self.layout == "by_bucket" and not self.additive:
            raise ValueError(f"view {self.name}: the by_bucket layout serves additive views only")
        if self.aggregation == "count" and self.column:
            raise ValueError(f"view {self.name}: count takes no column")
        bad = [g for g in self.granularities if g not in GRANULARITIES]
        if bad or not self.granularities:
            raise ValueError(
                f"view {self.name}: granularities must be among {list(GRANULARITIES)}, got {list(self.granularities)}"
            )
        if len(set(self.granularities)) != len(self.granularities):  # each event's cells were counted twice
            raise ValueError(f"view {self.name}: a granularity is named twice: {list(self.granularities)}")

    @cached_property
    def fingerprint(self) -> str:
        """What the view's values depend on (not its description), hashed: two declarations with the
        same fingerprint compute the same cells. The speed layer records it for each view it maintains."""
        return _hashed(self.shape())

    @cached_property
    def cells_fingerprint(self) -> str:
        """What the view's cells depend on, hashed: its shape but for the layout (how the stores lay
        the values out). Views with the same one have the same cells, which the speed layer can
        aggregate once for all of them (cell_groups)."""
        return _hashed({k: v for k, v in self.shape().items() if k != "layout"})

    def shape(self) -> dict[str, Any]:
        """What the view's values depend on, as JSON-ready data (View.from_shape reads it back)."""
        return {
            "keys": list(self.keys),
            "aggregation": self.aggregation,
            "column": self.column,
            "where": self.where,
            "granularities": list(self.granularities),
            "layout": self.layout,
            "defaults": [list(pair) for pair in self.defaults],
        }

    @classmethod
    def from_shape(cls, name: str, shape: Mapping[str, Any], description: str = "") -> View:
        """A view named `name` with a recorded shape (ValueError when it is not one)."""
        if not isinstance(shape, Mapping) or shape.get("aggregation") not in AGGREGATIONS:
            raise ValueError(f"view {name}: recorded definition cannot be read: {shape!r:.200}")
        try:
            return cls(
                name=name,
                keys=tuple(str(k) for k in shape["keys"]),
                aggregation=shape["aggregation"],
                column=shape.get("column"),
                where=shape.get("where"),
                granularities=tuple(str(g) for g in shape["granularities"]),
                layout=shape.get("layout", "by_key"),
                defaults=tuple((str(k), str(v)) for k, v in shape.get("defaults", ())),
                description=description,
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"view {name}: recorded definition cannot be read: {type(exc).__name__}: {exc}") from exc

    @property
    def additive(self) -> bool:
        return self.aggregation in ("count", "sum")

    @property
    def measured_column(self) -> str:
        """The column a sum or distinct view aggregates (__post_init__ ensures they have one)."""
        if self.column is None:
            raise ValueError(f"view {self.name}: {self.aggregation} has no column")
        return self.column

    # --- Spark derivation ---------------------------------------------------------------------

    def default_of(self, name: str) -> str | None:
        """The declared default of an event column, if any."""
        return dict(self.defaults).get(name)

    def column_of(self, name: str) -> Column:
        """An event column as the view reads it: a declared default stands in for it in events
        older than the schema_version that added it."""
        from pyspark.sql import functions as F

        default = self.default_of(name)
        if default is None:
            return F.col(name)
        since = _FIELD_BY_NAME[name].since
        return F.when(F.col("schema_version") < since, F.lit(default)).otherwise(F.col(name))

    def filtered(self, events: DataFrame) -> DataFrame:
        return events.where(total_filter(self.where)) if self.where else events

    def _aggregates(self) -> list[Column]:
        """The aggregate column over a cell's events: `value` for count and sum; `sketch` alone for
        distinct, as the speed layer keeps it (a stream cannot count distinct values exactly: the
        sketch's estimate is its value)."""
        from pyspark.sql import functions as F

        if self.aggregation == "count":
            return [F.count(F.lit(1)).alias("value")]
        if self.aggregation == "sum":
            return [F.sum(self.column_of(self.measured_column)).cast("bigint").alias("value")]
        return [F.hll_sketch_agg(self.distinct_column(), HLL_LG_K).alias("sketch")]

    def distinct_column(self) -> Column:
        """What a distinct view counts, as text in both layers (cells() too): a sketch hashes a
        number and its text differently, and the merged answer unions batch and realtime sketches."""
        return self.column_of(self.measured_column).cast("string")

    def compute(
        self, events: DataFrame, granularity: str, extra_keys: Iterable[str] = (), exact: bool = True
    ) -> DataFrame:
        """Aggregate `events` into this view at one granularity.

        Columns: the view's keys, `event_bucket` (bucket start, epoch seconds), any `extra_keys`
        (the accuracy report passes its ingest bucket), `value`, and `sketch` for distinct views;
        `exact=False` gives a distinct view its sketch alone.
        """
        from pyspark.sql import functions as F

        extra_keys = list(extra_keys)  # read twice below
        size = GRANULARITIES[granularity]
        bucket = event_bucket(size).alias("event_bucket")
        groups = [*[self.column_of(k).alias(k) for k in self.keys], bucket, *[F.col(k) for k in extra_keys]]
        selected = self.filtered(events).where(_keys_present(self))
        if self.aggregation != "distinct" or not exact:
            return selected.groupBy(*groups).agg(*self._aggregates())
        # countDistinct beside the sketch would group by the counted column first and build a sketch
        # per (cell, value); the distinct (cell, value) rows give the same exact count (a missing
        # value counts for nothing) and the same sketch registers, one sketch per cell, at a
        # fraction of the cost. The sketch is then taken through a union: built by updates, its own
        # estimate (HIP) would depend on the order Spark fed it the values; a union's comes from the
        # registers alone, so the same events answer the same however the work was split.
        names = [*self.keys, "event_bucket", *extra_keys]
        value = F.col(_DISTINCT_VALUE)
        pairs = selected.select(*groups, self.distinct_column().alias(_DISTINCT_VALUE)).distinct()
        cells = pairs.groupBy(*names).agg(
            F.count(value).alias("value"), F.hll_sketch_agg(value, HLL_LG_K).alias(_DISTINCT_VALUE)
        )
        return cells.select(*names, "value", F.hll_union(_DISTINCT_VALUE, _DISTINCT_VALUE).alias("sketch"))


def _check_choices(view: View) -> None:
    """The aggregation and layout are among their values (a type checker's Literal is not checked at
    run time), and a filter is text (empty: none, as None): the layers each read them their own way."""
    for name, choices in (("aggregation", AGGREGATIONS), ("layout", LAYOUTS)):
        value = getattr(view, name)
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"view {view.name}: {name} must be one of {list(choices)}, got {value!r:.100}")
    if view.where is not None and not (isinstance(view.where, str) and (view.where.strip() or not view.where)):
        raise ValueError(f"view {view.name}: where must be a Spark SQL predicate or None, got {view.where!r:.100}")


CELL_DDL = (
    "view STRING, granularity STRING, key ARRAY<STRING>, event_bucket BIGINT, measure BIGINT, distinct_value STRING"
)


# The label of cells aggregated once for every view that has them (cell_groups): never a view's name,
# an identifier, which holds no `:`.
SHARED_CELLS_PREFIX = "cells:"


def cell_groups(views: Iterable[View], shared: bool) -> dict[str, tuple[View, ...]]:
    """The views by the label the speed layer aggregates their cells under. `shared`: one label for
    all views with the same cells (View.cells_fingerprint), so page_views and top_pages, which
    differ only in how they are stored, are counted once; the label names no view, so it stays the
    same when one of them is added or retired. Otherwise each view's own name (the labels of a
    checkpoint made before cells were shared: its state is keyed by them)."""
    groups: dict[str, tuple[View, ...]] = {}
    for view in views:
        label = f"{SHARED_CELLS_PREFIX}{view.cells_fingerprint}" if shared else view.name
        groups[label] = (*groups.get(label, ()), view)
    return groups


def total_filter(where: str) -> Column:
    """A view's filter as both layers judge an event by it: an event on which Spark fails to
    evaluate it (text cast to a number, a division by zero, in a branch or on a value the filter
    check's probes did not reach: definitions/view_filters.py) is not in the view, in both layers
    alike, instead of stopping the layer reading it at every restart (Spark's TryEval, which its
    try_ functions are made of, around the whole condition). Built in the active session."""
    from pyspark.sql import Column, SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise RuntimeError("a view's filter is built in a Spark session: none is active")
    jvm = spark._jvm
    assert jvm is not None
    parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(where)
    total = jvm.org.apache.spark.sql.catalyst.expressions.TryEval(parsed)
    return Column(jvm.org.apache.spark.sql.Column(jvm.org.apache.spark.sql.classic.ExpressionColumnNode.apply(total)))


def cells(view: View, label: str | None = None) -> list[Column]:
    """The view's cells of one event, one per granularity, as structs (CELL_DDL) whose `view` is
    `label` (default: the view's name); null when the event is not in the view. The speed layer
    explodes the cells of every view and aggregates them all in one stateful query: count →
    count(1), sum → sum(measure), distinct → a sketch of distinct_value — the same aggregations
    `View.compute` derives for the batch layer."""
    from pyspark.sql import functions as F

    in_view = _keys_present(view)
    if view.where:
        in_view = in_view & total_filter(view.where)
    out = []
    for granularity in view.granularities:
        size = GRANULARITIES[granularity]
        cell = F.struct(
            F.lit(view.name if label is None else label).alias("view"),
            F.lit(granularity).alias("granularity"),
            F.array(*[view.column_of(k).cast("string") for k in view.keys]).alias("key"),
            event_bucket(size).alias("event_bucket"),
            (
                view.column_of(view.measured_column).cast("bigint")
                if view.aggregation == "sum"
                else F.lit(None).cast("bigint")
            ).alias("measure"),
            (view.distinct_column() if view.aggregation == "distinct" else F.lit(None).cast("string")).alias(
                "distinct_value"
            ),
        )
        out.append(F.when(in_view, cell))
    return out


def read_columns(views: Iterable[View], events: DataFrame) -> list[str]:
    """The columns of `events` that `views` read, in the frame's order: event_time, their keys and
    measured columns, schema_version where a default stands in for a field, and what their filters
    name, resolved by Spark's analyzer as `compute` will resolve them (any case, backticks, `*`)."""
    read = {"event_time"}
    for view in views:
        read.update(view.keys, [view.column] if view.column else [], ["schema_version"] if view.defaults else [])
        if view.where:
            condition = view.filtered(events)._jdf.queryExecution().analyzed().condition()
            attributes = condition.references().toSeq()
            read.update(attributes.apply(i).name() for i in range(attributes.size()))
    folded = {name.lower() for name in read}
    return [c for c in events.columns if c.lower() in folded]


def view_names(text: str) -> list[str]:
    """A command line's comma-separated view names (an argparse type): an empty list or an empty
    name is refused, since the absence of --views means every view (a full run)."""
    import argparse

    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise argparse.ArgumentTypeError("names no view; leave --views out to recompute every view")
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} holds an empty view name")
    return names


def key_text(values) -> str:
    """A view key as text (the realtime store's partition key): a compact JSON array of the values."""
    import json

    return json.dumps([None if v is None else str(v) for v in values], ensure_ascii=False, separators=(",", ":"))


def bucket_start(seconds: Column, size: int) -> Column:
    """The start (epoch seconds, bigint) of the `size`-second bucket holding `seconds`."""
    from pyspark.sql import functions as F

    return (F.floor(seconds / size) * size).cast("bigint")


def event_bucket(size: int) -> Column:
    """The start of the `size`-second bucket of each event's event_time."""
    from pyspark.sql import functions as F

    return bucket_start(F.unix_seconds(F.col("event_time")), size)


def _keys_present(view: View) -> Column:
    """Rows whose keys are all set (defaults applied): an event without a value for a key is not
    in the view."""
    from functools import reduce

    return reduce(lambda a, b: a & b, [view.column_of(k).isNotNull() for k in view.keys])


_FIELD_BY_NAME = {f.name: f for f in FIELDS}


def _hashed(shape: Mapping[str, Any]) -> str:
    """A view's shape (or part of it) hashed: 16 hex digits of the SHA-256 of its sorted JSON."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def _check_default(view: str, name: str, value: Any) -> None:
    known = _FIELD_BY_NAME.get(name)
    if known is None:
        raise ValueError(f"view {view}: default for an unknown event column {name!r}")
    if known.since <= 1:
        raise ValueError(
            f"view {view}: default for {name}, which every schema version has (a default stands in "
            "for a field added by a later schema_version, in older events)"
        )
    if known.kind != "string" or not isinstance(value, str) or (known.choices and value not in known.choices):
        allowed = f" among {list(known.choices)}" if known.choices else ""
        raise ValueError(f"view {view}: default for {name} must be a string{allowed}, got {value!r}")


@dataclass(frozen=True)
class Registry:
    views: tuple[View, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [v.name for v in self.views]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"views declared twice: {sorted(dupes)}")

    def __iter__(self):
        return iter(self.views)

    def __getitem__(self, name: str) -> View:
        for view in self.views:
            if view.name == name:
                return view
        raise KeyError(name)

    def names(self) -> list[str]:
        return [v.name for v in self.views]


PAGE_VIEWS = View(
    name="page_views",
    keys=("url",),
    aggregation="count",
    where="event_type = 'page_view'",
    description="page views per URL",
)
TOP_PAGES = View(
    name="top_pages",
    keys=("url",),
    aggregation="count",
    where="event_type = 'page_view'",
    layout="by_bucket",
    description="page views of every URL per bucket, stored by bucket: the top N are read from one place",
)
UNIQUE_VISITORS = View(
    name="unique_visitors",
    keys=("url",),
    aggregation="distinct",
    column="user_id",
    where="event_type = 'page_view'",
    description="distinct visitors per URL: exact in batch, HyperLogLog sketches unioned across layers",
)
# The documented example of a user-added view (docs/views.md): nothing but this declaration is
# needed for it to be computed by both layers, stored, served and reported.
PAGE_VIEWS_BY_COUNTRY_DEVICE = View(
    name="page_views_by_country_device",
    keys=("country", "device"),
    aggregation="count",
    where="event_type = 'page_view'",
    granularities=("hour", "day"),
    description="page views per country and device class",
)

# The documented example of a view on a field added by schema_version 2 (docs/events.md): events
# from before version 2 carry no channel and all came from the web site.
PAGE_VIEWS_BY_CHANNEL = View(
    name="page_views_by_channel",
    keys=("channel",),
    aggregation="count",
    where="event_type = 'page_view'",
    granularities=("hour", "day"),
    defaults={"channel": "web"},
    description="page views per channel; events older than schema_version 2 count as web",
)

BUILT_IN = Registry((PAGE_VIEWS, UNIQUE_VISITORS, TOP_PAGES, PAGE_VIEWS_BY_COUNTRY_DEVICE, PAGE_VIEWS_BY_CHANNEL))
