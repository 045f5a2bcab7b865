"""A batch pipeline's flags as a typed options object, beside the Beam PipelineOptions of the runner.

`run(argv)` of each pipeline parses its own flags into a frozen dataclass (logged once, secrets masked) and
hands the rest of argv to Beam; the pipeline body takes the typed object, never the argparse namespace.
Flags of the pipelines over the served log are ServedLogOptions' fields (avro_files.add_served_log_arguments)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass
from typing import Sequence, TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

from core.settings import describe

T = TypeVar("T")


def parse_options(parser: argparse.ArgumentParser, options_type: type[T], argv: Sequence[str] | None,
                  save_main_session: bool) -> tuple[T, PipelineOptions]:
    """(the pipeline's typed options, Beam's options from the flags the parser does not know)."""
    known, pipeline_args = parser.parse_known_args(argv)
    options = options_type(**{f.name: getattr(known, f.name) for f in dataclasses.fields(options_type)})
    logging.info("%s options: %s", parser.prog, describe(options))
    return options, PipelineOptions(pipeline_args, save_main_session=save_main_session)


@dataclass(frozen=True)
class ServedLogOptions:
    """Where the served log is read: the archive and a range of UTC days, or files."""

    archive: str | None = None
    from_day: str | None = None
    to_day: str | None = None
    served: tuple[str, ...] | list[str] = ()
    served_topic: str = ""
