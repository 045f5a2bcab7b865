"""Beam pipeline `event_counts`: events per campaign and event-time minute,
recomputed in batch from archived ad.events Avro container files.

The batch twin of the Flink smoke job: the counting rule is shared
(core.event_counts), so on the same events both give the same windows.
Reading and writing happen only in count_events(), which run() calls with the
typed options it parsed; the middle is one composite
transform, CountEventsPerMinute, tested with beam.Create.

    python -m pipelines.event_counts --input 'archive/ad.events/*.avro' --output out/event_counts
Every option Beam knows passes through unchanged, so the same command runs on
Dataflow with --runner=DataflowRunner --project=... --region=... --temp_location=gs://..."""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from core import event_counts as rules
from pipelines.avro_files import CORRUPT, schema_json
from pipelines.unwrap import unwrap_dofn
from pipelines.options import parse_options, run_as_main


class CountsCombineFn(beam.CombineFn):
    """Combines events of one (campaign, window) into rules.Counts."""

    def create_accumulator(self) -> rules.Counts:
        return rules.Counts()

    def add_input(self, accumulator: rules.Counts, event: dict[str, Any]) -> rules.Counts:
        return accumulator.add(event)

    def merge_accumulators(self, accumulators: Iterable[rules.Counts]) -> rules.Counts:
        merged = rules.Counts()
        for acc in accumulators:
            merged = merged.merge(acc)
        return merged

    def extract_output(self, accumulator: rules.Counts) -> rules.Counts:
        return accumulator


class CountEventsPerMinute(beam.PTransform):
    """AdEvent records -> EventCount records, one per campaign and window."""

    def __init__(self, window_ms: int = rules.DEFAULT_WINDOW_MS):
        super().__init__()
        self.window_ms = window_ms

    def expand(self, events):
        window_ms = self.window_ms
        return (
            events
            | "KeyByCampaignWindow" >> beam.Map(
                lambda e: ((e["campaign_id"], rules.window_start(e["event_time"], window_ms)), e))
            | "Count" >> beam.CombinePerKey(CountsCombineFn())
            | "ToRecord" >> beam.MapTuple(
                lambda key, counts: rules.event_count_record(key[0], key[1], counts, window_ms))
        )


@dataclass(frozen=True)
class EventCountsOptions:
    input: str  # file pattern of archived ad.events Avro container files
    output: str  # output prefix of the Avro shards
    window_ms: int = rules.DEFAULT_WINDOW_MS


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> None:
    parser = argparse.ArgumentParser(prog="pipelines.event_counts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="file pattern of archived ad.events Avro container files")
    parser.add_argument("--output", required=True, help="output prefix; shards are <prefix>-SSSSS-of-NNNNN.avro")
    parser.add_argument("--window-ms", type=int, default=rules.DEFAULT_WINDOW_MS)
    count_events(*parse_options(parser, EventCountsOptions, argv, save_main_session))


def count_events(options: EventCountsOptions, beam_options: PipelineOptions) -> None:
    with beam.Pipeline(options=beam_options) as pipeline:
        # Archiver envelopes are decoded (plain records pass through); undecodable values are counted.
        records = (pipeline
                   | "ReadArchive" >> beam.io.ReadFromAvro(options.input)
                   | "Unwrap" >> beam.ParDo(unwrap_dofn()).with_outputs(CORRUPT, main="records")).records
        (records
         | "CountEventsPerMinute" >> CountEventsPerMinute(options.window_ms)
         | "Write" >> beam.io.WriteToAvro(options.output, schema=schema_json("event_count.avsc"),
                                          file_name_suffix=".avro"))


if __name__ == "__main__":
    run_as_main("pipelines.event_counts")
