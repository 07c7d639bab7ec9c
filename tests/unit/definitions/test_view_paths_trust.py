"""`views.paths` names folders every process of the platform imports code from (the API, the
streaming jobs, each batch run): a folder or module file another user can change, or another user's,
is refused, naming it, before anything is imported from it — as the persisted settings file is."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from pathlib import Path

import pytest

from definitions.settings import Settings
from definitions.view_loading import load_views

DECLARATION = (
    "from definitions.views import View\n"
    "VIEWS = [View(name='{view}', keys=('url',), aggregation='count', granularities=('hour',))]\n"
)


@pytest.fixture
def declared(tmp_path):
    """(settings, folder, module file) of a module declaring one view, in a folder of its own."""
    folder = tmp_path / "views"
    folder.mkdir(mode=0o755)
    name = f"trusted_views_{uuid.uuid4().hex[:8]}"
    module = folder / f"{name}.py"
    module.write_text(DECLARATION.format(view=f"v_{uuid.uuid4().hex[:8]}"))
    module.chmod(0o644)
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [name], "paths": [str(folder)]})
    yield settings, folder, module
    sys.modules.pop(name, None)
    if str(folder) in sys.path:
        sys.path.remove(str(folder))


def test_a_folder_and_module_of_the_users_own_are_imported(declared):
    settings, _, _ = declared
    assert len(list(load_views(settings))) == 6


def test_a_folder_every_user_can_change_is_refused_before_any_import(declared):
    settings, folder, module = declared
    folder.chmod(0o777)
    with pytest.raises(ValueError, match=rf"views.paths: {folder} can be changed by every user"):
        load_views(settings)
    assert module.stem not in sys.modules and str(folder) not in sys.path, "nothing imported from it"


def test_a_module_file_every_user_can_change_is_refused_before_its_import(declared):
    settings, _, module = declared
    module.chmod(0o666)
    with pytest.raises(ValueError, match=rf"{module} can be changed by every user"):
        load_views(settings, reload=True)
    assert module.stem not in sys.modules


def test_a_package_with_a_file_every_user_can_change_is_refused(tmp_path):
    folder = tmp_path / "views"
    package = folder / f"team_views_{uuid.uuid4().hex[:8]}"
    package.mkdir(parents=True, mode=0o755)
    (package / "__init__.py").write_text("from .declared import VIEWS\n")
    (package / "declared.py").write_text(DECLARATION.format(view="team_clicks"))
    (package / "declared.py").chmod(0o646)
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [package.name], "paths": [str(folder)]})
    try:
        with pytest.raises(ValueError, match=r"declared.py can be changed by every user"):
            load_views(settings)
        assert package.name not in sys.modules
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None


def test_a_folder_that_is_gone_is_passed_over(tmp_path):
    """A folder removed since it was declared (its modules retired) has nothing to import."""
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": [str(tmp_path / "gone")]})
    assert len(list(load_views(settings))) == 5
    assert str(tmp_path / "gone") not in sys.path


def test_a_dotted_name_runs_no_parent_package_before_its_files_are_checked(tmp_path):
    """find_spec("pkg.mod") imported pkg (ran its __init__) before anything was checked."""
    folder = tmp_path / "views"
    package = folder / f"outer_{uuid.uuid4().hex[:8]}"
    package.mkdir(parents=True, mode=0o755)
    ran = tmp_path / "ran"
    (package / "__init__.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    (package / "__init__.py").chmod(0o666)
    (package / "declared.py").write_text(DECLARATION.format(view="outer_clicks"))
    name = f"{package.name}.declared"
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [name], "paths": [str(folder)]})
    try:
        with pytest.raises(ValueError, match=r"__init__.py can be changed by every user"):
            load_views(settings)
        assert not ran.exists(), "the package's code ran before the check"
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None


def test_a_module_linked_to_a_file_outside_is_judged_by_that_file(tmp_path):
    folder, elsewhere = tmp_path / "views", tmp_path / "shared"
    folder.mkdir(mode=0o755)
    elsewhere.mkdir(mode=0o755)
    target = elsewhere / "open.py"
    target.write_text(DECLARATION.format(view="linked_clicks"))
    target.chmod(0o666)
    name = f"linked_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").symlink_to(target)
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [name], "paths": [str(folder)]})
    try:
        with pytest.raises(ValueError, match=r"can be changed by every user"):
            load_views(settings)
        assert name not in sys.modules
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None


def test_cached_bytecode_every_user_can_change_is_refused(declared):
    """Python runs __pycache__/<module>.cpython-*.pyc instead of the source when its stamp matches."""
    settings, folder, module = declared
    cached = importlib.util.cache_from_source(str(module))
    (folder / "__pycache__").mkdir(mode=0o755)
    (folder / "__pycache__").chmod(0o777)
    with pytest.raises(ValueError, match=r"__pycache__ can be changed by every user"):
        load_views(settings)
    (folder / "__pycache__").chmod(0o755)
    with open(cached, "wb") as f:
        f.write(b"")
    os.chmod(cached, 0o666)
    with pytest.raises(ValueError, match=r"\.pyc can be changed by every user"):
        load_views(settings)
    assert module.stem not in sys.modules


def test_a_package_holding_a_file_every_user_can_change_of_any_kind_is_refused(tmp_path):
    """An extension module (.so) is imported before a .py of the same name; bytecode beside it too."""
    folder = tmp_path / "views"
    package = folder / f"team_{uuid.uuid4().hex[:8]}"
    (package / "inner").mkdir(parents=True, mode=0o755)
    (package / "__init__.py").write_text(DECLARATION.format(view="team_orders"))
    (package / "inner" / "helper.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (package / "inner" / "helper.cpython-311-x86_64-linux-gnu.so").chmod(0o666)
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [package.name], "paths": [str(folder)]})
    try:
        with pytest.raises(ValueError, match=r"helper.cpython-311-x86_64-linux-gnu.so can be changed by every user"):
            load_views(settings)
    finally:
        sys.path.remove(str(folder)) if str(folder) in sys.path else None


def test_a_folder_no_longer_declared_leaves_the_import_path(declared, tmp_path):
    settings, folder, _ = declared
    load_views(settings)
    assert str(folder) in sys.path
    load_views(Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": []}), reload=True)
    assert str(folder) not in sys.path, "modules found there would be imported unchecked"


def test_a_relative_folder_is_refused(tmp_path):
    """Refused when the settings are read (tests/unit/infra/test_up_preflight.py); also one set past
    their checks."""
    settings = Settings(state_dir=tmp_path / "state")
    views = settings.views.model_copy(update={"paths": [Path("views")]})
    with pytest.raises(ValueError, match=r"views.paths: views is not an absolute path"):
        load_views(settings.model_copy(update={"views": views}))


def test_a_folder_under_one_every_user_can_change_is_refused(tmp_path):
    """Whoever can change a folder above it can move the views folder away and put another there."""
    above = tmp_path / "shared"
    folder = above / "team" / "views"
    folder.mkdir(parents=True, mode=0o755)
    above.chmod(0o777)
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": [str(folder)]})
    with pytest.raises(ValueError, match=rf"views.paths: {above} can be changed by every user"):
        load_views(settings)
    above.chmod(0o1777)  # sticky, as /tmp: only an entry's owner may move it
    assert len(list(load_views(settings))) == 5
    sys.path.remove(str(folder))


def test_a_reload_reads_again_every_module_of_a_view_package(tmp_path):
    """A running API reloads the declared modules when `views apply` asks: reloading the package named
    by `views.modules` alone kept its submodules as first imported, so an edited `clicks.py` went on
    being served by every API worker (until each was restarted) while the speed layer and the batch
    layer, fresh processes, computed the new definition."""
    folder = tmp_path / "views"
    package = folder / f"team_views_{uuid.uuid4().hex[:8]}"
    package.mkdir(parents=True, mode=0o755)
    (package / "__init__.py").write_text("from .clicks import VIEWS\n")
    clicks = package / "clicks.py"
    clicks.write_text(DECLARATION.format(view="team_clicks"))
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [package.name], "paths": [str(folder)]})
    try:
        assert load_views(settings)["team_clicks"].granularities == ("hour",)
        clicks.write_text(DECLARATION.format(view="team_clicks").replace("('hour',)", "('day',)"))
        os.utime(clicks, (0, 2_000_000_000))  # a new modification time, as an editor gives it
        assert load_views(settings, reload=True)["team_clicks"].granularities == ("day",)
    finally:
        for name in [m for m in sys.modules if m == package.name or m.startswith(package.name + ".")]:
            sys.modules.pop(name)
        if str(folder) in sys.path:
            sys.path.remove(str(folder))


def test_a_reload_never_reads_the_platforms_own_modules_again(tmp_path):
    """views.paths naming the project's folder: every module of the platform lies in it (and its
    virtualenv's, installed beneath it), and a reload that read them again made a second
    definitions.views, whose View no declaration is an instance of."""
    import definitions.views

    project = Path(definitions.views.__file__).resolve().parent.parent
    settings = Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": [str(project)]})
    before = sys.modules["definitions.views"], sys.modules["_pytest.fixtures"]  # the latter: under .venv there
    try:
        assert len(list(load_views(settings, reload=True))) == 5
        assert (sys.modules["definitions.views"], sys.modules["_pytest.fixtures"]) == before
    finally:  # takes the folder off sys.path only if this load put it there
        load_views(Settings(state_dir=tmp_path / "state", views={"modules": [], "paths": []}))


def test_a_reload_never_reads_the_process_main_module_again(tmp_path, monkeypatch):
    """The API runs as `python -m api.server`: with views.paths holding its folder, its __main__ was
    taken for a view module and dropped from sys.modules."""
    import types

    from definitions.view_loading import _imported_from

    folder = tmp_path / "views"
    folder.mkdir()
    main = types.ModuleType("__main__")
    main.__file__ = str(folder / "server.py")
    helper = types.ModuleType("views_helper_mod")
    helper.__file__ = str(folder / "views_helper_mod.py")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setitem(sys.modules, "views_helper_mod", helper)
    monkeypatch.syspath_prepend(str(folder))
    assert _imported_from([folder]) == ["views_helper_mod"]
