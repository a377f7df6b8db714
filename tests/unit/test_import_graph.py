"""Holds the import structure to its rules: no cycles, a broker free of client code, tests that share only fixtures.

The graph is read from the source with ``ast`` (every import statement, including the ones inside
functions), so a cycle cannot hide behind a lazy import. An edge goes to the module an import names:
``import a.b`` and ``from a import b`` (``b`` a module) to ``a.b``, ``from a.b import name`` to ``a.b``
(a package: its ``__init__``). The enclosing packages' ``__init__`` modules Python also runs are not edges,
or every package that re-exports its own modules (``ads_spark.client``) would count as a cycle. The broker
check runs in a fresh interpreter because only ``sys.modules`` there tells what a broker process loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "ads_spark"
RUN_TIMEOUT_S = 120
# what a broker process (and the CLI parser it starts from) must never load
CLIENT_ONLY_MODULES = ("ads_spark.client", "ads_spark.client.producer", "ads_spark.client.consumer", "pyspark")


def _module_names(root: Path, top: str) -> dict[str, Path]:
    """Dotted name -> file for every module under ``root/top`` (a package's ``__init__`` is the package)."""
    modules = {}
    for path in sorted((root / top).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _base_package(module: str, path: Path, level: int) -> str:
    """The package a relative import of ``level`` dots in ``module`` starts from."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


def _longest_known(name: str, known: set[str]) -> str | None:
    """``name`` or its nearest enclosing package that is a known module."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The known modules that ``module`` imports anywhere in its source."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(_longest_known(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            base = _base_package(module, path, node.level) if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in known else _longest_known(source, known))
    targets.discard(None)
    targets.discard(module)
    return targets


def import_graph(root: Path, top: str) -> dict[str, set[str]]:
    """Module -> the modules under ``top`` it imports."""
    modules = _module_names(root, top)
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted (iterative, so depth is no limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            pushed = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    pushed = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def shortest_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    """A shortest loop from ``start`` back to itself through ``members`` (breadth first)."""
    parent: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if succ not in parent:
                    parent[succ] = node
                    following.append(succ)
        frontier = following
    return [start]


def describe_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per cycle: the component's modules and one concrete loop through them."""
    lines = []
    for component in strongly_connected(graph):
        loop = shortest_cycle(graph, component[0], set(component))
        lines.append(f"{{{', '.join(component)}}}: {' -> '.join(loop)}")
    return lines


def test_graph_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import thing\n")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("from .. import a\nthing = 1\n")
    (package / "c.py").write_text("import pkg.sub\n")
    (package / "d.py").write_text("from pkg import c\nfrom .sub import thing\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.sub"] == {"pkg.sub.b"}
    assert graph["pkg.c"] == {"pkg.sub"}
    assert graph["pkg.d"] == {"pkg.c", "pkg.sub"}
    assert describe_cycles(graph) == ["{pkg.a, pkg.sub.b}: pkg.a -> pkg.sub.b -> pkg.a"]


def test_ads_spark_has_no_import_cycles():
    cycles = describe_cycles(import_graph(REPO, PACKAGE))
    assert not cycles, "import cycles in ads_spark:\n" + "\n".join(cycles)


BROKER_IMPORTS_SCRIPT = f"""
import pkgutil, sys
import ads_spark.broker
from ads_spark.cli.main import build_parser
build_parser()
import ads_spark.broker.runtime
for info in pkgutil.walk_packages(ads_spark.broker.__path__, "ads_spark.broker."):
    __import__(info.name)
print(sorted(name for name in {CLIENT_ONLY_MODULES!r} if name in sys.modules))
"""


def test_cli_parser_and_broker_leave_client_and_spark_unimported():
    result = subprocess.run([sys.executable, "-c", BROKER_IMPORTS_SCRIPT], capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S, cwd=REPO)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines, result.stdout + result.stderr
    assert lines[-1] == "[]", f"the broker side imported client or Spark modules: {lines[-1]}"


def test_tests_import_helpers_only_from_fixtures():
    graph = import_graph(REPO, "tests")
    offenders = sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                       if target.rpartition(".")[2].startswith("test_"))
    assert not offenders, "tests import other test modules (move the helpers to tests/fixtures):\n" + \
        "\n".join(offenders)
