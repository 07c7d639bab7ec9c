"""Loading the declared views: the built-in ones and those of the modules named by `views.modules`,
each imported only once its file and every folder above it are found to be the platform's own
(definitions.files.refuse_untrusted)."""

from __future__ import annotations

from definitions.views import BUILT_IN, Registry, View

# The views.paths folders load_views put on sys.path: one no longer declared is taken off again.
_ADDED_PATHS: list[str] = []


def load_views(settings, reload: bool = False) -> Registry:
    """The built-in views plus those declared in the modules named by `settings.views.modules` (found
    in `settings.views.paths` first, then among the installed packages);
    `reload`: modules imported before are read again (a running API picking up changed declarations)."""
    import importlib
    import sys
    from pathlib import Path

    from definitions.files import refuse_untrusted, refuse_untrusted_module

    for gone in [p for p in _ADDED_PATHS if Path(p) not in settings.views.paths]:  # no longer declared
        _ADDED_PATHS.remove(gone)
        if gone in sys.path:
            sys.path.remove(gone)
    for path in reversed(settings.views.paths):
        if not path.is_absolute():  # each process runs in a folder of its own
            raise ValueError(f"views.paths: {path} is not an absolute path")
        if not path.is_dir():  # a folder removed since (its modules retired): nothing to import from it
            continue
        refuse_untrusted(path, "views.paths", "no view module is imported from it", ancestors=True)
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
            _ADDED_PATHS.append(str(path))
    if reload:
        importlib.invalidate_caches()  # a module file added since the last import is found
        # Every module imported from those folders is read again, not only the ones named: a named
        # package's submodules (and any helper beside them) kept their first import's code.
        for name in _imported_from(settings.views.paths):
            del sys.modules[name]
    views = list(BUILT_IN)
    for name in settings.views.modules:
        refuse_untrusted_module(name, settings.views.paths, "views.paths")
        if reload and name in sys.modules:  # an installed module: its own file only
            module = importlib.reload(sys.modules[name])
        else:
            module = importlib.import_module(name)
        declared = getattr(module, "VIEWS", None)
        if not isinstance(declared, (list, tuple)) or not all(isinstance(v, View) for v in declared):
            raise ValueError(f"module {name} must define VIEWS, a list of definitions.views.View")
        views.extend(declared)
    reserved = [v.name for v in views if "__" in v.name]
    if reserved:  # the separator of storage names (definitions.view_versions)
        raise ValueError(
            f"view names may not contain '__' (it separates a view's name from its definition's): {reserved}"
        )
    return Registry(tuple(views))


# The platform's own packages: never read again, whatever folder views.paths names (the project's
# own: a second definitions.views would make every view an instance of another class).
PLATFORM_PACKAGES = frozenset(
    ("definitions", "infra", "lambdactl", "ingest", "batch_layer", "speed_layer", "serving_layer", "api", "stores")
    + ("reports", "dags", "tests", "bench")
)


def _imported_from(folders) -> list[str]:
    """The names of the modules in sys.modules imported from one of `folders`: found through it, the
    nearest folder of sys.path holding their file (not an installed package beneath it, such as a
    virtualenv's), and none of the platform's own."""
    import sys
    from pathlib import Path

    roots = {Path(folder).resolve() for folder in folders}
    entries = sorted({Path(p).resolve() for p in sys.path if p}, key=lambda p: len(p.parts), reverse=True)
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("__") or name.split(".", 1)[0] in PLATFORM_PACKAGES:  # __main__: the process's own
            continue
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        path = Path(file).resolve()
        if next((e for e in entries if path.is_relative_to(e)), None) in roots:
            found.append(name)
    return found
