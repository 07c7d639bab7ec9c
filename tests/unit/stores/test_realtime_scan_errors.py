"""What a realtime read failure puts into a report: the reports are public (no token), so the
driver's text, which names replicas by address, must not reach them."""

from __future__ import annotations

from cassandra import ConsistencyLevel, ReadFailure, ReadTimeout

from stores.realtime_scan import _short

_UNKNOWN = (
    'Error from server: code=1300 [Replica(s) failed to execute read] message="Operation failed - '
    "received 0 responses and 1 failures: UNKNOWN from /172.18.0.4:7000\" info={'consistency': "
    "'ONE', 'required_responses': 1, 'received_responses': 0, 'failures': 1, "
    "'error_code_map': {'172.18.0.4': '0x0000'}}"
)


def test_a_replica_failure_names_no_address():
    text = _short(ReadFailure(_UNKNOWN, consistency=ConsistencyLevel.ONE, failures=1, error_code_map={"172.18.0.4": 0}))
    assert "172.18" not in text and "7000" not in text
    assert text.startswith("ReadFailure")


def test_the_known_reasons_are_named():
    tombstones = ReadFailure("... READ_TOO_MANY_TOMBSTONES from /10.0.0.9:7000 ...")
    assert _short(tombstones) == "ReadFailure: READ_TOO_MANY_TOMBSTONES"
    assert _short(ReadTimeout("Operation timed out - received only 0 responses.")) == (
        "ReadTimeout: Operation timed out"
    )


def test_an_unknown_failure_code_is_named_without_its_message():
    text = _short(ReadFailure("anything at /10.1.2.3:7000", error_code_map={"10.1.2.3": 0x0001}))
    assert "10.1.2.3" not in text
    assert "READ_TOO_MANY_TOMBSTONES" in text
