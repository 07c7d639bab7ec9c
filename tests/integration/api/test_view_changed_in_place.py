"""A view whose declaration differs from what the speed layer maintains, when the speed layer recorded
only the definition's fingerprint (a marker written by an older version), cannot be served by its old
definition while the new one is built: it is refused everywhere it could mix the two (views apply, a
batch run, the API), never served mixed; the other views keep answering. The speed layer's marker on
HDFS is made to hold such a record, and restored after. (A recorded definition is switched instead:
test_view_definition_change.py.)"""

from __future__ import annotations

import time

from definitions.views import PAGE_VIEWS
from lambdactl.views import reload_api
from stores.checkpoints import read_marker, write_marker
from tests.integration.api.test_end_to_end import merged
from tests.support.cli import lambdactl


def test_a_view_changed_in_place_is_refused_not_mixed(settings, stack):
    marker = read_marker(settings)
    assert marker is not None and marker.definitions is not None, "the speed layer records its definitions"
    assert marker.definitions["page_views"] == PAGE_VIEWS.fingerprint
    assert marker.declarations is not None and "page_views" in marker.declarations, "and the definitions themselves"
    write_marker(
        settings,
        marker.started_ms,
        marker.views,
        dict(marker.definitions, page_views="0" * 16),
        origin=marker.origin,
        dedupe=marker.dedupe,  # the operator the stack's checkpoint state was made by
        cells=marker.cells,
    )
    now = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime())
    try:
        applied = lambdactl(settings, "views", "apply")
        assert applied.returncode == 2, applied.stderr[-2000:]
        assert (
            "the definition of page_views differs" in applied.stderr
            and "recorded only its fingerprint" in applied.stderr
        )

        batch = lambdactl(settings, "batch", "--views", "page_views", "--force", "--json")
        assert batch.returncode != 0 and "the definition of page_views differs" in batch.stderr, batch.stderr[-2000:]

        reload_api(settings)
        answer = merged(settings, "/", now, now.replace(":00:00Z", ":59:59Z"))
        assert answer.status_code == 409 and "recorded only its fingerprint" in answer.json()["detail"], answer.text
        assert merged(settings, "/", now, now.replace(":00:00Z", ":59:59Z"), view="unique_visitors").status_code == 200
    finally:
        write_marker(
            settings,
            marker.started_ms,
            marker.views,
            marker.definitions,
            marker.declarations,
            origin=marker.origin,
            dedupe=marker.dedupe,
            cells=marker.cells,
        )
        reload_api(settings)
    assert merged(settings, "/", now, now.replace(":00:00Z", ":59:59Z")).status_code == 200
