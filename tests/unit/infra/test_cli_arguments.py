"""Arguments a command cannot run with are refused before anything starts, exit 2, saying which:
`generate --count -1` came out as 'generate failed … (is the stack up?)', exit 1; `demo --count 0`
started the whole stack, streamed nothing and crashed on an empty window."""

from __future__ import annotations

import pytest

from lambdactl.cli import main
from tests.support.shell import plain_shell


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--count", "-1"], "must not be negative"),
        (["--late-fraction", "7"], "between 0 and 1"),
        (["--pages", "0"], "at least 1"),
        (["--pages", "1000000000"], "at most"),
        (["--rate", "1e-300"], "at least 0.001"),
        (["--late-fraction", "0.1", "--late-max", "1e12"], "before 1970"),
        (["--start", "2020-01-01T00:00:00Z"], "give span_s too"),
    ],
)
def test_generate_with_arguments_it_cannot_run_with_exits_2_naming_them(
    tmp_path, monkeypatch, caplog, arguments, words
):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("ingest.generator.produce", lambda *a, **k: pytest.fail("nothing is sent"))
    assert main(["generate", *arguments]) == 2
    assert "generate refused, nothing sent" in caplog.text and words in caplog.text
    assert "is the stack up" not in caplog.text


def test_generate_asked_to_write_what_was_sent_and_the_truth_to_one_file_sends_nothing(tmp_path, monkeypatch, caplog):
    """The truth was written over the record of what was sent (its partitions and offsets)."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("ingest.generator.produce", lambda *a, **k: pytest.fail("nothing is sent"))
    same = tmp_path / "out.jsonl"
    linked = tmp_path / "sub" / ".." / "out.jsonl"
    (tmp_path / "sub").mkdir()
    assert main(["generate", "--count", "1", "--events-out", str(same), "--truth-out", str(linked)]) == 2
    assert "--events-out and --truth-out name one file" in caplog.text


def test_a_ground_truth_the_contract_contradicts_is_not_written_and_says_why(tmp_path, monkeypatch, caplog):
    """The records are sent; a record sent as an event that the platform's limits refuse leaves no
    truth file (it would have left the event out, as the platform does) and a one-line error."""
    import time

    from ingest.generator import SendReport, SentRecord

    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("ingest.generator.produce", lambda *a, **k: SendReport(sent=1, by_kind={"valid": 1}))
    refused = SentRecord("valid", "e-1", 0, 7, int(time.time() * 1000), '{"event_id": "e-1"}')
    monkeypatch.setattr("ingest.generator.read_sent", lambda path: [refused])
    truth = tmp_path / "truth.json"
    assert main(["generate", "--count", "1", "--truth-out", str(truth)]) == 1
    assert "no ground truth written" in caplog.text and "offset 7, sent as valid, is refused" in caplog.text
    assert not truth.exists()


@pytest.mark.parametrize("arguments", [["--count", "0"], ["--count", "-5"], ["--rate", "0"], ["--count", "x"]])
def test_demo_with_arguments_it_cannot_run_with_is_refused_before_the_stack_starts(tmp_path, monkeypatch, arguments):
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("infra.stack.Stack.up", lambda *a, **k: pytest.fail("the stack was started"))
    with pytest.raises(SystemExit) as refused:
        main(["demo", *arguments])
    assert refused.value.code == 2


def test_a_demo_asked_for_no_records_is_refused_before_the_stack_starts(settings, monkeypatch):
    from lambdactl.demo import run_demo

    monkeypatch.setattr("infra.stack.Stack.up", lambda *a, **k: pytest.fail("the stack was started"))
    assert run_demo(settings, count=0) == 2


def test_a_demo_paced_slower_than_the_generator_goes_is_refused_before_the_stack_starts(tmp_path, monkeypatch, capsys):
    """--rate 1e-300: the stack started, then the sender's sleep overflowed (a traceback, then KeyError)."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("infra.stack.Stack.up", lambda *a, **k: pytest.fail("the stack was started"))
    assert main(["demo", "--rate", "1e-300"]) == 2
    assert "demo refused: rate must be 0 (as fast as possible) or at least 0.001" in capsys.readouterr().err


def test_a_failure_with_a_message_of_many_lines_is_said_on_one_line(tmp_path, monkeypatch, caplog):
    """The DAG shows a failed command's last line as the run's cause (its `failure_cause` XCom): a
    message of many lines (a JVM's error and its stack) left a stack frame there, not the error."""
    plain_shell(monkeypatch, tmp_path)

    def fails(*_a, **_k):
        raise RuntimeError("Kafka refused the write\n\tat org.apache.kafka.Producer.send(Producer.java:1)\n")

    monkeypatch.setattr("ingest.generator.produce", fails)
    assert main(["generate", "--count", "1"]) == 1
    said = [r.getMessage() for r in caplog.records if "generate failed" in r.getMessage()]
    assert said and "\n" not in said[0] and "Kafka refused the write at org.apache" in said[0], said


@pytest.mark.parametrize(
    "arguments",
    [
        ["--verify", "5", "--views", "page_views"],
        ["--swap", "5", "--cutoff", "2026-11-27T02:00:00Z"],
        ["--swap", "5", "--force"],
    ],
)
def test_a_step_on_a_written_version_refuses_options_it_would_ignore(tmp_path, monkeypatch, capsys, arguments):
    """`--verify` and `--swap` act on the version given, whose run chose its views and cutoff: the
    options were dropped without a word (`--swap 5 --views a` moved every view version 5 wrote)."""
    plain_shell(monkeypatch, tmp_path)
    monkeypatch.setattr("batch_layer.job.swap_version", lambda *a: pytest.fail("swapped"))
    monkeypatch.setattr("batch_layer.job.verify_version", lambda *a: pytest.fail("verified"))
    with pytest.raises(SystemExit) as exited:
        main(["batch", *arguments])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "act on the version given" in err and "Traceback" not in err


def test_report_lists_at_least_one(tmp_path, monkeypatch, capsys):
    plain_shell(monkeypatch, tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["report", "--limit", "0"])
    assert exited.value.code == 2 and "must be 1 or more" in capsys.readouterr().err
