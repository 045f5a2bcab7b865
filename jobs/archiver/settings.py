"""The typed settings `archiver` runs with: the Kafka plumbing, what to archive, where, and when an hour is
complete. Plain data: main.py builds them from flags and environment, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.flink_io import KafkaJobSettings


@dataclass(frozen=True)
class ArchiverSettings:
    """Everything the job takes: the Kafka plumbing, what to archive, where, and when an hour is complete."""

    kafka: KafkaJobSettings
    archive_uri: str
    topics: tuple[str, ...]
    avro_jar: str
    out_of_orderness_ms: int = 2000
    idle_timeout_ms: int = 2000
    commit_delay_s: int = 60
