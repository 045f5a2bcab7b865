"""A batch pipeline's flags as a typed options object, beside the Beam PipelineOptions of the runner.

`run(argv)` of each pipeline parses its own flags into a frozen dataclass (logged once, secrets masked) and
hands the rest of argv to Beam; the pipeline body takes the typed object, never the argparse namespace.
Beam's own flags (--runner, --setup_file, --requirements_file, --extra_package, --save_main_session, ...) pass
through untouched: the pipeline's parser matches whole flags only, so a Beam flag is never read as an
abbreviation of a pipeline flag. A pipeline flag may also be spelled with underscores (--from_day for
--from-day), the form Dataflow Flex Template parameters take. `python -m pipelines.<name>` runs the pipeline
from its package module (run_as_main), so workers need only the installed package, never a main session.
Flags of the pipelines over the served log are ServedLogOptions' fields (avro_files.add_served_log_arguments)."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import sys
from dataclasses import dataclass
from typing import Sequence, TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

from core.settings import describe

T = TypeVar("T")


def parse_options(parser: argparse.ArgumentParser, options_type: type[T], argv: Sequence[str] | None,
                  save_main_session: bool) -> tuple[T, PipelineOptions]:
    """(the pipeline's typed options, Beam's options from the flags the parser does not know)."""
    parser.allow_abbrev = False
    known, pipeline_args = parser.parse_known_args(hyphenated(parser, sys.argv[1:] if argv is None else argv))
    options = options_type(**{f.name: getattr(known, f.name) for f in dataclasses.fields(options_type)})
    logging.info("%s options: %s", parser.prog, describe(options))
    return options, PipelineOptions(pipeline_args, save_main_session=save_main_session)


def hyphenated(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """argv with `--a_b` / `--a_b=v` written `--a-b` where `--a-b` is one of the parser's flags; the rest as given."""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    spelled = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        dashed = "--" + name[2:].replace("_", "-")
        spelled.append(dashed + sep + value if name.startswith("--") and dashed in flags and name not in flags
                       else arg)
    return spelled


def run_as_main(module_name: str, entry: str = "run") -> None:
    """`python -m pipelines.<name>`: the pipeline run from its package module rather than from __main__.

    What Beam pickles then names `pipelines.<name>`, which workers import from the installed worker package
    (deploy/dataflow), and no main session is saved: dill saves the classes of a module started with -m by
    reference to a __main__ that a worker does not have, so such a session cannot be loaded there."""
    logging.getLogger().setLevel(logging.INFO)
    getattr(importlib.import_module(module_name), entry)(save_main_session=False)


@dataclass(frozen=True)
class ServedLogOptions:
    """Where the served log is read: the archive and a range of UTC days, or files."""

    archive: str | None = None
    from_day: str | None = None
    to_day: str | None = None
    served: tuple[str, ...] | list[str] = ()
    served_topic: str = ""
