"""Replay marks on HDFS: which views `lambdactl replay` is rebuilding, from when.

While a view's realtime rows are deleted and rewritten from Kafka, its merged answers would be
short; the mark makes the view `replaying` (stores.view_lifecycle), so the API refuses its queries
with the reason (409) instead. One file per view beside the speed layer's checkpoint,
`<checkpoint_dir>-replays/<view>.json` = `{"from_ms": F, "started_ms": T}`, created only if absent
(HDFS create without overwrite): two replays of one view cannot both hold it. A replay killed half-way
leaves its mark, and the view stays refused until a replay of it completes (`--resume`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from definitions.settings import Settings


@dataclass(frozen=True)
class ReplayMark:
    view: str
    from_ms: int
    started_ms: int


class ReplayMarked(RuntimeError):
    """Another replay of the view holds its mark (or one was interrupted)."""


def marks_dir(settings: Settings) -> str:
    return f"{settings.speed.checkpoint_dir.rstrip('/')}-replays"


def read_marks(settings: Settings) -> dict[str, ReplayMark]:
    """Every view's replay mark. Raises WebHdfsError when HDFS cannot be read."""
    from stores.webhdfs import WebHdfs

    out: dict[str, ReplayMark] = {}
    with WebHdfs(settings) as fs:
        for name in fs.list(marks_dir(settings)):
            if not name.endswith(".json"):
                continue
            data = fs.read(f"{marks_dir(settings)}/{name}")
            if data is None:  # unmarked between the listing and the read
                continue
            doc = json.loads(data)
            view = name[: -len(".json")]
            out[view] = ReplayMark(view, int(doc["from_ms"]), int(doc["started_ms"]))
    return out


def mark(settings: Settings, view: str, from_ms: int, started_ms: int, take_over: bool = False) -> None:
    """Claim the view's mark; ReplayMarked when it is held and `take_over` is False."""
    from stores.webhdfs import WebHdfs, WebHdfsError

    path = f"{marks_dir(settings)}/{view}.json"
    data = json.dumps({"from_ms": from_ms, "started_ms": started_ms}).encode()
    with WebHdfs(settings) as fs:
        fs.mkdirs(marks_dir(settings))
        try:
            fs.write(path, data, overwrite=take_over)
        except WebHdfsError:
            held = fs.read(path)
            if held is None or take_over:
                raise
            raise ReplayMarked(
                f"a replay of {view} holds its mark ({held.decode(errors='replace')[:200]}): it is running, or "
                "it was interrupted; when none runs, `lambdactl replay --resume` takes over"
            ) from None


def unmark(settings: Settings, view: str) -> None:
    from stores.webhdfs import WebHdfs

    with WebHdfs(settings) as fs:
        fs.delete(f"{marks_dir(settings)}/{view}.json")
