"""The store adapters are chosen from settings (stores.registry): a built-in short name or a dotted
path `package.module.ClassName`; a choice that cannot be loaded is one AdapterNotFound naming the
setting, and a malformed one is refused when the settings load (no services)."""

from __future__ import annotations

import pydantic
import pytest

from definitions.settings import Settings
from definitions.settings_store import load, persist
from definitions.store_settings import ROLES, StoresSettings
from stores import adapters, registry
from stores.batch_reader import BatchViewReader
from stores.batch_views import VersionStore
from stores.realtime import RealtimeReader, RealtimeWriter
from stores.registry import AdapterNotFound
from tests.support.shell import plain_shell
from tests.unit.stores import sample_adapters
from tests.unit.stores.sample_adapters import RecordingBatchViews, RecordingRealtimeReader, RecordingRealtimeWriter

SAMPLES = "tests.unit.stores.sample_adapters"


@pytest.fixture(autouse=True)
def _plain_shell(monkeypatch, tmp_path):
    plain_shell(monkeypatch, tmp_path)
    sample_adapters.CREATED.clear()


def choosing(**stores: str) -> Settings:
    """Settings choosing these adapters, validated as any loaded settings are."""
    return Settings(stores=StoresSettings(**stores))


def unvalidated(role: str, value: str) -> Settings:
    """Settings holding a value the validator would refuse (a persisted file edited by hand, an older
    platform's name), to see what the registry itself says."""
    return Settings().model_copy(update={"stores": StoresSettings.model_construct(**{role: value})})


# --- defaults ------------------------------------------------------------------------------------


def test_the_defaults_are_short_names_of_todays_stores():
    s = Settings().stores
    assert (s.batch_views, s.realtime_reader, s.realtime_writer, s.versions) == (
        "hbase",
        "cassandra",
        "cassandra",
        "hbase",
    )


@pytest.mark.parametrize(
    ("role", "cls"),
    [
        ("batch_views", BatchViewReader),
        ("realtime_reader", RealtimeReader),
        ("realtime_writer", RealtimeWriter),
        ("versions", VersionStore),
    ],
)
def test_default_settings_resolve_to_todays_adapters(role, cls):
    assert registry.adapter_class(Settings(), role) is cls


def test_the_default_batch_view_reader_and_version_store_are_built_as_before():
    settings = Settings()
    reader = registry.batch_view_reader(settings, 3, 0.25)
    assert type(reader) is BatchViewReader
    assert (reader.settings, reader.pool_size, reader.wait_s, reader.attempts) == (settings, 3, 0.25, 2)
    versions = registry.version_store(settings)
    assert type(versions) is VersionStore and versions.settings is settings


@pytest.mark.parametrize("role", ROLES)
def test_each_builtin_adapter_provides_the_methods_of_its_protocol(role):
    protocol = adapters.PROTOCOLS[role]
    members = [name for name in vars(protocol) if not name.startswith("_")]
    assert members, f"{protocol.__name__} lists no method"
    cls = registry.adapter_class(Settings(), role)
    missing = [name for name in members if not callable(getattr(cls, name, None))]
    assert not missing, f"{cls.__name__} lacks {missing} of {protocol.__name__}"


# --- a dotted path -------------------------------------------------------------------------------


def test_a_dotted_path_loads_and_constructs_that_class_with_todays_arguments():
    settings = choosing(
        batch_views=f"{SAMPLES}.RecordingBatchViews",
        realtime_reader=f"{SAMPLES}.RecordingRealtimeReader",
        realtime_writer=f"{SAMPLES}.RecordingRealtimeWriter",
        versions=f"{SAMPLES}.EmptyVersions",
    )
    batch = registry.batch_view_reader(settings, 4, 1.5)
    reader = registry.realtime_reader(settings, timeout_s=5)
    writer = registry.realtime_writer(settings)
    versions = registry.version_store(settings)
    assert isinstance(batch, RecordingBatchViews) and (batch.settings, batch.args) == (settings, (4, 1.5))
    assert isinstance(reader, RecordingRealtimeReader) and reader.kwargs == {"timeout_s": 5}
    assert isinstance(writer, RecordingRealtimeWriter) and (writer.args, writer.kwargs) == ((), {})
    assert isinstance(versions, sample_adapters.EmptyVersions) and versions.settings is settings
    assert sample_adapters.CREATED == [batch, reader, writer, versions]


def test_a_dotted_path_naming_a_builtin_class_is_that_class():
    assert registry.adapter_class(choosing(versions="stores.batch_views.VersionStore"), "versions") is VersionStore


def test_an_adapter_chosen_in_the_environment_is_persisted_like_any_setting(monkeypatch):
    monkeypatch.setenv("LAMBDA_STORES__REALTIME_WRITER", f"{SAMPLES}.RecordingRealtimeWriter")
    persist(Settings())
    monkeypatch.delenv("LAMBDA_STORES__REALTIME_WRITER")
    assert Settings().stores.realtime_writer == "cassandra", "without the persisted file the default applies"
    loaded = load()
    assert loaded.stores.realtime_writer == f"{SAMPLES}.RecordingRealtimeWriter"
    assert isinstance(registry.realtime_writer(loaded), RecordingRealtimeWriter)


# --- what cannot be loaded -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "role", "value", "why"),
    [
        (lambda: unvalidated("realtime_reader", "mongo"), "realtime_reader", "mongo", "not a built-in adapter"),
        (
            lambda: choosing(realtime_reader="no_such_package.readers.Reader"),
            "realtime_reader",
            "no_such_package.readers.Reader",
            "no module named 'no_such_package'",
        ),
        (
            lambda: choosing(realtime_writer=f"{SAMPLES}.NoSuchWriter"),
            "realtime_writer",
            f"{SAMPLES}.NoSuchWriter",
            f"module '{SAMPLES}' has no attribute 'NoSuchWriter'",
        ),
        (
            lambda: choosing(versions=f"{SAMPLES}.not_a_class"),
            "versions",
            f"{SAMPLES}.not_a_class",
            "is a function, not a class",
        ),
        (
            lambda: choosing(batch_views=f"{SAMPLES}.NOT_A_CLASS_EITHER"),
            "batch_views",
            f"{SAMPLES}.NOT_A_CLASS_EITHER",
            "is a str, not a class",
        ),
    ],
    ids=["unknown short name", "missing module", "missing attribute", "a function", "a constant"],
)
def test_what_cannot_be_loaded_is_adapter_not_found_naming_the_setting(settings, role, value, why):
    with pytest.raises(AdapterNotFound) as err:
        registry.adapter_class(settings(), role)
    message = str(err.value)
    assert f"stores.{role}" in message and repr(value) in message and why in message, message
    assert isinstance(err.value, ValueError)
    assert (err.value.setting, err.value.value) == (f"stores.{role}", value)


def test_the_unknown_short_name_error_lists_the_known_ones():
    with pytest.raises(AdapterNotFound, match=r"known: cassandra"):
        registry.realtime_writer(unvalidated("realtime_writer", "hbase"))


def test_a_module_whose_own_import_fails_is_told_apart_from_a_missing_one(tmp_path, monkeypatch):
    (tmp_path / "broken_adapter_pkg.py").write_text("import no_such_driver\n\nclass Reader:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AdapterNotFound) as err:
        registry.realtime_reader(choosing(realtime_reader="broken_adapter_pkg.Reader"))
    message = str(err.value)
    assert "stores.realtime_reader" in message and "module 'broken_adapter_pkg' failed to import" in message
    assert "no_such_driver" in message


# --- the settings validator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["mongo", "", "Reader.", ".Reader", "my-package.Reader", "pkg..Reader", "pkg.class.Reader", "pkg.Reader "],
)
def test_the_validator_refuses_a_malformed_value_naming_the_setting(value):
    with pytest.raises(pydantic.ValidationError) as err:
        choosing(realtime_reader=value)
    text = str(err.value)
    assert "stores.realtime_reader" in text and "package.module.ClassName" in text, text


def test_a_short_name_of_another_role_is_refused():
    with pytest.raises(pydantic.ValidationError, match=r"stores\.versions"):
        choosing(versions="cassandra")


def test_a_malformed_value_in_the_environment_is_refused_at_load(monkeypatch):
    monkeypatch.setenv("LAMBDA_STORES__VERSIONS", "not a path")
    with pytest.raises(pydantic.ValidationError, match=r"stores\.versions"):
        Settings()


@pytest.mark.parametrize("value", ["hbase", "adapters.Versions", "my_company.lambda_stores.hbase2.VersionStore"])
def test_the_validator_accepts_short_names_and_dotted_paths(value):
    assert choosing(versions=value).stores.versions == value


def test_an_unknown_key_in_the_section_is_refused():
    with pytest.raises(pydantic.ValidationError):
        StoresSettings(realtime_readr="cassandra")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "body, words",
    [
        ("class Reader:\n    pass\nraise RuntimeError('set-up failed')\n", "RuntimeError: set-up failed"),
        ("class Reader:\n    def series(self\n", "SyntaxError"),
    ],
)
def test_a_module_whose_own_code_fails_is_adapter_not_found_not_a_store_outage(tmp_path, monkeypatch, body, words):
    """Only ImportError was told apart: a module raising anything else escaped without naming the
    setting, and the speed layer retried it for store_outage_s as a connection problem."""
    name = f"failing_adapter_{abs(hash(body)) % 10_000}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AdapterNotFound) as err:
        registry.realtime_reader(choosing(realtime_reader=f"{name}.Reader"))
    message = str(err.value)
    assert "stores.realtime_reader" in message and "failed as it was imported" in message and words in message


@pytest.mark.parametrize(
    "role, value, lacking",
    [
        ("versions", "stores.batch_reader.BatchViewReader", "allocate_version, pointer, record_run"),
        ("realtime_writer", "subprocess.Popen", "close, write"),
        ("batch_views", "builtins.object", "pointer_columns, series, totals"),
    ],
)
def test_a_class_without_its_roles_methods_is_refused_naming_them(role, value, lacking):
    """Any class was taken: the wrong one failed later, with an AttributeError or a TypeError that
    did not name the setting ('… is the stack up?')."""
    with pytest.raises(AdapterNotFound, match=rf"stores\.{role}.*lacks {lacking}"):
        registry.resolve(role, value)
