"""Beam pipeline `nightly_recount`: a budget day's bill recomputed from the raw archive, compared with what the
streaming click aggregator billed.

Reads the archiver's files (jobs/archiver) for the day and the days either side
(a campaign's budget day follows its time zone): ad.events, every
serving.campaigns version, and billing.billed_spend. Applies the same rules as
the job, from the same module (core.clicks): first copy per (impression, event
type), burst counts per user and per IP minute, invalid-traffic tags, 10 s
windows, billing up to the budget in force. Then compares each campaign's day
totals with the streaming job's last billed record for that day.

Output: `<output>/differences.jsonl` (one line per campaign and field that
differs: campaign_id, budget_day, field, streaming, recount) and
`<output>/summary.json` ({"day", "campaigns", "differences", "events", "corrupt_records",
"absorbed_by_budget_size": {"small"|"medium"|"large": {campaigns, billed_micros, absorbed_micros}},
"recount": {campaign: totals}}): the daily report of absorbed overspend by budget size (small < $200,
medium < $10,000 a day, large). On a clean day there are no differences.

    python -m pipelines.nightly_recount --archive .platform/archive --day 2026-01-05 --output out/recount
Every option Beam knows passes through (Dataflow: --runner=DataflowRunner --project=... --region=...)."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core import clicks
from core.billing import SIZE_CLASSES, size_class
from pipelines.avro_files import archive_pattern, count_of, matching_files, output_folder
from pipelines.unwrap import read_records
from pipelines.options import parse_options, run_as_main
from schemas import topics

COMPARED = ("billed_spend_micros", "billed_impressions", "billed_clicks", "absorbed_overspend_micros",
            "invalid_credit_micros", "joined_clicks")


def _burst(field_name: str):
    def counts(key_and_clicks):
        _, group = key_and_clicks
        return list(clicks.burst_counts(list(group), field_name).items())
    return counts


def _impression_time_of_clicks(key_and_events):
    """(click event id, its impression's beacon time) for the clicks of one impression id that has one."""
    _, group = key_and_events
    group = list(group)
    seen = clicks.impression_times(group)
    for e in group:
        if e["event_type"] == "CLICK" and str(e["impression_id"]) in seen:
            yield e["event_id"], seen[str(e["impression_id"])]


class RecountBill(beam.PTransform):
    """AdEvent records + campaign versions (a side input) -> ((campaign, budget day), BilledSpend totals)."""

    def __init__(self, campaigns):
        super().__init__()
        self.campaigns = campaigns

    def expand(self, events):
        unique = (events
                  | "KeyByBeacon" >> beam.Map(lambda e: (clicks.dedupe_key(e), e))
                  | "GroupCopies" >> beam.GroupByKey()
                  | "FirstCopy" >> beam.MapTuple(lambda _, copies: clicks.first_of(list(copies))))
        click_events = unique | "Clicks" >> beam.Filter(lambda e: e["event_type"] == "CLICK")
        counts = {}
        for field_name, label in (("user_id", "User"), ("ip_address", "Ip")):
            counts[field_name] = (
                click_events
                | f"Key{label}Minute" >> beam.Map(
                    lambda e, f=field_name: ((e.get(f) or "", clicks.minute_of(int(e["event_time"]))), e))
                | f"Group{label}Minute" >> beam.GroupByKey()
                | f"Count{label}" >> beam.FlatMap(_burst(field_name)))
        impression_of_click = (
            unique
            | "KeyByImpression" >> beam.Map(lambda e: (str(e["impression_id"]), e))
            | "GroupImpression" >> beam.GroupByKey()
            | "ImpressionTime" >> beam.FlatMap(_impression_time_of_clicks))
        tagged = (
            {"event": unique | "KeyById" >> beam.Map(lambda e: (e["event_id"], e)),
             "user": counts["user_id"], "ip": counts["ip_address"], "impression": impression_of_click}
            | "JoinCounts" >> beam.CoGroupByKey()
            | "Tag" >> beam.FlatMap(lambda kv: [clicks.tag(e, max(kv[1]["user"], default=0),
                                                           max(kv[1]["ip"], default=0),
                                                           max(kv[1]["impression"], default=None))
                                                for e in kv[1]["event"]]))
        windows = (tagged
                   | "KeyByWindow" >> beam.Map(lambda t: (t[0], (t[1], t[2], t[3])))
                   | "GroupWindow" >> beam.GroupByKey()
                   | "Totals" >> beam.MapTuple(lambda key, group: (key[0], clicks.totals_of(key[1], group)))
                   | "GroupCampaign" >> beam.GroupByKey())
        return windows | "Bill" >> beam.FlatMap(_bill, versions=beam.pvalue.AsDict(self.campaigns))


def _bill(campaign_and_windows, versions: dict[int, list[dict[str, Any]]]):
    """((campaign, day), totals) for one campaign, each day's totals with the budget-size class of the budget in
    force when its last window closed (`budget_class`, for the absorbed-overspend report)."""
    campaign_id, windows = campaign_and_windows
    history = sorted(versions.get(campaign_id, []), key=lambda c: int(c["event_time"]))
    for day, record in clicks.bill_windows(campaign_id, windows, history).items():
        version = clicks.version_at(history, int(record["event_time"]))
        budget = int(version["daily_budget_micros"]) if version else 0
        yield (campaign_id, day), dict(record, budget_class=size_class(budget))


def absorbed_by_budget_size(totals: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The day's absorbed overspend (and billed spend) per budget-size class, from the recount's totals."""
    report = {name: {"campaigns": 0, "billed_micros": 0, "absorbed_micros": 0} for name in SIZE_CLASSES}
    for record in totals.values():
        row = report[record["budget_class"]]
        row["campaigns"] += 1
        row["billed_micros"] += int(record["billed_spend_micros"])
        row["absorbed_micros"] += int(record["absorbed_overspend_micros"])
    return report


def differences(day: str, streaming: dict[tuple[int, str], dict], recount: dict[tuple[int, str], dict]
                ) -> list[dict[str, Any]]:
    """Every field of every campaign's day where the two disagree (a campaign missing on one side: all fields)."""
    out = []
    for key in sorted(k for k in set(streaming) | set(recount) if k[1] == day):
        mine, theirs = streaming.get(key, {}), recount.get(key, {})
        for name in COMPARED:
            if mine.get(name, 0) != theirs.get(name, 0):
                out.append({"campaign_id": key[0], "budget_day": day, "field": name,
                            "streaming": mine.get(name), "recount": theirs.get(name)})
    return out


@dataclass(frozen=True)
class RecountOptions:
    archive: str  # the archiver's root (a folder or file system URI)
    day: str  # the budget day to recount, YYYY-MM-DD
    output: str  # folder for differences.jsonl and summary.json
    events_topic: str = topics.AD_EVENTS
    campaigns_topic: str = topics.SERVING_CAMPAIGNS
    billed_topic: str = topics.BILLED_SPEND


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="pipelines.nightly_recount", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", required=True, help="the archiver's root (a folder or file system URI)")
    parser.add_argument("--day", required=True, help="budget day to recount, YYYY-MM-DD")
    parser.add_argument("--output", required=True, help="folder for differences.jsonl and summary.json")
    parser.add_argument("--events-topic", default=topics.AD_EVENTS, help="archive folder of the events")
    parser.add_argument("--campaigns-topic", default=topics.SERVING_CAMPAIGNS, help="archive folder of the campaigns")
    parser.add_argument("--billed-topic", default=topics.BILLED_SPEND, help="archive folder of billed totals")
    return recount(*parse_options(parser, RecountOptions, argv, save_main_session))


def recount(options: RecountOptions, beam_options: PipelineOptions) -> dict[str, Any]:
    """The recount of one day from the archive; its summary (also written to <output>/summary.json)."""
    day = date.fromisoformat(options.day)
    days = [(day + timedelta(days=d)).isoformat() for d in (-1, 0, 1)]
    event_files = matching_files([archive_pattern(options.archive, options.events_topic, d) for d in days])
    campaign_files = matching_files([archive_pattern(options.archive, options.campaigns_topic, "*")])
    billed_files = matching_files([archive_pattern(options.archive, options.billed_topic, d) for d in days])
    logging.info("recount of %s: %d event files, %d campaign files, %d billing files", options.day,
                 len(event_files), len(campaign_files), len(billed_files))
    out = output_folder(options.output)
    the_day = options.day
    with beam.Pipeline(options=beam_options) as pipeline:
        events, bad_events = read_records(pipeline, "Events", event_files)
        campaigns, bad_campaigns = read_records(pipeline, "Campaigns", campaign_files)
        billed, bad_billed = read_records(pipeline, "Billed", billed_files)
        versions = (campaigns | "KeyVersions" >> beam.Map(lambda c: (int(c["campaign_id"]), c))
                    | "GroupVersions" >> beam.GroupByKey()
                    | "ListVersions" >> beam.MapTuple(lambda k, v: (k, list(v))))
        recounted = events | "Recount" >> RecountBill(versions)
        streaming = (billed | "KeyBilled" >> beam.Map(lambda r: ((int(r["campaign_id"]), r["budget_day"]), r))
                     | "LatestBilled" >> beam.CombinePerKey(lambda rs: max(rs, key=clicks.progress_key)))
        joined = ({"streaming": streaming, "recount": recounted} | "Join" >> beam.CoGroupByKey()
                  | "TheDay" >> beam.Filter(lambda kv: kv[0][1] == the_day))
        diffs = joined | "Compare" >> beam.FlatMap(lambda kv: differences(
            the_day, {kv[0]: r for r in kv[1]["streaming"]}, {kv[0]: r for r in kv[1]["recount"]}))
        diffs | "WriteDifferences" >> beam.Map(json.dumps) | beam.io.WriteToText(
            f"{out}/differences", file_name_suffix=".jsonl", shard_name_template="")
        corrupt = (bad_events, bad_campaigns, bad_billed) | "AllCorrupt" >> beam.Flatten()
        recount_totals = (joined | "RecountOfDay" >> beam.FlatMap(
            lambda kv: [(str(kv[0][0]), r) for r in kv[1]["recount"]]) | "RecountDict" >> beam.combiners.ToDict())
        (pipeline | "One" >> beam.Create([None])
         | "Summary" >> beam.Map(lambda _, campaigns_n, diffs_n, events_n, corrupt_n, totals: json.dumps({
             "day": the_day, "campaigns": campaigns_n, "differences": diffs_n, "events": events_n,
             "corrupt_records": corrupt_n, "absorbed_by_budget_size": absorbed_by_budget_size(totals),
             "recount": dict(sorted(totals.items()))}, indent=2),
             campaigns_n=count_of("Campaigns", joined), diffs_n=count_of("Differences", diffs),
             events_n=count_of("Events", events), corrupt_n=count_of("Corrupt", corrupt),
             totals=beam.pvalue.AsSingleton(recount_totals))
         | "WriteSummary" >> beam.io.WriteToText(f"{out}/summary", file_name_suffix=".json",
                                                 shard_name_template=""))
    with FileSystems.open(f"{out}/summary.json") as f:
        summary = json.loads(f.read())
    logging.info("recount of %s: %d campaigns, %d differences, %d corrupt records", the_day, summary["campaigns"],
                 summary["differences"], summary["corrupt_records"])
    return summary


if __name__ == "__main__":
    run_as_main("pipelines.nightly_recount")
