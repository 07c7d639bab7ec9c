"""Small third-party-style store adapters for the registry tests (no services): each records how it
was constructed and what it was asked, so a test can name one by dotted path in the settings
(`tests.unit.stores.sample_adapters.<Class>`) and check that the platform built and used it."""

from __future__ import annotations

from typing import Any

# Every adapter made since the last `CREATED.clear()`, in order.
CREATED: list[Any] = []


class _Recorded:
    def __init__(self, settings: Any, *args: Any, **kwargs: Any) -> None:
        self.settings = settings
        self.args = args
        self.kwargs = kwargs
        self.calls: list[tuple[str, tuple]] = []
        self.closed = False
        CREATED.append(self)

    def close(self) -> None:
        self.closed = True


class RecordingBatchViews(_Recorded):
    """Batch views of an empty store: no pointer yet."""

    def pointer_columns(self) -> dict[bytes, bytes]:
        self.calls.append(("pointer_columns", ()))
        return {}

    def series(self, *args: Any) -> dict[int, tuple[int, bytes | None]]:
        self.calls.append(("series", args))
        return {}

    def totals(self, *args: Any) -> dict[str, int]:
        self.calls.append(("totals", args))
        return {}


class RecordingRealtimeReader(_Recorded):
    def series(self, *args: Any, **kwargs: Any) -> dict:
        self.calls.append(("series", args))
        return {}

    def bucket(self, *args: Any) -> dict:
        self.calls.append(("bucket", args))
        return {}


class RecordingRealtimeWriter(_Recorded):
    def write(self, by_key, by_bucket, timestamp_us=None) -> None:
        self.calls.append(("write", (list(by_key), list(by_bucket))))


class EmptyVersions(_Recorded):
    """A version store before the first batch run: no pointer, no runs."""

    def pointer(self) -> None:
        self.calls.append(("pointer", ()))
        return None

    def runs(self) -> dict[int, dict]:
        self.calls.append(("runs", ()))
        return {}

    # The rest of the versions interface (stores/adapters.py): never reached by the tests using it.
    def allocate_version(self, *args: Any) -> int:
        raise NotImplementedError

    def record_run(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def record_run_if(self, *args: Any, **kwargs: Any) -> bool:
        raise NotImplementedError

    def retain(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def swap(self, *args: Any) -> None:
        raise NotImplementedError


def not_a_class(settings: Any) -> None:
    """Named by a test as an adapter: a function, not a class."""


NOT_A_CLASS_EITHER = "stores.realtime.RealtimeReader"


class FileRealtimeWriter:
    """A realtime writer that appends each row it is given, with its process id, to a JSON-lines
    file in the settings' `state_dir`: what a test reads when the writes happen in other processes
    (Spark's Python workers)."""

    def __init__(self, settings: Any) -> None:
        import os

        self.path = settings.state_dir / f"writes-{os.getpid()}.jsonl"

    def write(self, by_key, by_bucket, timestamp_us=None) -> None:
        import dataclasses
        import json
        import os

        with self.path.open("a") as out:
            for table, rows in (("by_key", by_key), ("by_bucket", by_bucket)):
                for row in rows:
                    fields = dataclasses.asdict(row)
                    fields["sketch"] = None if row.sketch is None else row.sketch.hex()
                    record = {"pid": os.getpid(), "table": table, "timestamp_us": timestamp_us, **fields}
                    out.write(json.dumps(record) + "\n")

    def close(self) -> None:
        pass
