"""The typed settings `report_landing` runs with. Plain data: main.py builds them from flags and environment."""
from __future__ import annotations

from dataclasses import dataclass

from core.settings import describe
from schemas import topics


@dataclass(frozen=True)
class ReportLandingSettings:
    """Everything the job takes: where Kafka and the campaign store are, its topics, its consumer group (the
    key of its stored offsets) and how it batches. `until_caught_up`: stop once every partition is read up to
    where it ended when the job started (a backfill, a test)."""

    bootstrap: str
    postgres_dsn: str
    billed_topic: str = topics.BILLED_SPEND
    conversions_topic: str = topics.AD_CONVERSIONS
    dead_letter_topic: str = topics.DEAD_LETTERS
    group_id: str = "adserve-report-landing"
    max_batch_records: int = 5_000
    poll_timeout_s: float = 1.0
    until_caught_up: bool = False

    def describe(self) -> str:
        """The settings as one line, the database password masked: printed once at start."""
        return describe(self)
