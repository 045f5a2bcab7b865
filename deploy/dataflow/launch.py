"""The Flex Template launcher's entry (FLEX_TEMPLATE_PYTHON_PY_FILE): runs the pipeline this image was built for
(ADSERVE_PIPELINE, e.g. `event_counts`) with the template's parameters.

The launcher calls this file with each template parameter as `--name=value` (names as in
templates/<pipeline>.metadata.json, the pipeline's flags with underscores) and the launch's Beam options
(runner, project, region, temp and staging locations, `--setup_file` from FLEX_TEMPLATE_PYTHON_SETUP_FILE,
`--requirements_file` from FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE). A BOOLEAN parameter arrives as
`--name=true|false` and becomes the pipeline's switch (`--name`, or nothing).

The pipeline runs with save_main_session=False: its functions live in the installed package `pipelines` (this
image installs the worker package, setup.py), so workers unpickle them by reference to the same package, which
they install from the staged setup file; nothing is pickled from this file's main session."""
from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

TEMPLATES = Path(__file__).resolve().parent / "templates"


def metadata(pipeline: str) -> dict[str, Any]:
    """The pipeline's Flex Template metadata."""
    return json.loads((TEMPLATES / f"{pipeline}.metadata.json").read_text())


def switches(argv: Sequence[str], boolean_parameters: set[str]) -> list[str]:
    """argv with `--name=true` written `--name` and `--name=false` left out, for the BOOLEAN parameters."""
    arguments = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        if sep and name.startswith("--") and name[2:] in boolean_parameters:
            if value.strip().lower() == "true":
                arguments.append(name)
            continue
        arguments.append(arg)
    return arguments


def main(argv: Sequence[str] | None = None) -> Any:
    pipeline = os.environ.get("ADSERVE_PIPELINE", "")
    if not (TEMPLATES / f"{pipeline}.metadata.json").is_file():
        known = sorted(p.name.removesuffix(".metadata.json") for p in TEMPLATES.glob("*.metadata.json"))
        sys.exit(f"ADSERVE_PIPELINE={pipeline!r}: expected one of {', '.join(known)}")
    boolean = {p["name"] for p in metadata(pipeline)["parameters"] if p.get("paramType") == "BOOLEAN"}
    module = importlib.import_module(f"pipelines.{pipeline}")
    return module.run(switches(sys.argv[1:] if argv is None else argv, boolean), save_main_session=False)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    main()
