"""The Dataflow worker package and Flex Templates against the code they ship (deploy/dataflow): the package holds
every module the pipelines import and its requirements are the project's pins, each pipeline's template
parameters are exactly its flags, and Beam's staging flags pass through every pipeline's parser."""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from pipelines import options as pipeline_options

ROOT = Path(__file__).resolve().parents[2]
DATAFLOW = ROOT / "deploy" / "dataflow"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIPELINES = sorted(p.stem for p in (ROOT / "pipelines").glob("*.py")
                   if any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in ast.parse(p.read_text()).body))
LOCAL = {"adserve", "core", "schemas", "streams", "jobs", "pipelines", "serving", "learning", "infra", "sim", "bench"}


class _Parsed(Exception):
    """Raised by the stand-in for parse_options, carrying what the pipeline handed it."""


def pipeline_parser(name: str, monkeypatch) -> tuple[argparse.ArgumentParser, type]:
    """(the pipeline's argument parser, its typed options class), as its run() builds them."""
    module = importlib.import_module(f"pipelines.{name}")

    def stand_in(parser, options_type, argv, save_main_session):
        raise _Parsed(parser, options_type)

    monkeypatch.setattr(module, "parse_options", stand_in)
    with pytest.raises(_Parsed) as parsed:
        module.run([])
    return parsed.value.args


def flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's flags by template parameter name (underscores), help left out."""
    return {action.option_strings[0][2:].replace("-", "_"): action for action in parser._actions
            if action.option_strings and not isinstance(action, argparse._HelpAction)}


def metadata(name: str) -> dict:
    return json.loads((DATAFLOW / "templates" / f"{name}.metadata.json").read_text())


def requirement_lines() -> list[str]:
    lines = (DATAFLOW / "requirements.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def test_the_pipelines_are_found():
    assert PIPELINES == ["archive_erasure", "auction_replay", "event_counts", "nightly_recount", "traffic_curves",
                         "training_set"]


@pytest.mark.parametrize("name", PIPELINES)
def test_each_pipelines_template_parameters_are_exactly_its_flags(name, monkeypatch):
    parser, _ = pipeline_parser(name, monkeypatch)
    declared = flags(parser)
    parameters = {p["name"]: p for p in metadata(name)["parameters"]}
    assert sorted(parameters) == sorted(declared)
    for parameter_name, action in declared.items():
        parameter = parameters[parameter_name]
        assert parameter["label"] and parameter["helpText"], parameter_name
        assert parameter["isOptional"] is (not action.required), parameter_name
        assert (parameter.get("paramType") == "BOOLEAN") is isinstance(action, argparse._StoreTrueAction)
        patterns = [re.compile(regex) for regex in parameter["regexes"]]
        if action.default not in (None, [], False):  # a default must itself be a value the template accepts
            assert all(p.fullmatch(str(action.default)) for p in patterns), (parameter_name, action.default)


def test_every_template_is_of_a_pipeline():
    assert sorted(p.name.removesuffix(".metadata.json") for p in (DATAFLOW / "templates").glob("*.json")) == PIPELINES


def _imports_of(module: str) -> tuple[set[str], set[str]]:
    """(the project modules `module` reaches through its imports, lazy ones included; the third-party top-level
    names they import)."""
    seen, third_party, todo = set(), set(), [module]
    while todo:
        current = todo.pop()
        path = ROOT / (current.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / current.replace(".", "/") / "__init__.py"
        if current in seen or not path.exists():
            continue
        seen.add(current)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module, *(f"{node.module}.{a.name}" for a in node.names)] \
                if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for imported in names:
                top = imported.split(".")[0]
                if top in LOCAL:
                    todo.append(imported)
                elif top not in sys.stdlib_module_names:
                    third_party.add(top)
    return seen, third_party


def test_the_worker_package_holds_every_module_the_pipelines_import_and_nothing_above_them():
    setup = ast.parse((DATAFLOW / "setup.py").read_text())
    packaged = next(ast.literal_eval(n.value) for n in setup.body if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", "") == "WORKER_PACKAGES")
    reached, third_party = set(), set()
    for name in PIPELINES:
        modules, imported = _imports_of(f"pipelines.{name}")
        reached |= modules
        third_party |= imported
    assert {m.split(".")[0] for m in reached} == set(packaged) == {"core", "schemas", "pipelines"}
    provided = {"apache_beam"} | {line.split("==")[0].replace("-", "_") for line in requirement_lines()}
    assert third_party <= provided, third_party - provided


def test_the_worker_requirements_are_the_projects_pins_without_flink_or_tensorflow():
    pins = set(PYPROJECT["project"]["dependencies"])
    assert requirement_lines() and set(requirement_lines()) <= pins
    assert not [line for line in requirement_lines() if line.startswith(("apache-flink", "tensorflow"))]
    assert f'VERSION = "{PYPROJECT["project"]["version"]}"' in (DATAFLOW / "setup.py").read_text()
    beam = next(p for p in pins if p.startswith("apache-beam=="))
    assert f"BEAM_VERSION={beam.split('==')[1]}" in (DATAFLOW / "Dockerfile").read_text()


def _required_arguments(name: str) -> list[str]:
    samples = {"day": "2026-01-05", "from_day": "2026-01-05"}
    return [f"--{p['name']}={samples.get(p['name'], 'x')}" for p in metadata(name)["parameters"]
            if not p["isOptional"]]


@pytest.mark.parametrize("name", PIPELINES)
def test_beams_staging_flags_pass_through_each_pipelines_parser(name, monkeypatch):
    parser, options_type = pipeline_parser(name, monkeypatch)
    argv = _required_arguments(name) + ["--setup_file", "deploy/dataflow/setup.py",
                                        "--requirements_file=deploy/dataflow/requirements.txt",
                                        "--extra_package=dist/adserve_pipelines-0.1.0.tar.gz",
                                        "--runner=DataflowRunner", "--save_main_session"]
    _, beam_options = pipeline_options.parse_options(parser, options_type, argv, save_main_session=False)
    setup = beam_options.view_as(SetupOptions)
    assert (setup.setup_file, setup.requirements_file, setup.extra_packages) == (
        "deploy/dataflow/setup.py", "deploy/dataflow/requirements.txt", ["dist/adserve_pipelines-0.1.0.tar.gz"])


def test_a_flag_may_be_spelled_with_underscores_as_template_parameters_are(monkeypatch):
    parser, options_type = pipeline_parser("training_set", monkeypatch)
    options, _ = pipeline_options.parse_options(
        parser, options_type, ["--output=o", "--from_day=2026-01-05", "--keep_rate", "0.5", "--served_topic=s"],
        save_main_session=False)
    assert (options.from_day, options.keep_rate, options.served_topic) == ("2026-01-05", 0.5, "s")


def test_no_pipeline_flag_is_also_a_beam_option(monkeypatch):
    beam_names = set(PipelineOptions([]).get_all_options())
    for name in PIPELINES:
        parser, _ = pipeline_parser(name, monkeypatch)
        assert not set(flags(parser)) & beam_names, name


def _launcher():
    spec = importlib.util.spec_from_file_location("dataflow_launch", DATAFLOW / "launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_turns_a_boolean_parameter_into_the_pipelines_switch():
    launch = _launcher()
    assert launch.switches(["--recommend=true", "--min_fill=0.8", "--runner=DataflowRunner"], {"recommend"}) == [
        "--recommend", "--min_fill=0.8", "--runner=DataflowRunner"]
    assert launch.switches(["--recommend=false", "--output=o"], {"recommend"}) == ["--output=o"]


def test_the_launcher_refuses_a_pipeline_it_has_no_template_for(monkeypatch):
    monkeypatch.setenv("ADSERVE_PIPELINE", "no_such_pipeline")
    with pytest.raises(SystemExit, match="ADSERVE_PIPELINE='no_such_pipeline': expected one of archive_erasure"):
        _launcher().main([])


def test_the_launcher_image_points_the_template_variables_at_the_files_it_copies():
    dockerfile = (DATAFLOW / "Dockerfile").read_text()
    assert "FROM ${LAUNCHER_BASE}" in dockerfile and "python311-template-launcher-base" in dockerfile
    variables = dict(re.findall(r"(FLEX_TEMPLATE_PYTHON_\w+)=/template/(\S+)", dockerfile))
    assert variables == {"FLEX_TEMPLATE_PYTHON_PY_FILE": "deploy/dataflow/launch.py",
                         "FLEX_TEMPLATE_PYTHON_SETUP_FILE": "deploy/dataflow/setup.py",
                         "FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE": "deploy/dataflow/requirements.txt"}
    assert all((ROOT / path).is_file() for path in variables.values())
    copied = set(re.findall(r"^COPY (\S+)/ ", dockerfile, re.MULTILINE))
    assert copied == {"core", "schemas", "pipelines", "deploy/dataflow"}
    context = (DATAFLOW / "Dockerfile.dockerignore").read_text().splitlines()
    assert {f"!{path}/" for path in copied} <= set(context)
