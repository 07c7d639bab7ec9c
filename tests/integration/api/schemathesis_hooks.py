"""A Schemathesis check loaded by tests/integration/api/test_api_schemathesis.py (SCHEMATHESIS_HOOKS).

Some rules cannot be stated in an OpenAPI document: a query's start must be before its end and its
window within a span relative to now; an event's time must lie within a span relative to now, its
date must exist, its JSON must fit a record. Schema-valid input can break them, so the run lets
the view routes and POST /api/v1/events answer such input 422 (positive_data_acceptance). This
check keeps that allowance narrow: a 422 to schema-valid input must name one of those rules.
"""

from __future__ import annotations

import schemathesis

# What the API says when schema-valid input breaks a rule the schema cannot state.
RULES_OUTSIDE_THE_SCHEMA = (
    "outside the times this API answers for",  # window relative to now (api/window.py)
    "must be before end",
    "range too large",  # buckets between start and end
    "no such date",  # 2026-02-30
    "absurd event_time",  # event time relative to now (definitions/events.py)
    "not a valid time",  # event_time of the documented shape but no such date
    "oversized",  # the event's JSON is over settings.events.max_record_bytes
)


def _breaks_only_unstatable_rules(body: object) -> bool:
    if not isinstance(body, dict):
        return False
    errors = body.get("errors") or []
    reasons = [e.get("error") or e.get("msg") or "" for e in errors if isinstance(e, dict)]
    if any("index" in e for e in errors if isinstance(e, dict)):  # POST /api/v1/events: every record
        return all(any(rule in reason for rule in RULES_OUTSIDE_THE_SCHEMA) for reason in reasons)
    detail = str(body.get("detail", ""))
    return any(rule in detail for rule in RULES_OUTSIDE_THE_SCHEMA)


@schemathesis.check
def schema_valid_input_rejected_only_for_rules_outside_the_schema(ctx, response, case) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not _breaks_only_unstatable_rules(body):
        raise AssertionError(
            f"schema-valid input rejected for a rule the OpenAPI document could state: {response.text[:500]}"
        )
    return None
