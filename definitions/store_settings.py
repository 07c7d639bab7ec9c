"""Which store adapter plays each role: the `stores` section of the settings.

Each role takes a built-in short name (the adapters in `stores/`) or the dotted path
`package.module.ClassName` of a class of your own, e.g. ``LAMBDA_STORES__REALTIME_READER=
my_company.lambda_stores.ScyllaReader`` or, in the TOML file, ``[stores] realtime_reader = "…"``.
The settings check only the spelling here (this package imports nothing of the project);
stores.registry imports and builds the class, and says which setting named it when it cannot.
What a class must provide for its role: stores/adapters.py and docs/architecture.md.
"""

from __future__ import annotations

import keyword
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

Role = Literal["batch_views", "realtime_reader", "realtime_writer", "versions"]
ROLES: tuple[Role, ...] = ("batch_views", "realtime_reader", "realtime_writer", "versions")

# Per role, the built-in short names and the classes they stand for (imported only when chosen).
BUILTIN_ADAPTERS: dict[Role, dict[str, str]] = {
    "batch_views": {"hbase": "stores.batch_reader.BatchViewReader"},
    "realtime_reader": {"cassandra": "stores.realtime.RealtimeReader"},
    "realtime_writer": {"cassandra": "stores.realtime.RealtimeWriter"},
    "versions": {"hbase": "stores.batch_views.VersionStore"},
}


def is_dotted_path(value: str) -> bool:
    """`package.module.ClassName`: two or more Python identifiers joined by dots (no keyword)."""
    parts = value.split(".")
    return len(parts) >= 2 and all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


class StoresSettings(BaseModel):
    """The adapter of each role: a short name of `BUILTIN_ADAPTERS`, or a dotted path to a class."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    # The serving layer's reader of the batch views and of the pointer.
    batch_views: str = "hbase"
    # The serving layer's reader of the realtime views.
    realtime_reader: str = "cassandra"
    # The speed layer's writer of the realtime views.
    realtime_writer: str = "cassandra"
    # Batch versions, run records and the pointer (the batch layer, reports, `lambdactl batch`).
    versions: str = "hbase"

    @field_validator(*ROLES)
    @classmethod
    def _short_name_or_dotted_path(cls, value: str, info: ValidationInfo) -> str:
        role: Role = info.field_name  # type: ignore[assignment]
        known = BUILTIN_ADAPTERS[role]
        if value in known or is_dotted_path(value):
            return value
        raise ValueError(
            f"stores.{role} is {value!r}: neither a built-in adapter ({', '.join(sorted(known))}) nor a "
            "dotted path package.module.ClassName"
        )
