"""The rule of the house, read from every import of the platform's code (no services).

Layers meet only in `definitions/` (contracts) and `stores/` (the one place each store is spoken
to): `ingest`, `batch_layer`, `speed_layer`, `serving_layer` and `reports` import only those (reports
may also use the serving layer); `api` may use `serving_layer` and `reports`; `infra` only
`definitions` and `stores`; `definitions` nothing of the project; `lambdactl`, `dags` and `bench`
compose everything. Only `stores/` imports the stores' client libraries (kafka-python,
happybase, cassandra-driver) or opens a raw connection with them (`stores.clients`): the others
call a store adapter's methods.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = (
    "definitions",
    "stores",
    "ingest",
    "batch_layer",
    "speed_layer",
    "serving_layer",
    "reports",
    "api",
    "infra",
    "lambdactl",
    "dags",
    "bench",
)
CONTRACTS = {"definitions", "stores"}
ALLOWED: dict[str, set[str]] = {
    "definitions": set(),
    "stores": {"definitions"},
    "ingest": CONTRACTS,
    "batch_layer": CONTRACTS,
    "speed_layer": CONTRACTS,
    "serving_layer": CONTRACTS,
    "reports": CONTRACTS | {"serving_layer"},
    "api": CONTRACTS | {"serving_layer", "reports"},
    "infra": CONTRACTS,
    "lambdactl": set(PACKAGES),
    "dags": set(PACKAGES),
    "bench": set(PACKAGES),
}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in PACKAGES:  # `from ingest import completeness`: the module is ingest.completeness
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def crossings(root: Path = ROOT) -> set[tuple[str, str]]:
    out = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            own = package
            for module in imports_of(path):
                top = module.split(".")[0]
                if top in PACKAGES and top != own and top not in ALLOWED[own]:
                    out.add((str(path.relative_to(root)), module))
    return out


def test_no_layer_imports_another_layer():
    new = sorted(crossings())
    assert not new, "imports that break the house rules (layers meet in definitions/ and stores/):\n" + "\n".join(
        f"  {f} imports {m}" for f, m in new
    )


# The client libraries of the stores, and the raw connections stores/clients.py opens with them:
# only stores/ uses them (bench/ measures the stores directly).
STORE_CLIENTS = ("kafka", "happybase", "cassandra")
RAW_CONNECTIONS = "stores.clients"


def _speaks_to_a_store(module: str) -> bool:
    return (
        module.split(".")[0] in STORE_CLIENTS or module == RAW_CONNECTIONS or module.startswith(RAW_CONNECTIONS + ".")
    )


def client_imports(root: Path = ROOT) -> set[tuple[str, str]]:
    out = set()
    for package in PACKAGES:
        if package in ("stores", "bench"):
            continue
        for path in sorted((root / package).rglob("*.py")):
            for module in imports_of(path):
                if _speaks_to_a_store(module):
                    out.add((str(path.relative_to(root)), module))
    return out


def test_only_stores_speak_to_a_store():
    found = sorted(client_imports())
    assert not found, "store clients imported outside stores/ (add what you need to a stores/ module):\n" + "\n".join(
        f"  {f} imports {m}" for f, m in found
    )


def test_the_client_check_sees_a_driver_imported_in_a_layer(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "serving_layer" / "added.py").write_text("def later():\n    import happybase\n")
    (tmp_path / "reports" / "raw.py").write_text("def later():\n    from stores.clients import cassandra_cluster\n")
    (tmp_path / "speed_layer" / "raw.py").write_text("from stores import clients\n")
    (tmp_path / "speed_layer" / "adapter.py").write_text("from stores.realtime import RealtimeWriter\n")
    (tmp_path / "stores" / "added.py").write_text("import happybase\nfrom stores.clients import hbase_pool\n")
    assert client_imports(tmp_path) == {
        ("serving_layer/added.py", "happybase"),
        ("reports/raw.py", "stores.clients"),
        ("speed_layer/raw.py", "stores.clients"),
    }


@pytest.mark.parametrize(
    ("package", "statement", "allowed"),
    [
        ("serving_layer", "from batch_layer import layout", False),
        ("speed_layer", "import ingest.kafka_source", False),
        ("infra", "from speed_layer.realtime_store import ensure_schema", False),
        ("definitions", "from stores import checkpoints", False),
        ("api", "from serving_layer.service import ServingLayer", True),
        ("batch_layer", "from stores.checkpoints import read_marker", True),
        ("lambdactl", "from batch_layer.job import run_batch", True),
    ],
)
def test_the_check_sees_a_forbidden_import_anywhere_in_a_file(tmp_path, package, statement, allowed):
    module = tmp_path / package / "added.py"
    module.parent.mkdir()
    module.write_text(f"def later():\n    {statement}\n")
    for other in PACKAGES:
        (tmp_path / other).mkdir(exist_ok=True)
    assert (not crossings(tmp_path)) == allowed


def logging_setups(root: Path = ROOT) -> set[str]:
    """Files of the project that configure logging themselves (`logging.basicConfig`, or a
    `logging.config` set-up) instead of through definitions.logs, the one set-up."""
    found = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "definitions" / "logs.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                attribute = (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and (node.value.id, node.attr) in {("logging", "basicConfig"), ("logging", "config")}
                )
                imported = (
                    isinstance(node, ast.ImportFrom)
                    and (
                        node.module == "logging.config"
                        or (node.module == "logging" and any(a.name in ("basicConfig", "config") for a in node.names))
                    )
                ) or (isinstance(node, ast.Import) and any(a.name == "logging.config" for a in node.names))
                if attribute or imported or _root_handler(node):
                    found.add(str(path.relative_to(root)))
    return found


def _root_handler(node: ast.AST) -> bool:
    """`<root logger>.addHandler(...)`: `logging.root`, `logging.getLogger()` or `logging.getLogger("")`
    (a handler on a named logger, such as a benchmark's marks, configures nothing else)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "addHandler"):
        return False
    target = node.func.value
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return (target.value.id, target.attr) == ("logging", "root")
    return (
        isinstance(target, ast.Call)
        and isinstance(target.func, ast.Attribute)
        and target.func.attr == "getLogger"
        and (not target.args or (isinstance(target.args[0], ast.Constant) and target.args[0].value in ("", None)))
    )


def test_logging_is_set_up_in_one_place():
    found = sorted(logging_setups())
    assert not found, "logging configured outside definitions/logs.py (call its configure):\n" + "\n".join(
        f"  {f}" for f in found
    )


@pytest.mark.parametrize(
    "source, found",
    [
        ("import logging\nlogging.basicConfig()\n", True),
        ("from logging import basicConfig\n", True),
        ("import logging.config\n", True),
        ("import logging\nlogging.getLogger().addHandler(logging.StreamHandler())\n", True),
        ("import logging\nlogging.getLogger('').addHandler(logging.StreamHandler())\n", True),
        ("import logging\nlogging.root.addHandler(logging.StreamHandler())\n", True),
        ("import logging\nlogging.getLogger('lambda.batch').addHandler(logging.NullHandler())\n", False),
        ("import logging\nlog = logging.getLogger(__name__)\nlog.info('x')\n", False),
    ],
)
def test_the_logging_rule_finds_each_way_of_configuring_the_root(tmp_path, source, found):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "module.py").write_text(source)
    assert logging_setups(tmp_path) == ({"api/module.py"} if found else set())
