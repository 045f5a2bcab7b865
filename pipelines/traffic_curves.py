"""Beam pipeline `traffic_curves`: the traffic shapes the budget job builds its target curves from.

From the archived served log (ad.served Avro container files of the last days),
per hour of the day: every request (the default shape), the requests of each
placement (a placement's average shape), and for each campaign the requests in
which it took part in the auction (a winner or a sampled loser: the served log's
record of eligible traffic). Hours are in UTC unless --timezone names the
advertisers' zone. Shapes come from core.pacing.shape_from_counts (campaigns
with too little history fall back to the default). Per placement also the
values to beat (core.pacing.value_to_beat: what an ad had to be worth per
impression to win a slot), as 21 approximate quantiles (minimum, every 5 %,
maximum), and per bid type the median value of a micro of bid there
(core.pacing.value_per_bid_samples, over winners and sampled losers): from
them the budget job forecasts a new campaign's first p. Output: one JSON file,
{"as_of", "default", "placements": {...}, "campaigns": {id: [24 shares]},
"values_to_beat": {placement: [21 micros]}, "value_per_bid": {placement:
{bid type: ratio}}}, which `budget_pacing --curves FILE` reads
(core.pacing.Curves).

    python -m pipelines.traffic_curves --input 'archive/ad.served/*.avro' --output curves.json
Every option Beam knows passes through unchanged (Dataflow: --runner=DataflowRunner ...)."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence
from zoneinfo import ZoneInfo

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from core.pacing import VALUE_QUANTILES, shape_from_counts, value_per_bid_samples, value_per_bid_table, value_to_beat
from core.replay import sampled_losers
from pipelines.avro_files import CORRUPT
from pipelines.unwrap import unwrap_dofn
from pipelines.options import parse_options, run_as_main


def hour_keys(record: dict[str, Any], tz: str = "UTC") -> Iterable[tuple[str, int]]:
    """(key, local hour) for one served record: "*", "placement:<p>" and each campaign that took part."""
    hour = datetime.fromtimestamp(record["event_time"] / 1000, tz=timezone.utc).astimezone(ZoneInfo(tz)).hour
    yield "*", hour
    yield f"placement:{record['placement']}", hour
    campaigns = {w["campaign_id"] for w in record.get("winners") or []} | \
        {l["campaign_id"] for l in sampled_losers(record)}
    for campaign_id in sorted(campaigns):
        yield str(campaign_id), hour


def placement_value(record: dict[str, Any]) -> tuple[str, int]:
    """(placement, the value an ad had to beat to win a slot in this auction)."""
    winners = record.get("winners") or []
    return record["placement"], value_to_beat(len(record.get("slot_positions") or []),
                                              [int(w.get("total_value_micros", 0)) for w in winners],
                                              record.get("reserve_micros"))


def assemble(counts: Iterable[tuple[tuple[str, int], int]], values: dict[str, list[int]] | None = None,
             per_bid: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Per key hourly counts, per placement the values-to-beat quantiles and per "placement|bid type" the
    quantiles of a micro of bid's value -> the curves document (shapes only where history suffices)."""
    by_key: dict[str, dict[int, int]] = {}
    for (key, hour), n in counts:
        by_key.setdefault(key, {})[hour] = by_key.get(key, {}).get(hour, 0) + n
    default = shape_from_counts(by_key.get("*", {}), min_requests=1) or [round(1 / 24, 6)] * 24
    placements = {k.split(":", 1)[1]: s for k, v in by_key.items() if k.startswith("placement:")
                  if (s := shape_from_counts(v)) is not None}
    campaigns = {k: s for k, v in by_key.items() if k != "*" and not k.startswith("placement:")
                 if (s := shape_from_counts(v)) is not None}
    value_per_bid = value_per_bid_table({k: q[len(q) // 2] for k, q in (per_bid or {}).items()})  # the medians
    return {"default": default, "placements": placements, "campaigns": campaigns,
            "values_to_beat": {k: [int(v) for v in q] for k, q in sorted((values or {}).items())},
            "value_per_bid": value_per_bid}


class TrafficShapes(beam.PTransform):
    """ad.served records -> one curves document."""

    def __init__(self, tz: str = "UTC"):
        super().__init__()
        self.tz = tz

    def expand(self, served):
        tz = self.tz
        values = (served
                  | "ValueToBeat" >> beam.Map(placement_value)
                  | "Quantiles" >> beam.ApproximateQuantiles.PerKey(VALUE_QUANTILES))
        per_bid = (served
                   | "ValuePerBid" >> beam.FlatMap(value_per_bid_samples)
                   | "Medians" >> beam.ApproximateQuantiles.PerKey(3))
        return (served
                | "HourKeys" >> beam.FlatMap(lambda r: [(key, 1) for key in hour_keys(r, tz)])
                | "Count" >> beam.CombinePerKey(sum)
                | "All" >> beam.combiners.ToList()
                | "Assemble" >> beam.Map(assemble, values=beam.pvalue.AsDict(values),
                                         per_bid=beam.pvalue.AsDict(per_bid)))


@dataclass(frozen=True)
class TrafficCurvesOptions:
    input: str  # file pattern of archived ad.served Avro container files
    output: str  # the curves JSON file
    timezone: str = "UTC"  # the zone whose hours the shapes are in
    as_of: str = ""  # the budget day the shapes are for, recorded in the output


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> None:
    parser = argparse.ArgumentParser(prog="pipelines.traffic_curves", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="file pattern of archived ad.served Avro container files")
    parser.add_argument("--output", required=True, help="the curves JSON file to write")
    parser.add_argument("--timezone", default="UTC", help="the zone whose hours the shapes are in (default UTC)")
    parser.add_argument("--as-of", default=datetime.now(timezone.utc).date().isoformat(),
                        help="the budget day these shapes are for (recorded in the output)")
    write_curves(*parse_options(parser, TrafficCurvesOptions, argv, save_main_session))


def write_curves(options: TrafficCurvesOptions, beam_options: PipelineOptions) -> None:
    as_of = options.as_of
    with beam.Pipeline(options=beam_options) as pipeline:
        # Archiver envelopes are decoded (plain records pass through); undecodable values are counted.
        records = (pipeline
                   | "ReadArchive" >> beam.io.ReadFromAvro(options.input)
                   | "Unwrap" >> beam.ParDo(unwrap_dofn()).with_outputs(CORRUPT, main="records")).records
        (records
         | "TrafficShapes" >> TrafficShapes(options.timezone)
         | "Stamp" >> beam.Map(lambda doc: json.dumps({"as_of": as_of, **doc}))
         | "Write" >> beam.io.WriteToText(options.output, shard_name_template="", num_shards=1))


if __name__ == "__main__":
    run_as_main("pipelines.traffic_curves")
