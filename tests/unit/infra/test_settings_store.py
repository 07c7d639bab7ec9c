"""The persisted settings: written by `lambdactl up`, loaded by every later command and process,
contradicting data-shaping settings refused, secrets written owner-only."""

from __future__ import annotations

import json
import os
import stat

import pytest

from definitions.settings import Settings
from definitions.settings_store import SettingsConflict, load, masked_inside, persist, persisted_path, provenance
from lambdactl.cli import main
from tests.support.shell import plain_shell


@pytest.fixture(autouse=True)
def _plain_shell(monkeypatch, tmp_path):
    plain_shell(monkeypatch, tmp_path)


def test_a_plain_shell_gets_what_up_persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    monkeypatch.setenv("LAMBDA_SPEED__DEDUPE_WINDOW_S", "120")
    monkeypatch.setenv("LAMBDA_API__TOKEN", "s3cret-token-long-enough")
    path = persist(Settings())
    for key in ("LAMBDA_INGEST_BUCKET_S", "LAMBDA_SPEED__DEDUPE_WINDOW_S", "LAMBDA_API__TOKEN"):
        monkeypatch.delenv(key)

    assert Settings().ingest_bucket_s == 3600, "without the persisted file the default applies"
    loaded = load()
    assert loaded.ingest_bucket_s == 60 and loaded.speed.dedupe_window_s == 120
    assert loaded.api.token.get_secret_value() == "s3cret-token-long-enough"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "the file may hold secrets"
    assert json.loads(path.read_text())["views"]["modules"] == [], "data-shaping values are kept even as defaults"


def test_a_relative_state_dir_is_resolved_once(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMBDA_STATE_DIR", "rel/state")
    path = persist(Settings())
    assert path == tmp_path / "rel" / "state" / "settings.json"
    assert json.loads(path.read_text())["state_dir"] == str(tmp_path / "rel" / "state")


@pytest.mark.parametrize(
    "variable, value, setting",
    [
        ("LAMBDA_INGEST_BUCKET_S", "3600", "ingest_bucket_s"),
        ("LAMBDA_SPEED__DEDUPE_WINDOW_S", "600", "speed.dedupe_window_s"),
        ("LAMBDA_VIEWS__MODULES", '["my_views"]', "views.modules"),
        # What validation accepts: a record one layer judged under the old limits and the other
        # under the new ones counts in one layer only.
        ("LAMBDA_EVENTS__MAX_URL_CHARS", "4096", "events.max_url_chars"),
        ("LAMBDA_EVENTS__MAX_FUTURE_S", "60", "events.max_future_s"),
        ("LAMBDA_EVENTS__MIN_EVENT_TIME_S", "0", "events.min_event_time_s"),
        ("LAMBDA_EVENTS__MAX_RECORD_BYTES", "8192", "events.max_record_bytes"),
    ],
)
def test_a_contradicting_data_shaping_setting_is_refused(monkeypatch, variable, value, setting):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    monkeypatch.setenv("LAMBDA_SPEED__DEDUPE_WINDOW_S", "120")
    persist(Settings())
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsConflict, match=f"{setting} is .* in the persisted settings, this command says"):
        load()


def test_two_commands_given_different_data_shaping_values_at_once_do_not_both_persist(monkeypatch):
    """Two `up`s on a new state directory, one with 600 s buckets and one with 1800 s: both loaded
    before either persisted, so neither met a conflict. The second kept the file's 600 (every process
    then ran with it) and said it was up with 1800."""
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "600")
    first = load()
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "1800")
    second = load()
    persist(first)
    with pytest.raises(
        SettingsConflict, match="ingest_bucket_s is 600 in the persisted settings, this command says 1800"
    ):
        persist(second)
    assert json.loads(persisted_path(first).read_text())["ingest_bucket_s"] == 600
    persist(first)  # the same values again: fine


def test_the_same_value_or_another_setting_is_fine(monkeypatch):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    persist(Settings())
    monkeypatch.setenv("LAMBDA_API__PORT", "8111")
    loaded = load()
    assert loaded.ingest_bucket_s == 60 and loaded.api.port == 8111


def test_up_again_keeps_earlier_explicit_settings_and_adds_new_ones(monkeypatch):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    persist(Settings())
    monkeypatch.delenv("LAMBDA_INGEST_BUCKET_S")
    monkeypatch.setenv("LAMBDA_API__PORT", "8111")
    path = persist(load())
    doc = json.loads(path.read_text())
    assert doc["ingest_bucket_s"] == 60 and doc["api"]["port"] == 8111


def test_a_command_loaded_earlier_does_not_undo_a_rotated_token(monkeypatch):
    """An `up` waiting for the stack lock persists what it loaded minutes before: only what it was
    given itself, so a token rotated meanwhile by another `up` stays rotated."""
    monkeypatch.setenv("LAMBDA_API__TOKEN", "token-A-long-enough-123")
    persist(load())
    monkeypatch.delenv("LAMBDA_API__TOKEN")
    earlier = load()  # the token came from the file
    monkeypatch.setenv("LAMBDA_API__TOKEN", "token-B-long-enough-456")
    persist(load())
    path = persist(earlier)
    assert json.loads(path.read_text())["api"]["token"] == "token-B-long-enough-456"


def test_a_command_loaded_earlier_does_not_undo_views_apply(monkeypatch):
    """`views apply --modules` changes views.modules in the file; an `up` that loaded the settings
    before it keeps the file's value (the data's layout follows it)."""
    from definitions.settings_store import persist_view_modules, with_view_modules

    persist(load())
    earlier = load()
    persist_view_modules(with_view_modules(load(), ["json"]))
    path = persist(earlier)
    assert json.loads(path.read_text())["views"]["modules"] == ["json"]
    assert load().views.modules == ["json"]


def test_the_file_is_read_and_written_under_the_settings_lock(monkeypatch):
    import fcntl

    from definitions import settings_store

    settings = load()
    held = []
    real = settings_store.read_persisted

    def read(path):
        with open(settings.state_dir / "settings.lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
                fcntl.flock(handle, fcntl.LOCK_UN)
            except BlockingIOError:
                held.append(True)
        return real(path)

    monkeypatch.setattr(settings_store, "read_persisted", read)
    persist(settings)
    assert held == [True]


def test_cli_refuses_with_a_clear_message(monkeypatch, capsys, caplog):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    persist(Settings())
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "3600")
    from definitions.settings import get_settings

    get_settings.cache_clear()
    try:
        assert main(["config"]) == 2
    finally:
        get_settings.cache_clear()
    assert "ingest_bucket_s is 60 in the persisted settings, this command says 3600" in caplog.text
    assert "docs/operations.md" in caplog.text


def test_config_says_where_each_setting_came_from(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    monkeypatch.setenv("LAMBDA_API__TOKEN", "s3cret-token-long-enough")
    persist(Settings())
    monkeypatch.delenv("LAMBDA_INGEST_BUCKET_S")
    monkeypatch.delenv("LAMBDA_API__TOKEN")
    (tmp_path / "lambda.toml").write_text(
        '[kafka]\nport = 29092\n[spark.conf]\n"spark.authenticate.secret" = "cluster-s3cret"\n'
    )
    monkeypatch.setenv("LAMBDA_API__PORT", "8111")
    rows = {key: (value, source) for key, value, source in provenance(load())}
    assert rows["ingest_bucket_s"] == (60, f"persisted {persisted_path(Settings())}")
    assert rows["kafka.port"] == (29092, f"file {tmp_path / 'lambda.toml'}")
    assert rows["api.port"] == (8111, "environment")
    assert rows["hbase.thrift_port"] == (9090, "default")
    assert rows["api.token"][0] == "**********", "secrets are masked"
    assert rows["spark.conf.spark.authenticate.secret"][0] == "**********", "in free-form maps too"


def test_config_masks_secrets_inside_values_too(monkeypatch):
    """A secret passed as a JVM system property, or as a URL's password, in a value whose own name
    says nothing (spark.jvm_options, a spark.conf entry) was shown in clear by `lambdactl config`."""
    monkeypatch.setenv(
        "LAMBDA_SPARK__JVM_OPTIONS", '-Xss4m -Djavax.net.ssl.keyStorePassword=ks-s3cret -Dplain=1 -Dx.token="a s3cret"'
    )
    monkeypatch.setenv(
        "LAMBDA_SPARK__CONF", '{"spark.hadoop.fs.s3a.endpoint": "https://ops:url-s3cret@store.example:9000/x"}'
    )
    rows = {key: value for key, value, _ in provenance(load())}
    shown = f"{rows['spark.jvm_options']} {rows['spark.conf.spark.hadoop.fs.s3a.endpoint']}"
    assert "s3cret" not in shown, shown
    assert (
        rows["spark.jvm_options"] == "-Xss4m -Djavax.net.ssl.keyStorePassword=********** -Dplain=1 -Dx.token=**********"
    )
    assert rows["spark.conf.spark.hadoop.fs.s3a.endpoint"] == "https://ops:**********@store.example:9000/x"
    assert "ks-s3cret -Dplain=1" in load().spark.jvm_options, "only what config shows is masked"


@pytest.mark.parametrize(
    ("shown", "masked"),
    [
        ('"-Dx.password=a b" -Dk=1', "-Dx.password=********** -Dk=1"),  # Spark's quoting: the whole word
        ('-D"x.password=a b" -Dk=1', "-Dx.password=********** -Dk=1"),
        ('-Dx.password="a\\" b s3cret" -Dk=1', "-Dx.password=********** -Dk=1"),
        ('-Dx.password="a s3cret', "-Dx.password=**********"),  # an unclosed quote runs to the end
        ("-Dx.token='a s3cret' next", "-Dx.token=********** next"),
        ("https://ops:p@s3cret@host/x", "https://ops:**********@host/x"),  # an unencoded @ in it
        ("jdbc:postgresql://h/db?password=s3cret&user=u", "jdbc:postgresql://h/db?password=**********&user=u"),
        ("https://a.example/x?sv=1&sig=s3cret", "https://a.example/x?sv=1&sig=**********"),
        ("-Dx.password= -Dplain=1 https://host:8080/p?user=u", "-Dx.password= -Dplain=1 https://host:8080/p?user=u"),
    ],
)
def test_secrets_inside_a_value_are_masked_however_written(shown, masked):
    assert masked_inside(shown) == masked


def test_a_broken_persisted_file_is_a_clear_error(tmp_path):
    path = persisted_path(Settings())
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(SettingsConflict, match="not readable JSON"):
        load()


def test_a_persisted_value_that_is_refused_names_the_file_it_is_in(tmp_path):
    """Edited by hand: the error named the setting, and no file it came from."""
    path = persisted_path(Settings())
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"kafka": {"prot": 1}, "speed": {"trigger_s": True}}))
    path.chmod(0o600)
    with pytest.raises(SettingsConflict) as refused:
        load()
    assert str(path) in str(refused.value)
    assert "kafka.prot" in str(refused.value) and "trigger_s: true is no number" in str(refused.value)


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_persisted_settings_that_are_no_regular_file_are_a_clear_error(kind):
    """Taken for absent before: the data-shaping values the platform's data was written with were
    dropped without a word (and a FIFO, once read, would hang every command)."""
    path = persisted_path(Settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent / "gone.json")
    with pytest.raises(SettingsConflict, match="not a regular file"):
        load()


@pytest.mark.parametrize("which", ["file", "directory"])
def test_persisted_settings_others_can_change_are_not_read(which):
    """They name the modules every process imports (views.modules): whoever can write them runs code."""
    persist(Settings())
    path = persisted_path(Settings())
    target = path if which == "file" else path.parent
    target.chmod(target.stat().st_mode | stat.S_IWOTH)
    with pytest.raises(SettingsConflict, match=f"{target} can be changed by every user .*chmod o-w"):
        load()
    target.chmod(target.stat().st_mode & ~stat.S_IWOTH | stat.S_IWGRP)  # umask 002: the user's own group
    assert load().model_dump() == Settings().model_dump()


def test_settings_persisted_under_umask_002_are_read_back():
    import os

    old = os.umask(0o002)
    try:
        persist(Settings())
        assert load().model_dump() == Settings().model_dump()
    finally:
        os.umask(old)


def test_a_store_that_does_not_answer_is_one_clear_line_not_a_traceback(monkeypatch, tmp_path, caplog):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("LAMBDA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LAMBDA_HDFS__HTTP_PORT", str(port))  # whichever store `batch --plan` reads first
    monkeypatch.setenv("LAMBDA_HBASE__THRIFT_PORT", str(port))
    from definitions.settings import get_settings

    get_settings.cache_clear()
    try:
        assert main(["batch", "--plan"]) == 1
    finally:
        get_settings.cache_clear()
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert line.startswith(("batch failed: WebHdfsError: ", "batch failed: TTransportException: ")), line
    assert "is the stack up?" in line and "lambdactl status" in line
    assert "Traceback" not in caplog.text


def test_a_setting_given_twice_in_the_persisted_file_is_refused_naming_it(tmp_path):
    path = persisted_path(Settings())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"ingest_bucket_s": 60, "ingest_bucket_s": 3600}')
    path.chmod(0o600)
    with pytest.raises(SettingsConflict, match="'ingest_bucket_s' is given twice"):
        load()


def test_config_explicit_leaves_the_defaults_out_of_the_json_too(monkeypatch, capsys):
    import json

    from definitions.settings import get_settings

    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    get_settings.cache_clear()  # loaded by an earlier test's command, under its own shell
    try:
        assert main(["config", "--json", "--explicit"]) == 0
    finally:
        get_settings.cache_clear()
    rows = json.loads(capsys.readouterr().out)
    assert {"setting": "ingest_bucket_s", "value": 60, "source": "environment"} in rows
    assert rows and all(row["source"] != "default" for row in rows)


def test_config_unset_takes_a_setting_out_and_its_default_applies_again(monkeypatch, capsys, caplog):
    """One `up` in development mode persisted it: without a way to take it out, every later start
    accepted the development secrets, whatever the shell said."""
    monkeypatch.setenv("LAMBDA_ENVIRONMENT", "development")
    monkeypatch.setenv("LAMBDA_API__ADMIN_TOKEN", "admin-token-long-enough-1")
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    persist(load())
    for name in ("LAMBDA_ENVIRONMENT", "LAMBDA_API__ADMIN_TOKEN", "LAMBDA_INGEST_BUCKET_S"):
        monkeypatch.delenv(name)
    assert load().environment == "development"
    with caplog.at_level("INFO"):
        assert main(["config", "--unset", "environment"]) == 0
        assert main(["config", "--unset", "api.admin_token"]) == 0
        assert main(["config", "--unset", "api.admin_token"]) == 0  # twice: nothing to take out
    assert "not in" in caplog.text
    loaded = load()
    assert loaded.environment == Settings().environment != "development"
    assert loaded.api.admin_token.get_secret_value() == Settings().api.admin_token.get_secret_value()
    assert loaded.ingest_bucket_s == 60, "the others stay"


def test_config_unset_says_what_it_did_in_json_and_refuses_explicit(monkeypatch, capsys):
    """`--json` and `--explicit` were passed over beside `--unset`: a script asking for JSON got none."""
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    persist(load())
    monkeypatch.delenv("LAMBDA_INGEST_BUCKET_S")
    capsys.readouterr()
    assert main(["config", "--unset", "api.admin_token", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said == {"unset": "api.admin_token", "removed": False, "file": said["file"]} and said["file"].endswith(
        "settings.json"
    )
    with pytest.raises(SystemExit) as refused:
        main(["config", "--unset", "api.admin_token", "--explicit"])
    assert refused.value.code == 2 and "--explicit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key", ["ingest_bucket_s", "speed.dedupe_window_s", "speed", "views", "views.modules", "views.paths", "state_dir"]
)
def test_config_unset_refuses_what_the_data_was_written_with(key, monkeypatch, caplog):
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "60")
    path = persist(load())
    before = path.read_text()
    monkeypatch.delenv("LAMBDA_INGEST_BUCKET_S")
    assert main(["config", "--unset", key]) == 2
    assert "the platform's data was written with it" in caplog.text
    assert path.read_text() == before


def test_api_workers_run_with_the_settings_their_main_process_checked(monkeypatch, tmp_path):
    """uvicorn starts a worker again when one dies: one that loaded settings.json then ran with
    settings changed since (another token, other limits), unchecked, beside workers on the old."""
    from api import server
    from definitions.settings_store import write_snapshot

    monkeypatch.setenv("LAMBDA_API__TOKEN", "token-A-long-enough-123")
    checked = load()
    persist(checked)
    snapshot = write_snapshot(checked, tmp_path / "run" / "settings.json")
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    monkeypatch.setenv("LAMBDA_API__TOKEN", "token-B-long-enough-456")
    persist(load())  # changed meanwhile
    monkeypatch.delenv("LAMBDA_API__TOKEN")
    made = []
    monkeypatch.setattr("api.app.create_app", lambda settings, *args: made.append(settings) or object())
    monkeypatch.setattr(server, "configure_from", lambda *args: None)
    monkeypatch.setattr(server, "quiet_full_collections", lambda: None)
    monkeypatch.setattr(server.worker_sync, "WorkerSync", lambda directory: None)
    monkeypatch.setenv(server.SNAPSHOT_VARIABLE, str(snapshot))
    server.worker_app()
    assert made[0].api.token.get_secret_value() == "token-A-long-enough-123"
    assert made[0].model_dump() == checked.model_dump()


def test_a_copy_of_loaded_settings_persists_what_its_copy_changed(tmp_path):
    persist(load())
    loaded = load()  # over the persisted file: it says what it was given
    other = tmp_path / "elsewhere"
    copy = loaded.model_copy(update={"state_dir": other, "kafka": loaded.kafka.model_copy(update={"port": 29_999})})
    doc = json.loads(persist(copy).read_text())
    assert doc["state_dir"] == str(other) and doc["kafka"]["port"] == 29_999
    assert persisted_path(copy).parent == other


def test_config_unset_mends_a_persisted_value_the_settings_no_longer_accept(caplog):
    """Every other command refuses to start on it; `config --unset` does not load the file first."""
    path = persist(load())
    doc = json.loads(path.read_text())
    doc["cassandra"] = {"keyspace": "Lambda"}  # persisted by an earlier release, refused since
    path.write_text(json.dumps(doc))
    assert main(["config"]) == 2
    assert "keyspace" in caplog.text
    assert main(["config", "--unset", "cassandra.keyspace"]) == 0
    assert load().cassandra.keyspace == Settings().cassandra.keyspace


def test_config_unset_refuses_to_leave_settings_that_no_longer_validate(monkeypatch, caplog):
    """Taking a value out can break a rule between settings (two-hour ingest buckets need a batch
    interval at least as long): `--unset` said done, and every later command refused to start."""
    monkeypatch.setenv("LAMBDA_INGEST_BUCKET_S", "7200")
    monkeypatch.setenv("LAMBDA_BATCH__INTERVAL_S", "7200")
    path = persist(load())
    before = path.read_text()
    for name in ("LAMBDA_INGEST_BUCKET_S", "LAMBDA_BATCH__INTERVAL_S"):
        monkeypatch.delenv(name)
    assert main(["config", "--unset", "batch.interval_s"]) == 2
    assert "ingest_bucket_s must not exceed batch.interval_s" in caplog.text and "nothing was changed" in caplog.text
    assert path.read_text() == before
    assert main(["config"]) == 0, "the settings still load"


def test_a_persisted_jars_dir_is_read_back_and_kept_by_a_later_plain_up(monkeypatch, tmp_path):
    """The default jars_dir of every later command was taken for an explicit one: it won over the
    persisted value and the next `up` persisted the default in its place."""
    jars = tmp_path / "opt-jars"
    jars.mkdir()
    monkeypatch.setenv("LAMBDA_JARS_DIR", str(jars))
    persist(Settings())
    monkeypatch.delenv("LAMBDA_JARS_DIR")
    assert load().jars_dir == jars
    persist(load())  # a plain `up` persists what it runs with
    assert load().jars_dir == jars
    assert json.loads(persisted_path(Settings()).read_text())["jars_dir"] == str(jars)


def test_a_relative_jars_dir_is_persisted_resolved(monkeypatch, tmp_path):
    monkeypatch.setenv("LAMBDA_JARS_DIR", "rel/jars")
    path = persist(Settings())
    assert json.loads(path.read_text())["jars_dir"] == str(tmp_path / "rel" / "jars")


def test_a_persisted_file_beyond_its_size_bound_is_refused_unread(monkeypatch):
    from definitions import settings_store

    path = persisted_path(Settings())
    path.parent.mkdir(parents=True)
    path.write_text('{"api": {"port": 8000}, "pad": "' + "x" * settings_store.MAX_FILE_BYTES + '"}')
    monkeypatch.setattr(type(path), "read_text", lambda *a, **k: pytest.fail("the file was read whole"))
    with pytest.raises(SettingsConflict, match=r"larger than .* fix or remove"):
        load()


def test_settings_beyond_the_files_size_bound_are_not_persisted_and_the_file_before_stays(monkeypatch):
    """A file every later command would refuse to read must not be written in the first place."""
    from definitions import settings_store

    monkeypatch.setenv("LAMBDA_API__PORT", "8123")
    path = persist(Settings())
    before = path.read_text()
    monkeypatch.setenv("LAMBDA_STACK__JAVA_HOME", "/opt/" + "j" * settings_store.MAX_FILE_BYTES)
    with pytest.raises(SettingsConflict, match=r"larger than .*stack\.java_home"):
        persist(Settings())
    assert path.read_text() == before
    monkeypatch.delenv("LAMBDA_STACK__JAVA_HOME")
    assert load().api.port == 8123


def test_a_state_directory_the_user_cannot_read_is_one_clear_line(monkeypatch, capsys, caplog):
    """Python raises PermissionError from exists() on a directory another user's (a `sudo lambdactl
    up` before): every command was a traceback."""
    from pathlib import Path

    from definitions.settings import get_settings

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "exists", denied)
    get_settings.cache_clear()
    try:
        assert main(["status"]) == 2
    finally:
        get_settings.cache_clear()
    assert "Permission denied" in caplog.text and "settings" in caplog.text
    assert "Traceback" not in caplog.text + capsys.readouterr().err


def test_persisted_settings_linked_into_a_folder_others_can_change_are_not_read(tmp_path):
    """The link's own folder was checked, not the folder of the file it names."""
    persist(Settings())
    path = persisted_path(Settings())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may replace the file in it
    (shared / "settings.json").write_text(path.read_text())
    path.unlink()
    path.symlink_to(shared / "settings.json")
    with pytest.raises(SettingsConflict, match=f"{shared} can be changed by every user"):
        load()


def test_a_persisted_jars_dir_that_is_gone_gives_way_to_the_default(monkeypatch, tmp_path):
    """Earlier releases persisted every command's default jars_dir: after the checkout moved, that
    old path won and every start said "no jars"."""
    monkeypatch.setenv("LAMBDA_JARS_DIR", str(tmp_path / "moved-away"))
    persist(Settings())
    monkeypatch.delenv("LAMBDA_JARS_DIR")
    assert load().jars_dir == Settings().jars_dir


def test_a_setting_nested_too_deep_in_the_environment_is_refused_not_a_traceback(monkeypatch, caplog):
    monkeypatch.setenv("LAMBDA_API__CORS_ORIGINS", "[" * 100_000 + "]" * 100_000)
    assert main(["config"]) == 2
    assert "nest" in caplog.text


def test_a_map_setting_given_again_replaces_the_persisted_map_whole(monkeypatch):
    """A map is one setting: merged entry by entry, a data centre renamed kept the old one in force
    and in the file, and no Spark option could be taken out by giving the map without it."""
    monkeypatch.setenv("LAMBDA_CASSANDRA__REPLICATION", '{"dc1": 3}')
    monkeypatch.setenv("LAMBDA_SPARK__CONF", '{"spark.sql.foo": "1"}')
    persist(load())
    monkeypatch.setenv("LAMBDA_CASSANDRA__REPLICATION", '{"dc2": 3}')
    monkeypatch.setenv("LAMBDA_SPARK__CONF", "{}")
    loaded = load()
    assert loaded.cassandra.replication == {"dc2": 3} and loaded.spark.conf == {}
    doc = json.loads(persist(loaded).read_text())
    assert doc["cassandra"]["replication"] == {"dc2": 3} and doc["spark"]["conf"] == {}
    monkeypatch.delenv("LAMBDA_CASSANDRA__REPLICATION")
    monkeypatch.delenv("LAMBDA_SPARK__CONF")
    assert load().cassandra.replication == {"dc2": 3}, "what was persisted last"


def test_config_unset_takes_one_entry_out_of_a_map_whose_keys_have_dots(monkeypatch, caplog):
    monkeypatch.setenv("LAMBDA_SPARK__CONF", '{"spark.sql.foo": "1", "spark.sql.bar": "2"}')
    persist(load())
    monkeypatch.delenv("LAMBDA_SPARK__CONF")
    with caplog.at_level("INFO"):
        assert main(["config", "--unset", "spark.conf.spark.sql.foo"]) == 0
    assert "not in" not in caplog.text
    assert load().spark.conf == {"spark.sql.bar": "2"}
    sources = {name: source for name, _value, source in provenance(load())}
    assert sources["spark.conf.spark.sql.bar"].startswith("persisted")


def test_persisted_settings_linked_into_the_state_folder_stay_linked(monkeypatch, tmp_path):
    """Replaced by a file of its own, the link was gone and edits to the file it named were ignored."""
    monkeypatch.setenv("LAMBDA_API__PORT", "8111")
    path = persist(Settings())
    kept = tmp_path / "managed"
    kept.mkdir(mode=0o700)
    path.rename(kept / "settings.json")
    path.symlink_to(kept / "settings.json")
    monkeypatch.setenv("LAMBDA_API__PORT", "8112")
    assert persist(load()) == path and path.is_symlink()
    assert json.loads((kept / "settings.json").read_text())["api"]["port"] == 8112
    monkeypatch.delenv("LAMBDA_API__PORT")
    assert main(["config", "--unset", "api.port"]) == 0
    assert path.is_symlink() and "port" not in json.loads((kept / "settings.json").read_text()).get("api", {})
