"""Every error the project defines is an AdserveError, so one `except AdserveError` catches all of them.

The walk finds the modules that define classes (by parsing them, so lazily imported modules count too),
imports each, and checks every exception class defined there."""
from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from core.errors import AdserveError, CapacityExceeded, InvalidArgument, InvalidSettings, TopicMissing

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "schemas", "streams", "serving", "jobs", "pipelines", "learning", "sim", "bench", "infra",
            "adserve")


def module_names_defining_classes(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Dotted names of the modules under `packages` whose source defines at least one class."""
    names = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            if any(isinstance(node, ast.ClassDef) for node in ast.walk(tree)):
                names.append(".".join(path.relative_to(root).with_suffix("").parts))
    return names


def foreign_errors(module: ModuleType) -> list[str]:
    """The exception classes defined in `module` that are not AdserveErrors."""
    return [f"{module.__name__}.{name}" for name, value in vars(module).items()
            if inspect.isclass(value) and value.__module__ == module.__name__
            and issubclass(value, BaseException) and not issubclass(value, AdserveError)]


def test_every_project_exception_is_an_adserve_error():
    modules = module_names_defining_classes(REPO_ROOT, PACKAGES)
    assert len(modules) > 50  # the walk found the project, not an empty folder
    offenders = [name for module in modules for name in foreign_errors(importlib.import_module(module))]
    assert offenders == []


BUILTIN_ERRORS = {"Exception", "ValueError", "RuntimeError", "KeyError", "LookupError", "OSError"}


def builtin_raises(root: Path, packages: tuple[str, ...]) -> list[str]:
    """`path:line` of every `raise ValueError(...)` and the like: project code raises its own error types."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                        and isinstance(node.exc.func, ast.Name) and node.exc.func.id in BUILTIN_ERRORS:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_project_code_raises_its_own_errors_not_bare_builtins():
    assert builtin_raises(REPO_ROOT, PACKAGES) == []


def test_the_raise_check_finds_a_bare_value_error(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def f(x):\n    if x:\n        raise ValueError('bad x')\n")
    assert builtin_raises(tmp_path, ("pkg",)) == ["pkg/mod.py:3"]


def test_the_check_names_an_exception_outside_the_project_root(tmp_path, monkeypatch):
    package = tmp_path / "errpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("from core.errors import AdserveError\n\n"
                                    "class Fine(AdserveError):\n    pass\n\n"
                                    "class Stray(ValueError):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "errpkg", raising=False)
    modules = module_names_defining_classes(tmp_path, ("errpkg",))
    assert modules == ["errpkg.bad"]
    assert foreign_errors(importlib.import_module("errpkg.bad")) == ["errpkg.bad.Stray"]


@pytest.mark.parametrize("error", [InvalidSettings, InvalidArgument, CapacityExceeded])
def test_value_errors_of_the_project_are_still_value_errors(error):
    """Callers that catch ValueError (argument parsers, `pytest.raises(ValueError)`) keep catching them."""
    assert issubclass(error, AdserveError) and issubclass(error, ValueError)


def test_a_missing_topic_is_still_a_runtime_error():
    assert issubclass(TopicMissing, AdserveError) and issubclass(TopicMissing, RuntimeError)
