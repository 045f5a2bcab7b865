"""Beam's side of the archive: the DoFn that turns archived envelopes (or plain records) into normalised
domain records, and the transform that reads archive files through it.

Kept apart from pipelines.avro_files (plain helpers, no Beam import) so a command that only lists or
names archive files never imports Beam. It must never drop a record silently: what does not decode goes to
`corrupt`, counted."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.avroio import ReadAllFromAvro

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


def unwrap_dofn() -> Unwrap:
    """A fresh Unwrap DoFn, for a ParDo with outputs (records, CORRUPT)."""
    return Unwrap()


def read_records(pipeline, label: str, files: list[str]):
    """(records, corrupt): the files' records, unwrapped and normalised, and the reasons of those that do not
    decode (counted); labels are prefixed with `label` so a pipeline can read several sets of files."""
    decoded = (pipeline | f"{label}Files" >> beam.Create(files)
               | f"Read{label}" >> ReadAllFromAvro()
               | f"Unwrap{label}" >> beam.ParDo(Unwrap()).with_outputs(CORRUPT, main="records"))
    return decoded.records, decoded[CORRUPT]
