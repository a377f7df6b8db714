"""The replication core does no I/O: no module in ads_spark/replication imports an I/O or clock module."""

import ast
import pathlib

import ads_spark.replication as pkg

FORBIDDEN = {"socket", "threading", "asyncio", "time", "os", "subprocess", "random", "kazoo", "pyarrow",
             "pathlib", "io", "shutil", "tempfile", "select", "selectors", "multiprocessing", "concurrent",
             "datetime", "uuid", "secrets", "logging", "signal", "urllib", "http", "requests", "fsspec", "sys"}
# In-package modules that pull I/O in transitively (protocol/records.py imports time and pyarrow).
FORBIDDEN_INTERNAL = {"ads_spark.protocol.records", "ads_spark.broker", "ads_spark.client", "ads_spark.config"}


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("__import__", "open", "eval", "exec"):
            yield f"<call {node.func.id}>"


def test_replication_core_imports_no_io():
    root = pathlib.Path(pkg.__file__).parent
    offenders = []
    files = sorted(root.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in _imports(ast.parse(path.read_text(), filename=str(path))):
            top = name.split(".")[0]
            if top in FORBIDDEN or name.startswith("<call") or any(
                    name == m or name.startswith(m + ".") for m in FORBIDDEN_INTERNAL):
                offenders.append(f"{path.name}: {name}")
    assert not offenders, "I/O in the pure replication core: " + ", ".join(offenders)
