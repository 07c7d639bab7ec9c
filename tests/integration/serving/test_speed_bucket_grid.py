"""The serving layer checks the batch cutoff against the ingest buckets the speed layer really uses
(the marker beside its checkpoint on real HDFS), not against its own setting: a misconfigured
service never merges across a split bucket, and never refuses a cutoff the speed layer can serve."""

from __future__ import annotations

import json

import pytest

from serving_layer.service import ServingLayer, StoreUnavailable
from stores.batch_views import VersionStore
from stores.checkpoints import marker_path, read_bucket_s
from stores.webhdfs import WebHdfs


@pytest.fixture
def cutoff_s(served_version) -> int:
    return served_version.cutoff_ms // 1000


def off_grid(cutoff_s: int) -> int:
    """A bucket size the cutoff is not a multiple of."""
    return next(size for size in (7, 11, 13, 17, 19, 23) if cutoff_s % size)


def serving(settings, **changes) -> ServingLayer:
    speed = settings.speed.model_copy(update={k: v for k, v in changes.items() if k == "checkpoint_dir"})
    top = {k: v for k, v in changes.items() if k != "checkpoint_dir"}
    return ServingLayer(settings.model_copy(update={**top, "speed": speed}))


def test_the_running_speed_layers_bucket_is_read_from_hdfs(settings, stack):
    assert read_bucket_s(settings) == settings.ingest_bucket_s
    assert serving(settings).speed_bucket_s() == settings.ingest_bucket_s


def test_a_service_configured_with_another_bucket_follows_the_speed_layer(settings, cutoff_s):
    size = off_grid(cutoff_s)
    service = serving(settings, ingest_bucket_s=size)
    try:
        assert service.speed_bucket_s() == settings.ingest_bucket_s
        assert service.pointer().cutoff_ms == cutoff_s * 1000
    finally:
        service.close()


def test_a_cutoff_inside_the_speed_layers_buckets_is_refused(settings, cutoff_s, unique):
    size = off_grid(cutoff_s)
    checkpoint = f"/lambda/test/checkpoint-{unique}"
    service = serving(settings, checkpoint_dir=checkpoint)
    with WebHdfs(settings) as fs:
        fs.write(marker_path(service.settings), json.dumps({"ingest_bucket_s": size}).encode())
    try:
        pointer = service.pointer()  # read: each view's queries are refused, not every answer
        assert pointer is not None
        view = next(v for v in service.views if v.name == "page_views")
        start = cutoff_s - cutoff_s % 3600 - 3600
        with pytest.raises(StoreUnavailable) as refused:
            service.series(view, {"url": "/"}, start, start + 7200, "hour")
        assert refused.value.component == "hbase"
        assert f"speed layer's {size}s ingest buckets" in refused.value.detail
    finally:
        service.close()
        with WebHdfs(settings) as fs:
            fs.delete(marker_path(service.settings))


def test_before_the_speed_layers_first_start_the_own_setting_applies(settings, cutoff_s, unique):
    service = serving(settings, checkpoint_dir=f"/lambda/test/never-started-{unique}")
    try:
        assert service.speed_bucket_s() == settings.ingest_bucket_s
        assert service.pointer().cutoff_ms == cutoff_s * 1000
    finally:
        service.close()


def test_a_batch_run_with_another_bucket_than_the_speed_layers_is_refused_before_it_computes(settings, stack):
    from batch_layer.job import CutoffError, choose_cutoff

    other = settings.model_copy(update={"ingest_bucket_s": settings.ingest_bucket_s * 2})
    with pytest.raises(CutoffError) as refused:
        choose_cutoff(other, None, VersionStore(settings).pointer())
    assert (
        f"the speed layer keys realtime rows by {settings.ingest_bucket_s}s ingest buckets, this run's settings "
        f"say ingest_bucket_s={settings.ingest_bucket_s * 2}"
    ) in str(refused.value)
