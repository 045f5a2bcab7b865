"""Beam pipeline `training_set`: the training join as a backfill over the archive (or any files of served
records and beacons), for a range of days. The same label rule and down-sampling as the streaming job
`training_join`, from the same module (core.training), so on the same data both give the same examples.

Reads archived ad.served for the days asked and ad.events for those days and the day after (a label is
final an hour after serving, so a click after midnight still counts), groups everything by impression
id, and keeps one example per impression served in the range (core.training.example_of_impression).

Output: `<output>/examples-SSSSS-of-NNNNN.avro` (TrainingExample, the contract of training.examples) and
`<output>/summary.json` ({"from_day", "to_day", "keep_rate", "served_records", "events", "examples",
"positives", "negatives_kept", "corrupt_records"}).

    python -m pipelines.training_set --archive .platform/archive --from-day 2026-03-10 --to-day 2026-03-11 \\
        --output out/training-set
    python -m pipelines.training_set --served 'day/served.avro' --events 'day/events.avro' --output out/ts
Every option Beam knows passes through (Dataflow: --runner=DataflowRunner --project=... --region=...)."""
from __future__ import annotations

import argparse
import json
import logging
from datetime import date, timedelta
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core import training
from pipelines.avro_files import (add_served_log_arguments, archive_pattern, count_of, matching_files, of_days,
                                  output_folder, read_records, schema_json, served_log_files)


class JoinExamples(beam.PTransform):
    """(ServedRecord records, AdEvent records) -> TrainingExample records, by core.training's rules."""

    def __init__(self, keep_rate: float = training.DEFAULT_KEEP_RATE):
        super().__init__()
        self.keep_rate = keep_rate

    def expand(self, inputs):
        served, events = inputs
        contexts = served | "Impressions" >> beam.FlatMap(
            lambda r: [(i["impression_id"], i) for i in training.impressions_of(r)])
        beacons = events | "KeyBeacons" >> beam.Map(lambda e: (str(e["impression_id"]), e))
        keep_rate = self.keep_rate
        return ({"served": contexts, "events": beacons}
                | "GroupByImpression" >> beam.CoGroupByKey()
                | "Label" >> beam.FlatMap(lambda kv: [made for made in [training.example_of_impression(
                    sorted(kv[1]["served"], key=lambda c: c["served_time"]), kv[1]["events"], keep_rate)]
                    if made is not None]))


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="pipelines.training_set", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_served_log_arguments(parser)
    parser.add_argument("--events", action="append", default=[],
                        help="instead of --archive: Avro files (glob) of beacons; repeatable")
    parser.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                        help=f"share of negatives kept (default {training.DEFAULT_KEEP_RATE}); every click is kept")
    parser.add_argument("--output", required=True, help="folder for the examples and summary.json")
    parser.add_argument("--events-topic", default="ad.events", help="archive folder of the beacons")
    known, pipeline_args = parser.parse_known_args(argv)
    if not known.archive and not known.events:
        parser.error("give --archive with --from-day, or --served and --events files")
    days, served_files = served_log_files(parser, known)
    if known.archive:  # a label is final an hour after serving: beacons of the day after count too
        after = (date.fromisoformat(days[-1]) + timedelta(days=1)).isoformat()
        event_files = matching_files([archive_pattern(known.archive, known.events_topic, d) for d in days + [after]])
    else:
        event_files = matching_files(known.events)
    logging.info("training set: %d served files, %d event files, keep rate %s", len(served_files),
                 len(event_files), known.keep_rate)
    out = output_folder(known.output)
    first_day, last_day, keep_rate = days[0], days[-1], known.keep_rate
    options = PipelineOptions(pipeline_args, save_main_session=save_main_session)
    with beam.Pipeline(options=options) as pipeline:
        served, bad_served = read_records(pipeline, "Served", served_files)
        if known.archive:
            served = of_days(served, days)
        events, bad_events = read_records(pipeline, "Events", event_files)
        examples = (served, events) | "Join" >> JoinExamples(keep_rate)
        examples | "WriteExamples" >> beam.io.WriteToAvro(
            f"{out}/examples", schema=_example_schema(), file_name_suffix=".avro", codec="deflate")
        positives = examples | "Positives" >> beam.Filter(lambda e: e["label"] == 1)
        corrupt = (bad_served, bad_events) | "AllCorrupt" >> beam.Flatten()
        (pipeline | "One" >> beam.Create([None])
         | "Summary" >> beam.Map(lambda _, served_n, events_n, examples_n, positives_n, corrupt_n: json.dumps({
             "from_day": first_day, "to_day": last_day, "keep_rate": keep_rate, "served_records": served_n,
             "events": events_n, "examples": examples_n, "positives": positives_n,
             "negatives_kept": examples_n - positives_n, "corrupt_records": corrupt_n}, indent=2),
             served_n=count_of("Served", served), events_n=count_of("Events", events),
             examples_n=count_of("Examples", examples), positives_n=count_of("Positives", positives),
             corrupt_n=count_of("Corrupt", corrupt))
         | "WriteSummary" >> beam.io.WriteToText(f"{out}/summary", file_name_suffix=".json",
                                                 shard_name_template=""))
    with FileSystems.open(f"{out}/summary.json") as f:
        summary = json.loads(f.read())
    logging.info("training set: %d examples (%d positives) from %d served records, %d corrupt records",
                 summary["examples"], summary["positives"], summary["served_records"], summary["corrupt_records"])
    return summary


def _example_schema() -> dict[str, Any]:
    from schemas.codec import plain_timestamps

    return plain_timestamps(schema_json("training_example.avsc"))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
