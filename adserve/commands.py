"""Subcommands beyond the platform's up/down/status: jobs, pipelines, benchmarks, the main demo."""
from __future__ import annotations


def register(sub) -> None:
    pass
