"""The Beam DoFn that turns archived envelopes (or plain records) into normalised domain records.

Kept apart from pipelines.avro_files so that reading archive files never imports Beam for a caller that
does not run a pipeline. It must never drop a record silently: what does not decode goes to `corrupt`."""
from __future__ import annotations

import apache_beam as beam

from core.errors import CorruptRecord
from pipelines.avro_files import CORRUPT, unwrap


class Unwrap(beam.DoFn):
    """Archived envelope -> domain record; a value that does not decode goes to the `corrupt` output as its
    reason, and is counted (Beam metric corrupt_records)."""

    def setup(self):
        from schemas.codec import AvroCodec

        self.codec = AvroCodec()
        self.corrupt = beam.metrics.Metrics.counter("archive", "corrupt_records")

    def process(self, record):
        try:
            yield unwrap(record, self.codec)
        except CorruptRecord as error:
            self.corrupt.inc()
            yield beam.pvalue.TaggedOutput(CORRUPT, str(error))
