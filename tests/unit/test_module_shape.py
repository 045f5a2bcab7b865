"""The shape the codebase keeps: no module of the project packages over 600 lines, and no function taking more
than 8 parameters (self and cls not counted; *args and **kwargs count one each). A longer module is split along
its concerns; a longer signature groups what belongs together into a settings or dependencies object."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_layering import RANK, ROOT, project_modules

MAX_MODULE_LINES = 600
MAX_PARAMETERS = 8


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def long_signatures(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} takes {parameter_count(node)}"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parameter_count(node) > MAX_PARAMETERS]


def test_no_module_is_over_600_lines() -> None:
    long = [f"{path.relative_to(ROOT)}: {lines} lines" for path in project_modules(ROOT).values()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_no_function_takes_more_than_8_parameters() -> None:
    assert [line for path in project_modules(ROOT).values() for line in long_signatures(path)] == []


def test_the_count_leaves_out_self_and_counts_star_arguments() -> None:
    source = "class C:\n    def m(self, a, *rest, b, **more): ...\ndef f(a, b, c, d, e, f, g, h, i): ...\n"
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    assert sorted(parameter_count(n) for n in nodes) == [4, 9]
    assert set(RANK) >= {"core", "adserve"}
