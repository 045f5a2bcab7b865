"""The project's layering, read from the source: every import (module level or inside a function) of every
module in the project packages, checked against the layers below, and the module graph checked for cycles.

Layers, lowest first; a module may import its own package and any package of a lower layer:
  core < schemas < streams < {serving, jobs, pipelines} < learning < infra < sim < bench < adserve
Packages in braces share a layer and must not import each other. infra (the platform controller) sits below
the simulators and benchmarks because they start and stop the platform through it; bench sits above sim
because the benchmarks run on sim's synthetic worlds. Nothing in a lower layer may know either."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"core"}), frozenset({"schemas"}), frozenset({"streams"}),
    frozenset({"serving", "jobs", "pipelines"}), frozenset({"learning"}), frozenset({"infra"}),
    frozenset({"sim"}), frozenset({"bench"}), frozenset({"adserve"}))
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def project_modules(root: Path, packages=tuple(RANK)) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name (a package's own name is its __init__)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` refers to: itself, or the nearest enclosing module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes under `if TYPE_CHECKING:`: imports for annotations, never executed."""
    guarded = [node for node in ast.walk(tree) if isinstance(node, ast.If)
               and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"]
    return {inner for node in guarded for statement in node.body for inner in ast.walk(statement)}


def imports_of(name: str, modules: dict[str, Path], runtime_only: bool = False) -> set[str]:
    """The project modules `name` imports anywhere in its source (`from p import m` counts p.m when m is one);
    runtime_only leaves out the imports under `if TYPE_CHECKING:`."""
    path = modules[name]
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree) if runtime_only else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, path.name == "__init__.py")
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        else:
            continue
        found.update(owner for target in targets if (owner := _owner(target, modules)) and owner != name)
    return found


def import_graph(modules: dict[str, Path], runtime_only: bool = False) -> dict[str, set[str]]:
    return {name: imports_of(name, modules, runtime_only) for name in modules}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """'importer -> imported' for each import of a package in a higher layer or a sibling of the same layer."""
    out = []
    for importer, imported in sorted(graph.items()):
        here = importer.split(".")[0]
        for target in sorted(imported):
            there = target.split(".")[0]
            if there != here and RANK[there] >= RANK[here]:
                out.append(f"{importer} -> {target}")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next((t for t in edges if t in graph and (t not in index or t in on_stack)), None)
            if step is not None and step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
                continue
            if step is not None:
                low[node] = min(low[node], index[step])
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
                    found.append(sorted(component))
    return found


def test_no_module_imports_a_package_of_its_own_layer_or_above():
    violations = layer_violations(import_graph(project_modules(ROOT)))
    assert not violations, "imports against the layering:\n" + "\n".join(violations)


def test_no_modules_import_each_other_in_a_cycle():
    """Annotation-only imports (under TYPE_CHECKING) may point back; an executed import, lazy or not, may not."""
    found = cycles(import_graph(project_modules(ROOT), runtime_only=True))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return project_modules(root, ("core", "serving", "jobs", "adserve"))


def test_the_checker_reports_a_lazy_import_from_a_higher_layer_and_between_siblings(tmp_path):
    modules = _tree(tmp_path, {
        "core/__init__.py": "", "core/rule.py": "def f():\n    from adserve.cli import main\n",
        "serving/__init__.py": "", "serving/app.py": "from jobs import deploy\nfrom core import rule\n",
        "jobs/__init__.py": "", "jobs/deploy.py": "from ..core.rule import f\n",
        "adserve/__init__.py": "", "adserve/cli.py": "import serving.app\nmain = 1\n"})
    assert layer_violations(import_graph(modules)) == ["core.rule -> adserve.cli", "serving.app -> jobs.deploy"]


def test_the_checker_finds_a_cycle_through_a_lazy_import(tmp_path):
    modules = _tree(tmp_path, {
        "serving/__init__.py": "", "serving/a.py": "from serving import b\n",
        "serving/b.py": "def g():\n    from serving.c import x\n", "serving/c.py": "from . import a\nx = 1\n",
        "serving/d.py": "from serving import a\n",
        "serving/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from serving.f import y\n",
        "serving/f.py": "from serving.e import TYPE_CHECKING\ny = 1\n"})
    assert cycles(import_graph(modules, runtime_only=True)) == [["serving.a", "serving.b", "serving.c"]]
    assert ["serving.e", "serving.f"] in cycles(import_graph(modules))
