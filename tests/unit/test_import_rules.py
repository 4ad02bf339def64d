"""The dependency rules of the tree, checked on the real code.

- ``llm_locust/analysis/`` imports nothing from the rest of ``llm_locust``, Locust or gevent (DESIGN.md: the run
  directory is the only contract).
- A Locust worker importing the run-directory schema pulls in neither pandas nor matplotlib.
- No import cycle: neither between modules nor between subpackages (``cli`` -> ``run``, never
  back; ``client`` imports no ``master``, ``run``, ``live`` or ``cli``).

The first two import modules in a fresh interpreter and read ``sys.modules``; the cycle checks
read every module's ``import`` statements with :mod:`ast`, the ones inside functions included
(a lazy import is still a dependency) and the ones under ``if TYPE_CHECKING:`` left out.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import llm_locust
from llm_locust import analysis

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

ROOT = Path(__file__).resolve().parents[2]


def _modules(package) -> list[str]:
    return sorted(
        [package.__name__] + [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    )


OURS = frozenset(_modules(analysis) + _modules(llm_locust))


def _loaded_after(statement: str) -> set[str]:
    """Module names in ``sys.modules`` after ``statement`` runs in a fresh interpreter: the top-level
    names, and every module of ``llm_locust`` by its full name."""
    code = (
        f"import json, sys\n{statement}\n"
        "print(json.dumps(sorted({m if m.startswith('llm_locust.') else m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_analysis_and_every_submodule_import_no_llm_locust_locust_or_gevent():
    modules = _modules(analysis)
    assert {
        "llm_locust.analysis.schema",
        "llm_locust.analysis.pipeline",
        "llm_locust.analysis.server.sources",
    } <= set(modules)

    loaded = _loaded_after("\n".join(f"import {name}" for name in modules))

    assert "pandas" in loaded  # the imports did run
    assert not loaded & {"locust", "gevent"}
    assert {name for name in loaded if name.startswith("llm_locust.")} <= set(modules)


def test_the_writer_side_of_the_schema_pulls_no_pandas_or_matplotlib():
    loaded = _loaded_after("import llm_locust.analysis.schema, llm_locust.client.record, llm_locust.client.failure")

    assert "llm_locust.analysis.schema" in loaded and not loaded & {"pandas", "matplotlib", "numpy"}


def _imports(name: str) -> set[str]:
    """Our modules that module ``name`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    path = importlib.util.find_spec(name).origin
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in OURS else base for alias in node.names}
    return {target for target in found if target in OURS and target != name}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


MODULE_GRAPH = {name: _imports(name) for name in sorted(OURS)}


def _subpackage(module: str) -> str:
    """``llm_locust.client.stream`` -> ``llm_locust.client``; ``llm_locust.cli`` stays itself; inside
    the analysis one level deeper: ``llm_locust.analysis.verdict.knee`` -> ``llm_locust.analysis.verdict``."""
    depth = 3 if module.startswith("llm_locust.analysis.") else 2
    return ".".join(module.split(".")[:depth])


def _subpackage_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for source, targets in MODULE_GRAPH.items():
        for target in targets:
            if "." in target and _subpackage(source) != _subpackage(target):
                edges.setdefault(_subpackage(source), set()).add(_subpackage(target))
    return edges


def test_the_graph_sees_the_real_imports():
    assert "llm_locust.run.postrun" in MODULE_GRAPH["llm_locust.cli"]
    assert "llm_locust.analysis.schema" in MODULE_GRAPH["llm_locust.client.record"]
    assert (
        "llm_locust.analysis.rundir.reader" not in MODULE_GRAPH["llm_locust.analysis.server.sources"]
    )  # TYPE_CHECKING only


KNOWN_MODULE_CYCLES: list[list[str]] = [
    # LogText.from_text (base) builds its LogText with read_log (reader), which imports LogText:
    # a lazy import inside the classmethod. To go: a from_text function in reader.
    ["llm_locust.analysis.server.serverlog.base", "llm_locust.analysis.server.serverlog.reader"],
]
"""Cycles there are today; the test fails on any other, and on one of these once it is gone (then
delete it here)."""


def test_no_import_cycle_between_modules():
    assert _cycles(MODULE_GRAPH) == KNOWN_MODULE_CYCLES


def test_no_import_cycle_between_subpackages():
    edges = _subpackage_graph()

    assert _cycles(edges) == []
    assert "llm_locust.cli" not in edges["llm_locust.run"]
    assert not edges["llm_locust.client"] & {"llm_locust.master", "llm_locust.run", "llm_locust.live", "llm_locust.cli"}
    assert not {
        target
        for source, targets in edges.items()
        if source.startswith("llm_locust.analysis")
        for target in targets
        if not target.startswith("llm_locust.analysis")
    }


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}) == [["a", "b", "c"]]
