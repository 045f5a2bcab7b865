"""The dead-letter side output every job shares, and the decode-or-dead-letter adapter: a ProcessFunction over
raw Kafka rows whose subclass says only what a decoded record becomes. Top-level classes, so PyFlink pickles
them by reference; they hold no rule of the product."""
from __future__ import annotations

import abc
from typing import Iterable, Mapping

from pyflink.datastream import OutputTag, ProcessFunction, RuntimeContext

from jobs.common.dead_letters import DeadLetterDecoder
from jobs.common.kafka_tables import bytes_row_type

DEAD_LETTERS = OutputTag("dead-letters", bytes_row_type())  # a job's dead.letters rows (jobs.common.dead_letters)


class DecodeOrDeadLetter(ProcessFunction):
    """Decodes each row's value (schemas.codec); a decoded record goes to `emit`, a corrupt value to DEAD_LETTERS
    with its topic, partition and offset (counted, `corrupt_records`). A subclass sets `job_name`, the record type
    of each row kind (`record_types`, or overrides `record_type`), the names of the row's partition and offset
    fields (`coordinates`: a source table's, or the JVM's shorter ones), and writes `emit`."""

    job_name = ""
    record_types: Mapping[str, str] = {}
    coordinates = ("partition", "offset")

    def open(self, runtime_context: RuntimeContext):
        from schemas.codec import AvroCodec

        self.codec = AvroCodec()
        self.corrupt = runtime_context.get_metrics_group().counter("corrupt_records")
        self.decoder = DeadLetterDecoder(self.job_name, self.codec, self.corrupt)

    def record_type(self, row) -> str:
        """The record type of a row's value: by its kind."""
        return self.record_types[row.kind]

    def timestamp_ms(self, row) -> int | None:
        """The row's Kafka timestamp for its dead letter; None where the job does not keep it."""
        return None

    def process_element(self, row, ctx):
        partition, offset = (getattr(row, name) for name in self.coordinates)
        record, dead = self.decoder.decode(row.v, self.record_type(row), topic=row.topic, partition=partition,
                                           offset=offset, key=row.k, timestamp_ms=self.timestamp_ms(row))
        if dead is not None:
            yield DEAD_LETTERS, dead
            return
        yield from self.emit(record, row, ctx)

    @abc.abstractmethod
    def emit(self, record: dict, row, ctx) -> Iterable:
        """What a decoded record becomes: rows of the main output, or (tag, row) pairs of side outputs."""
