"""A moment given to lambdactl on the command line is read when the command line is: a malformed one
exits 2 naming the option and what is wrong, before any store is asked (no service)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from lambdactl.cli import build_parser, main


@pytest.mark.parametrize(
    ("argv", "option", "words"),
    [
        (["batch", "--cutoff", "yesterday"], "--cutoff", "not an ISO 8601 time"),
        (["batch", "--plan", "--cutoff", "2026-13-01T00:00:00Z"], "--cutoff", "not an ISO 8601 time"),
        (["generate", "--start", "soon"], "--start", "not an ISO 8601 time"),
        (["generate", "--start", "9999-12-31T23:30:00-01:00"], "--start", "after 9999"),  # the year 10000 in UTC
        (["batch", "--cutoff", "9999-12-31T23:30:00-01:00"], "--cutoff", "after 9999"),
    ],
)
def test_a_malformed_time_exits_2_naming_the_option(argv, option, words, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and words in err and "Traceback" not in err


def test_a_well_formed_time_is_read_as_given():
    args = build_parser().parse_args(["batch", "--cutoff", "2026-11-27T02:00:00Z"])
    assert args.cutoff == "2026-11-27T02:00:00Z"


def test_the_start_of_generated_events_is_the_time_given_read_as_validated(monkeypatch):
    from lambdactl import generate

    args = build_parser().parse_args(["generate", "--start", " 2026-11-27T02:00:00 ", "--count", "1"])
    assert generate.generation_start(args) == datetime(2026, 11, 27, 2, 0, tzinfo=UTC)  # no zone: UTC, as validated


@pytest.mark.parametrize("views", ["", " ", ",", "page_views,", "page_views,,top_pages"])
def test_views_naming_no_view_or_an_empty_one_exit_2_instead_of_recomputing_every_view(views, capsys):
    """`--views "$V"` with V unset used to mean no --views: a full run that moved every view."""
    from batch_layer.job import main as job_main

    for parse in (lambda: build_parser().parse_args(["batch", "--views", views]), lambda: job_main(["--views", views])):
        with pytest.raises(SystemExit) as caught:
            parse()
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert "argument --views" in err and "view" in err and "Traceback" not in err


def test_views_are_read_as_a_list_of_names():
    assert build_parser().parse_args(["batch", "--views", "page_views, top_pages"]).views == ["page_views", "top_pages"]
    assert build_parser().parse_args(["batch"]).views is None


def test_logs_of_no_lines_or_a_name_that_is_no_service(tmp_path):
    from infra.errors import StackError
    from infra.process import tail_file
    from lambdactl.cli import cmd_logs

    log = tmp_path / "x.log"
    log.write_text("one\ntwo\nthree\n")
    assert tail_file(log, 0) == "" and tail_file(log, -2) == "" and tail_file(log, 2) == "two\nthree"
    args = build_parser().parse_args(["logs", "../../etc/x"])
    with pytest.raises(StackError, match="not a service name"):
        cmd_logs(None, args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argv",
    [["logs", "api", "-n", "-5"], ["logs", "api", "-n", "0"], ["logs", "api", "-f", "-n", "100000000000000000000"]],
)
def test_logs_asked_for_no_lines_or_more_than_it_shows_exits_2(argv, capsys):
    """-n -5 printed nothing; -n 10**20 with -f failed inside tail ("Value too large"), exit 1."""
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2 and "argument -n/--lines" in capsys.readouterr().err


def test_logs_shows_as_many_lines_as_asked_or_says_how_many_it_read(tmp_path):
    """-n 5000 printed 311 lines: only the last 64 KiB were read, without a word."""
    from infra.process import tail_file

    log = tmp_path / "x.log"
    width = len(f"line {0:05} " + "x" * 200 + "\n")
    log.write_text("".join(f"line {i:05} " + "x" * 200 + "\n" for i in range(6_000)))
    shown = tail_file(log, 5_000).splitlines()
    assert len(shown) == 5_000 and shown[0].startswith("line 01000") and shown[-1].startswith("line 05999")
    capped = tail_file(log, 5_000, max_bytes=100_000).splitlines()
    assert capped[0].startswith("(the last 100,000 bytes of") and len(capped) == 1 + 100_000 // width
    assert capped[-1].startswith("line 05999")
    boundary = tmp_path / "y.log"  # the cap falls where a line begins: that line is whole
    boundary.write_text("x" * 9 + "\n" + "y" * 9 + "\n")
    assert tail_file(boundary, 1, max_bytes=10) == "y" * 9
    assert tail_file(boundary, 2, max_bytes=10).splitlines()[1:] == ["y" * 9]


def test_a_service_name_longer_than_any_service_is_no_service():
    from infra.errors import StackError
    from lambdactl.cli import cmd_logs

    with pytest.raises(StackError, match="not a service name"):
        cmd_logs(None, build_parser().parse_args(["logs", "a" * 5_000]))  # type: ignore[arg-type]


def test_following_a_log_goes_on_past_its_rotation(tmp_path):
    """supervisord rotates a log by renaming it and opening a new one: `lambdactl logs -f` read on
    from the renamed file and showed nothing more, for ever, with no error."""
    import subprocess
    import threading

    from infra.process import follow_command
    from tests.support.polling import wait_for

    log = tmp_path / "api.log"
    log.write_text("before\n")
    tail = subprocess.Popen(follow_command(log, 5), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(tail.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        wait_for(lambda: "before\n" in seen, "the log's tail", timeout_s=10)
        log.rename(tmp_path / "api.log.1")
        log.write_text("after the rotation\n")
        wait_for(lambda: "after the rotation\n" in seen, "the lines of the new file", timeout_s=20)
    finally:
        tail.kill()
        tail.wait()


def test_lambdactl_logs_follow_runs_the_following_command(tmp_path, monkeypatch):
    import subprocess

    from infra.process import follow_command
    from lambdactl import cli

    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    (state / "logs" / "api.log").write_text("x\n")
    ran: list = []
    monkeypatch.setattr(subprocess, "run", lambda argv, check: ran.append(argv) or SimpleNamespace(returncode=0))
    settings = SimpleNamespace(state_dir=state)
    assert cli.cmd_logs(settings, build_parser().parse_args(["logs", "api", "-f", "-n", "7"])) == 0  # type: ignore[arg-type]
    assert ran == [follow_command(state / "logs" / "api.log", 7)]


def test_the_batch_jobs_own_entry_point_says_a_failure_on_one_line(monkeypatch, capsys, caplog):
    """`spark-submit batch_layer/job.py`: a failure the job does not name (a verification, a store
    that does not answer) is one line with exit 1, not a traceback."""
    from batch_layer import job
    from stores.batch_writer import VerificationError

    def failing(*args, **kwargs):
        raise VerificationError(
            "An error occurred while calling o12.load.\n: java.io.IOException: disk full\n\tat some.Frame(Frame.java:1)"
        )

    monkeypatch.setattr(job, "run_batch", failing)
    monkeypatch.setattr(job, "configure_from", lambda *a: None)
    with caplog.at_level("ERROR"):
        assert job.main([]) == 1
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "VerificationError: An error occurred while calling o12.load." in line, line
    assert "java.io.IOException: disk full" in line and "Frame" not in line, "the cause, no stack frame"
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, option",
    [
        (["batch", "--views", "page_views", "--views", "top_pages"], "--views"),  # only top_pages was recomputed
        (["replay", "--view", "page_views", "--view", "top_pages"], "--view"),
        (["batch", "--cutoff", "2026-11-27T02:00:00Z", "--cutoff", "2026-11-27T03:00:00Z"], "--cutoff"),
        (["generate", "--count", "5", "--count", "6"], "--count"),
        (["logs", "api", "-n", "5", "--lines", "6"], "-n/--lines"),
        (["batch", "--verify", "3", "--verify", "4"], "--verify"),  # in a group of exclusive options
    ],
)
def test_an_option_given_twice_exits_2_naming_it(argv, option, capsys):
    """The last value was taken without a word."""
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: given more than once" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv, option",
    [
        (["replay", "--view", "page_views", "--from", ""], "--from"),  # replayed from the batch cutoff
        (["replay", "--view", " "], "--view"),
        (["generate", "--topic", ""], "--topic"),  # sent to the settings' topic
        (["config", "--unset", ""], "--unset"),  # exit 0, "nothing changed"
    ],
)
def test_an_empty_value_exits_2_instead_of_meaning_the_default(argv, option, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    assert f"argument {option}: is empty (an unset variable?)" in capsys.readouterr().err


def test_reuse_without_a_version_exits_2(capsys):
    """report --reuse without --version listed the reports, the flag passed over."""
    with pytest.raises(SystemExit) as caught:
        main(["report", "--reuse"])
    assert caught.value.code == 2 and "--reuse names a stored report" in capsys.readouterr().err


def test_an_option_given_once_and_a_flag_given_twice_are_taken():
    args = build_parser().parse_args(["batch", "--views", "page_views", "--force", "--force"])
    assert args.views == ["page_views"] and args.force
    assert not hasattr(args, "_given")
