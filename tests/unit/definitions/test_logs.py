"""One logging set-up: every line names the component, and the batch run and version once bound."""

from __future__ import annotations

import io
import json
import logging

import pytest

from definitions import logs


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    # The handler configure() installed last goes back with the handlers: an earlier test's (a CLI
    # test's main()) stayed beside this file's when only the list was restored.
    handlers, level, installed = list(root.handlers), root.level, logs._installed
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._installed = installed
    logs.bind(run=None, version=None)


def test_text_lines_name_the_component_and_the_bound_run():
    out = io.StringIO()
    logs.configure("batch", "INFO", "text", stream=out)
    logging.getLogger("lambda.batch").info("planning %s", "v7")
    logs.bind(run="20261123T220000-abc123", version=7)
    logging.getLogger("lambda.batch").warning("swapped")
    first, second = out.getvalue().splitlines()
    assert first.endswith(" INFO batch lambda.batch run=- version=-: planning v7") and first[19] == "Z"
    assert second.endswith(" WARNING batch lambda.batch run=20261123T220000-abc123 version=7: swapped")


def test_json_lines_are_one_object_each():
    out = io.StringIO()
    logs.configure("speed-layer", "INFO", "json", stream=out)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("lambda.speed").exception("batch %d failed", 3)
    doc = json.loads(out.getvalue().splitlines()[0])
    assert {k: doc[k] for k in ("level", "component", "logger", "run", "version", "message")} == {
        "level": "ERROR",
        "component": "speed-layer",
        "logger": "lambda.speed",
        "run": "-",
        "version": "-",
        "message": "batch 3 failed",
    }
    assert "ValueError: boom" in doc["exception"]


def test_configure_replaces_the_handler_and_quiets_the_drivers():
    out = io.StringIO()
    logs.configure("api", "INFO", "text", stream=io.StringIO())
    logs.configure("api", "INFO", "text", stream=out)
    ours = [h for h in logging.getLogger().handlers if any(isinstance(f, logs._Context) for f in h.filters)]
    assert len(ours) == 1
    logging.getLogger("kafka.conn").info("chatter")
    logging.getLogger("cassandra.cluster").warning("a real problem")
    assert "chatter" not in out.getvalue() and "a real problem" in out.getvalue()


def test_the_level_and_format_come_from_settings():
    from definitions.settings import Settings

    out = io.StringIO()
    settings = Settings(logging={"level": "WARNING", "format": "json"})
    logs.configure_from("archiver", settings, stream=out)
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    assert [json.loads(line)["message"] for line in out.getvalue().splitlines()] == ["shown"]


def test_a_warning_repeated_past_its_budget_is_counted_then_said_and_other_lines_go_on(monkeypatch):
    """A client that makes every request fail wrote two or three warnings per request, without bound:
    the log rotated away what came before."""
    clock = [1_000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    logs.configure("api", "INFO", "text", stream=out)
    log = logging.getLogger("lambda.api")
    for i in range(logs.REPEATS_PER_WINDOW + 500):
        log.warning("GET %s failed: cassandra cannot be read", f"/api/v1/views/page_views?n={i}")
        log.info("request %d", i)  # progress lines are never held back
    log.warning("another warning")
    lines = out.getvalue().splitlines()
    failed = [line for line in lines if "failed: cassandra" in line]
    assert len(failed) == logs.REPEATS_PER_WINDOW
    assert sum("INFO" in line for line in lines) == logs.REPEATS_PER_WINDOW + 500
    assert lines[-1].endswith("another warning")
    clock[0] += logs.REPEAT_WINDOW_S
    log.warning("GET %s failed: cassandra cannot be read", "/x")
    assert (
        out.getvalue()
        .splitlines()[-1]
        .endswith("GET /x failed: cassandra cannot be read [500 more like this in 60s were not logged]")
    )


def test_an_info_line_a_client_causes_at_will_is_held_back_like_a_warning(monkeypatch):
    out = io.StringIO()
    logs.configure("api", "INFO", "text", stream=out)
    log = logging.getLogger("lambda.api")
    for _ in range(logs.REPEATS_PER_WINDOW * 3):
        log.info("refused a request head (%d): %s", 400, "malformed", extra=logs.REPEATS)
    assert len(out.getvalue().splitlines()) == logs.REPEATS_PER_WINDOW


def test_other_processes_write_every_warning_each_naming_something():
    out = io.StringIO()
    logs.configure("archiver", "INFO", "text", stream=out)
    for partition in range(3 * logs.REPEATS_PER_WINDOW):
        logging.getLogger("lambda.archiver").warning("running past records Kafka deleted: partition %d", partition)
    assert len(out.getvalue().splitlines()) == 3 * logs.REPEATS_PER_WINDOW


def test_debug_logging_writes_no_line_that_carries_a_secret():
    """`lambdactl -v` (DEBUG) turned py4j and HdfsCLI up too: py4j logs every command it sends the
    JVM (spark.authenticate.secret, a Kafka SASL password), HdfsCLI its client's address (WebHDFS
    credentials); both went into the job's log. The other drivers' debug lines still come."""
    out = io.StringIO()
    logs.configure("speed-layer", "DEBUG", "text", stream=out)
    logging.getLogger("py4j.clientserver").debug("Command to send: c\nspark.authenticate.secret\ns3cr3t-py4j\ne\n")
    logging.getLogger("hdfs.client").info("Instantiated <InsecureClient(url='https://lambda:s3cr3t-hdfs@nn:9870')>.")
    logging.getLogger("kafka.conn").debug("connecting to broker")
    text = out.getvalue()
    assert "s3cr3t" not in text, text
    assert "connecting to broker" in text
