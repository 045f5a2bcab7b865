"""Beam pipeline `training_set`: the training join as a backfill over the archive (or any files of served
records, beacons and conversions), for a range of days. The same label rule and down-sampling as the streaming job
`training_join`, from the same module (core.training), so on the same data both give the same examples.

Reads archived ad.served for the days asked, ad.events for those days and the day after (a label is
final an hour after serving, so a click after midnight still counts) and ad.conversions for those days and
the conversion window's days after, groups everything by impression id, and keeps one click example per
impression served in the range and one conversion example per positive (core.training.examples_of_impression).

Deleted users (core.privacy): the served records of a user who asked to be deleted, from before the request,
are dropped before the join, so none of their impressions becomes an example. The requests come from
--deletions files (UserDeletion records, plain or archived) or, with --archive, the archive's copy of the
privacy.deletions topic.

Output: `<output>/examples-SSSSS-of-NNNNN.avro` (TrainingExample, the contract of training.examples) and
`<output>/summary.json` ({"from_day", "to_day", "keep_rate", "conversion_window_ms", "served_records", "events",
"conversions", "examples", "positives", "negatives_kept", "conversion_examples", "conversions_labelled",
"corrupt_records", "erased_served_records"}; "examples", "positives" and "negatives_kept" count the click
examples, "served_records" those joined).

    python -m pipelines.training_set --archive .platform/archive --from-day 2026-03-10 --to-day 2026-03-11 \\
        --output out/training-set
    python -m pipelines.training_set --served 'day/served.avro' --events 'day/events.avro' \
        --conversions 'day/conversions.avro' --output out/ts
Every option Beam knows passes through (Dataflow: --runner=DataflowRunner --project=... --region=...)."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core import training
from pipelines.archive_erasure import WithoutDeletedUsers, deletions_in_force, topic_files_pattern
from pipelines.avro_files import (add_served_log_arguments, archive_pattern, count_of, matching_files, of_days,
                                  output_folder, schema_json, served_log_files)
from pipelines.options import ServedLogOptions, parse_options, run_as_main
from pipelines.unwrap import read_records
from schemas import topics


class JoinExamples(beam.PTransform):
    """(ServedRecord, AdEvent, AdConversion records) -> TrainingExample records, by core.training's rules."""

    def __init__(self, rules: training.JoinRules = training.JoinRules()):
        super().__init__()
        self.rules = rules

    def expand(self, inputs):
        served, events, conversions = inputs
        contexts = served | "Impressions" >> beam.FlatMap(
            lambda r: [(i["impression_id"], i) for i in training.impressions_of(r)])
        beacons = events | "KeyBeacons" >> beam.Map(lambda e: (str(e["impression_id"]), e))
        converted = conversions | "KeyConversions" >> beam.Map(lambda c: (str(c["impression_id"]), c))
        rules = self.rules
        return ({"served": contexts, "events": beacons, "conversions": converted}
                | "GroupByImpression" >> beam.CoGroupByKey()
                | "Label" >> beam.FlatMap(lambda kv: training.examples_of_impression(
                    sorted(kv[1]["served"], key=lambda c: c["served_time"]), kv[1]["events"],
                    kv[1]["conversions"], rules.keep_rate, rules.conversion_window_ms)))


@dataclass(frozen=True)
class TrainingSetOptions(ServedLogOptions):
    events: list[str] = field(default_factory=list)  # instead of --archive: Avro files (globs) of beacons
    conversions: list[str] = field(default_factory=list)  # with --events: Avro files (globs) of conversions
    keep_rate: float = training.DEFAULT_KEEP_RATE
    conversion_window_ms: int = training.CONVERSION_WINDOW_MS
    output: str = ""  # folder for the examples and summary.json
    events_topic: str = topics.AD_EVENTS
    conversions_topic: str = topics.AD_CONVERSIONS
    deletions: list[str] = field(default_factory=list)  # Avro files (globs) of UserDeletion records


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="pipelines.training_set", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_served_log_arguments(parser)
    parser.add_argument("--events", action="append", default=[],
                        help="instead of --archive: Avro files (glob) of beacons; repeatable")
    parser.add_argument("--conversions", action="append", default=[],
                        help="with --events: Avro files (glob) of conversions (AdConversion); repeatable; none: no "
                             "conversion happened")
    parser.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                        help=f"share of negatives kept (default {training.DEFAULT_KEEP_RATE}); every click is kept")
    parser.add_argument("--conversion-window-ms", type=int, default=training.CONVERSION_WINDOW_MS,
                        help="a click's conversion counts within this long of serving (default 7 days)")
    parser.add_argument("--output", required=True, help="folder for the examples and summary.json")
    parser.add_argument("--events-topic", default=topics.AD_EVENTS, help="archive folder of the beacons")
    parser.add_argument("--conversions-topic", default=topics.AD_CONVERSIONS, help="archive folder of the conversions")
    parser.add_argument("--deletions", action="append", default=[],
                        help="Avro files (glob) of UserDeletion records, plain or archived: their users' served "
                             f"records are dropped; repeatable (default with --archive: its {topics.PRIVACY_DELETIONS} "
                             "files)")
    options, beam_options = parse_options(parser, TrainingSetOptions, argv, save_main_session)
    if not options.archive and not options.events:
        parser.error("give --archive with --from-day, or --served and --events files")
    try:
        rules = training.JoinRules(options.keep_rate, options.conversion_window_ms)
    except ValueError as exc:
        parser.error(str(exc))
    days, served_files = served_log_files(parser, options)
    return build_training_set(options, rules, days, served_files, beam_options)


def build_training_set(options: TrainingSetOptions, rules: training.JoinRules, days: list[str],
                       served_files: list[str], beam_options: PipelineOptions) -> dict[str, Any]:
    """The examples of the served files' days (also written to <output>), and their summary."""
    if options.archive:  # a label is final an hour after serving: beacons of the day after count too
        after = (date.fromisoformat(days[-1]) + timedelta(days=1)).isoformat()
        event_files = matching_files([archive_pattern(options.archive, options.events_topic, d)
                                      for d in days + [after]])
        window_days = -(-rules.conversion_window_ms // 86_400_000)  # and conversions until the window closes
        later = [(date.fromisoformat(days[-1]) + timedelta(days=n)).isoformat() for n in range(1, window_days + 1)]
        conversion_files = matching_files([archive_pattern(options.archive, options.conversions_topic, d)
                                           for d in days + later])
    else:
        event_files, conversion_files = matching_files(options.events), matching_files(options.conversions)
    deletion_patterns = options.deletions or (
        [topic_files_pattern(options.archive, topics.PRIVACY_DELETIONS)] if options.archive else [])
    deletion_files = matching_files(deletion_patterns)
    logging.info("training set: %d served files, %d event files, %d conversion files, %s", len(served_files),
                 len(event_files), len(conversion_files), rules)
    out = output_folder(options.output)
    first_day, last_day, keep_rate = days[0], days[-1], rules.keep_rate
    with beam.Pipeline(options=beam_options) as pipeline:
        served, bad_served = read_records(pipeline, "Served", served_files)
        if options.archive:
            served = of_days(served, days)
        all_served = served
        served = all_served | "WithoutDeleted" >> WithoutDeletedUsers(
            deletions_in_force(pipeline, "Deletions", deletion_files))
        events, bad_events = read_records(pipeline, "Events", event_files)
        conversions, bad_conversions = read_records(pipeline, "Conversions", conversion_files)
        examples = (served, events, conversions) | "Join" >> JoinExamples(rules)
        examples | "WriteExamples" >> beam.io.WriteToAvro(
            f"{out}/examples", schema=_example_schema(), file_name_suffix=".avro", codec="deflate")
        clicks = examples | "ClickExamples" >> beam.Filter(lambda e: e["task"] == training.CLICK)
        conversion_examples = examples | "ConversionExamples" >> beam.Filter(
            lambda e: e["task"] == training.CONVERSION)
        positives = clicks | "Positives" >> beam.Filter(lambda e: e["label"] == 1)
        converted = conversion_examples | "Converted" >> beam.Filter(lambda e: e["label"] == 1)
        corrupt = (bad_served, bad_events, bad_conversions) | "AllCorrupt" >> beam.Flatten()
        (pipeline | "One" >> beam.Create([None])
         | "Summary" >> beam.Map(lambda _, served_n, events_n, conversions_n, examples_n, positives_n,
                                 conversion_examples_n, converted_n, corrupt_n, all_served_n: json.dumps({
             "from_day": first_day, "to_day": last_day, "keep_rate": keep_rate,
             "conversion_window_ms": rules.conversion_window_ms, "served_records": served_n, "events": events_n,
             "conversions": conversions_n, "examples": examples_n, "positives": positives_n,
             "negatives_kept": examples_n - positives_n, "conversion_examples": conversion_examples_n,
             "conversions_labelled": converted_n, "corrupt_records": corrupt_n,
             "erased_served_records": all_served_n - served_n}, indent=2),
             served_n=count_of("Served", served), events_n=count_of("Events", events),
             conversions_n=count_of("ConversionsIn", conversions), examples_n=count_of("Examples", clicks),
             positives_n=count_of("Positives", positives),
             conversion_examples_n=count_of("ConversionExamplesN", conversion_examples),
             converted_n=count_of("ConvertedN", converted), corrupt_n=count_of("Corrupt", corrupt),
             all_served_n=count_of("AllServed", all_served))
         | "WriteSummary" >> beam.io.WriteToText(f"{out}/summary", file_name_suffix=".json",
                                                 shard_name_template=""))
    with FileSystems.open(f"{out}/summary.json") as f:
        summary = json.loads(f.read())
    logging.info("training set: %d click examples (%d positives), %d conversion examples (%d converted) from %d "
                 "served records, %d corrupt records", summary["examples"], summary["positives"],
                 summary["conversion_examples"], summary["conversions_labelled"], summary["served_records"],
                 summary["corrupt_records"])
    return summary


def _example_schema() -> dict[str, Any]:
    from schemas.codec import plain_timestamps

    return plain_timestamps(schema_json("training_example.avsc"))


if __name__ == "__main__":
    run_as_main("pipelines.training_set")
