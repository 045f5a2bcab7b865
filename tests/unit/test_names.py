"""Every global name a project function reads is defined in its module or is a builtin.

A name lost in a move (a constant left behind in another module) fails only when its line runs; some lines
run only in a command's rarer paths, so this reads every function's bytecode instead of waiting for them."""
from __future__ import annotations

import builtins
import dis
import importlib
import pkgutil
import types

PACKAGES = ("core", "schemas", "streams", "serving", "jobs", "pipelines", "learning", "infra", "sim", "bench",
            "adserve")


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def undefined_globals(module: types.ModuleType, source: str) -> set[tuple[str, str]]:
    """(function, name) for each global read in `source` that `module` does not define and no builtin is."""
    found = set()
    for code in _code_objects(compile(source, module.__file__ or "<module>", "exec")):
        for instruction in dis.get_instructions(code):
            name = instruction.argval
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and name not in vars(module) \
                    and not hasattr(builtins, name):
                found.add((code.co_name, name))
    return found


def _project_modules():
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if not info.name.endswith("__main__"):
                yield importlib.import_module(info.name)


def test_no_project_function_reads_an_undefined_global():
    missing = [f"{module.__name__}.{function}: {name}" for module in _project_modules()
               for function, name in sorted(undefined_globals(module, open(module.__file__).read()))]
    assert not missing, "undefined names:\n" + "\n".join(missing)


def test_the_check_finds_a_name_lost_in_a_move():
    module = types.ModuleType("moved")
    module.__file__ = "moved.py"
    source = "COUNTRIES = ['US']\n\ndef pick(rng):\n    return rng.sample(INTERESTS, 1) + COUNTRIES\n"
    exec(compile(source, "moved.py", "exec"), vars(module))
    assert undefined_globals(module, source) == {("pick", "INTERESTS")}
