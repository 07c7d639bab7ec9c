"""The batch part of an answer: the pointer and a view table's cells, read from HBase through the
pooled batch-view reader (setting `stores.batch_views`). A table's reads are kept per version and
run (serving_layer.part_cache): a batch table never changes once it serves. HBase unreadable, after
the reader's own retry, is StoreUnavailable naming it."""

from __future__ import annotations

from collections.abc import Sequence

from definitions.settings import Settings
from definitions.views import View
from serving_layer.merge import BatchCell, RankedTotals
from serving_layer.part_cache import PartCache
from serving_layer.unavailable import StoreUnavailable
from stores import registry
from stores.adapters import ReadTooLarge
from stores.batch_reader import BatchViewsUnavailable
from stores.batch_views import Pointer
from stores.pointer import ViewSource


class BatchPart:
    """Holds the pooled batch-view reader (`reader`) and the cache of what it read (`cache`)."""

    def __init__(self, settings: Settings) -> None:
        self.reader = registry.batch_view_reader(settings, settings.api.hbase_pool_size, settings.api.hbase_pool_wait_s)
        self.cache = PartCache(
            settings.api.batch_cache_mib * 2**20, refusals=(ReadTooLarge,), setting="api.batch_cache_mib"
        )

    def pointer(self) -> Pointer | None:
        """The pointer as stored now; None before the first batch run."""
        data = _hbase(self.reader.pointer_columns)
        try:
            return Pointer.from_columns(data) if data else None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # the row is there but is no pointer
            raise StoreUnavailable("hbase", f"the batch views' pointer cannot be read: {exc}") from None

    def series(
        self, source: ViewSource, view: View, granularity: str, keys: Sequence[str], buckets: list[int]
    ) -> dict[int, BatchCell]:
        """The cells of one key of `view` in `buckets` (ascending), from the table `source` names."""
        if source.table is None or not buckets:
            return {}
        table = source.table

        def read() -> dict[int, BatchCell]:
            cells = _hbase(self.reader.series, table, view, granularity, keys, buckets[0], buckets[-1])
            return {bucket: BatchCell(value, sketch) for bucket, (value, sketch) in cells.items()}

        key = ("series", table, source.run_id, view.name, granularity, tuple(keys), buckets[0], buckets[-1])
        return self.cache.get(key, read)

    def top(self, source: ViewSource, view: View, granularity: str, buckets: list[int]) -> RankedTotals:
        """Every key's total of `view` over `buckets`, ranked, from the table `source` names."""
        if source.table is None or not buckets:
            return RankedTotals.of({})
        table = source.table
        key = ("totals", table, source.run_id, view.name, granularity, buckets[0], buckets[-1])
        return self.cache.get(
            key,
            lambda: RankedTotals.of(_hbase(self.reader.totals, table, view, granularity, buckets[0], buckets[-1])),
        )


def _hbase(read, *args):
    try:
        return read(*args)
    except BatchViewsUnavailable as exc:
        raise StoreUnavailable("hbase", exc.detail) from exc
