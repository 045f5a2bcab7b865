"""A job's entry point, declared once: its name, settings class, topology and what sets it apart (its bundle
time, changelog default, flags beyond its settings' options, extra jars, environment adjustments). `Job.main`
parses the flags into the settings and hands them to run_job."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from jobs.common.args import job_parser, parse, settings_of
from jobs.common.environment import run_job


@dataclass(frozen=True)
class Job:
    """One job's entry point. `flags(parser)` declares flags beyond the settings' options, and `derive(args)`
    the settings computed from them (by field name); `extra_jars()` the jars shipped beside the Kafka
    connector; `configure(env, t_env)` adjusts the environment before the topology is built."""

    name: str
    settings_class: type
    build: Callable[[Any, Any], None]
    description: str | None = None
    bundle_time_ms: int = 1000
    state_changelog: bool = False
    flags: Callable[[argparse.ArgumentParser], None] | None = None
    derive: Callable[[argparse.Namespace], dict[str, Any]] | None = None
    extra_jars: Callable[[Any], Sequence[Path]] | None = None
    configure: Callable[[Any, Any], None] | None = None

    def parser(self) -> argparse.ArgumentParser:
        parser = job_parser(self.name, self.description, self.settings_class, bundle_time_ms=self.bundle_time_ms,
                            state_changelog=self.state_changelog)
        if self.flags is not None:
            self.flags(parser)
        return parser

    def parse_settings(self, argv: Sequence[str] | None = None) -> Any:
        args = parse(self.parser(), argv)
        return settings_of(self.settings_class, args, self.name, **(self.derive(args) if self.derive else {}))

    def run(self, settings: Any) -> None:
        jars = self.extra_jars(settings) if self.extra_jars is not None else ()
        run_job(self.name, settings, self.build, extra_jars=jars, configure=self.configure)

    def main(self, argv: Sequence[str] | None = None) -> None:
        self.run(self.parse_settings(argv))
