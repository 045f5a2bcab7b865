"""The jobs.common names that jobs/features/functions.py imports from here: the dead-letter decoder and row
types. Every other module imports them from jobs.common directly."""
from __future__ import annotations

from jobs.common.dead_letters import DeadLetterDecoder, dead_letter_row
from jobs.common.kafka_tables import bytes_row_type, timed_bytes_row_type

__all__ = ["DeadLetterDecoder", "bytes_row_type", "dead_letter_row", "timed_bytes_row_type"]
