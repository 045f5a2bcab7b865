"""Beam pipeline `auction_replay`: logged auctions replayed under candidate reserves and a quality weight,
against what they logged, per placement. The replay rule is core.replay's (which reruns core.auction), so
this pipeline only reads, groups and counts.

Reads archived ad.served for a range of UTC days (or any files of served records), keeps one copy per
request id (the served log is written at least once), replays each request with the reserve the policy
gives its placement and country (`--reserve PLACEMENT[/COUNTRY]=MICROS`, else `--reserve-micros`, else
the reserve it was served with) and `--quality-weight`, and sums per placement:

  requests                 every served record of the placement
  replayed_requests        those replayed (exploration requests and version-1 records are left out and
                           counted: exploration_requests, unreplayable_requests)
  logged_rpm_micros        expected revenue per thousand replayed requests, as served (micro-units)
  replayed_rpm_micros      the same under the replayed rules
  logged_fill_rate         filled slots / offered slots of the replayed requests, as served
  replayed_fill_rate       the same under the replayed rules
  changed_winners          slots whose ad changed (filled or emptied included)
  changed_prices           slots with the same ad at another price
  exact_share              share of replayed requests whose replay is exact (core.replay.replay_is_exact:
                           always for an unchanged or higher reserve at weight 1.0)

Output: `<output>/summary.json` ({"from_day", "to_day", "quality_weight", "reserves", "served_records",
"corrupt_records", "placements": {placement: figures}, "total": figures}) and `<output>/table.txt` (the
same as a table).

    python -m pipelines.auction_replay --archive .platform/archive --from-day 2026-03-10 --to-day 2026-03-16 \\
        --reserve feed=30000 --reserve feed/US=40000 --output out/replay
    python -m pipelines.auction_replay --served 'day/served.avro' --quality-weight 1.5 --output out/replay
Every option Beam knows passes through (Dataflow: --runner=DataflowRunner --project=... --region=...)."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core.errors import InvalidSettings
from core.replay import RequestComparison, ReservePolicy, compare_request
from pipelines.avro_files import add_served_log_arguments, count_of, of_days, output_folder, served_log_files
from pipelines.options import ServedLogOptions, parse_options
from pipelines.unwrap import read_records

COUNTS = ("requests", "replayed_requests", "exploration_requests", "unreplayable_requests", "exact_requests",
          "offered_slots", "logged_filled_slots", "replayed_filled_slots", "logged_revenue_micros",
          "replayed_revenue_micros", "changed_winners", "changed_prices")
TOTAL = "(all)"


# pure parts ---------------------------------------------------------------------------------------------

def parse_reserves(overrides: Iterable[str], default_micros: int | None = None) -> ReservePolicy:
    """`feed=30000` (a placement) and `feed/US=40000` (a placement in a country) -> a ReservePolicy."""
    by_placement: dict[str, int] = {}
    by_country: dict[tuple[str, str], int] = {}
    for text in overrides:
        where, sep, micros = text.partition("=")
        placement, _, country = where.strip().partition("/")
        if not sep or not placement or not micros.strip().lstrip("-").isdigit() or int(micros) < 0:
            raise InvalidSettings(f"--reserve {text!r}: expected PLACEMENT=MICROS or PLACEMENT/COUNTRY=MICROS, "
                             "e.g. feed=30000 or feed/US=40000")
        if country:
            by_country[(placement, country.strip().upper())] = int(micros)
        else:
            by_placement[placement] = int(micros)
    return ReservePolicy(default_micros, by_placement, by_country)


def policy_json(policy: ReservePolicy) -> dict[str, Any]:
    return {"default_micros": policy.default_micros, "placements": dict(sorted(policy.by_placement.items())),
            "placement_countries": {f"{p}/{c}": v for (p, c), v in sorted(policy.by_placement_country.items())}}


def counts_of(comparison: RequestComparison) -> dict[str, int]:
    """One request's contribution to its placement's sums."""
    replayed = comparison.status == "replayed"
    counts = {name: 0 for name in COUNTS}
    counts["requests"] = 1
    counts["exploration_requests"] = int(comparison.status == "exploration")
    counts["unreplayable_requests"] = int(comparison.status == "not_replayable")
    if replayed:
        counts.update(replayed_requests=1, exact_requests=int(comparison.exact),
                      **{k: v for k, v in asdict(comparison).items() if k in COUNTS})
    return counts


def add_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {name: a.get(name, 0) + b.get(name, 0) for name in COUNTS}


def _per_thousand(micros: int, requests: int) -> int:
    """Micros per thousand requests, rounded half up (integer arithmetic: equal sums give equal RPMs)."""
    return (2000 * micros + requests) // (2 * requests) if requests else 0


def _share(part: int, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def figures(counts: Mapping[str, int]) -> dict[str, Any]:
    """A placement's sums with the rates derived from them."""
    n, offered = counts["replayed_requests"], counts["offered_slots"]
    return {**{name: counts[name] for name in COUNTS},
            "logged_rpm_micros": _per_thousand(counts["logged_revenue_micros"], n),
            "replayed_rpm_micros": _per_thousand(counts["replayed_revenue_micros"], n),
            "logged_fill_rate": _share(counts["logged_filled_slots"], offered),
            "replayed_fill_rate": _share(counts["replayed_filled_slots"], offered),
            "exact_share": _share(counts["exact_requests"], n)}


def summary_of(per_placement: Iterable[tuple[str, Mapping[str, int]]], **header: Any) -> dict[str, Any]:
    """The summary document: the header, each placement's figures and the total."""
    placements = dict(sorted(per_placement))
    total: dict[str, int] = {name: 0 for name in COUNTS}
    for counts in placements.values():
        total = add_counts(total, counts)
    return {**header, "placements": {p: figures(c) for p, c in placements.items()}, "total": figures(total)}


def _dollars(micros: int) -> str:
    return f"${micros / 1_000_000:,.2f}"


def render_table(summary: Mapping[str, Any]) -> str:
    """The summary as a table a person reads."""
    head = (f"Auction replay {summary.get('from_day') or ''}..{summary.get('to_day') or ''}: quality weight "
            f"{summary.get('quality_weight')}, reserves {json.dumps(summary.get('reserves'))}")
    columns = f"{'placement':<14}{'requests':>10}{'replayed':>10}{'RPM logged':>12}{'RPM replay':>12}" \
              f"{'fill logged':>13}{'fill replay':>13}{'winners chg':>13}{'prices chg':>12}{'exact':>8}"
    lines = [head, columns, "-" * len(columns)]
    rows = [*summary["placements"].items(), (TOTAL, summary["total"])]
    for placement, f in rows:
        lines.append(f"{placement:<14}{f['requests']:>10,}{f['replayed_requests']:>10,}"
                     f"{_dollars(f['logged_rpm_micros']):>12}{_dollars(f['replayed_rpm_micros']):>12}"
                     f"{f['logged_fill_rate']:>13.1%}{f['replayed_fill_rate']:>13.1%}"
                     f"{f['changed_winners']:>13,}{f['changed_prices']:>12,}{f['exact_share']:>8.0%}")
    t = summary["total"]
    lines.append(f"left out: {t['exploration_requests']:,} exploration requests, {t['unreplayable_requests']:,} "
                 f"version-1 records; corrupt records: {summary.get('corrupt_records', 0):,}. RPM: expected "
                 "revenue per thousand replayed requests.")
    return "\n".join(lines) + "\n"


def first_copy(copies: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Of the copies of one request's served record, the earliest (the same record, written twice)."""
    return min(copies, key=lambda r: (int(r["event_time"]), str(r.get("server_id"))))


# transforms ---------------------------------------------------------------------------------------------

class SumCounts(beam.CombineFn):
    """RequestComparisons of one placement -> their summed counts."""

    def create_accumulator(self) -> dict[str, int]:
        return {name: 0 for name in COUNTS}

    def add_input(self, accumulator: dict[str, int], comparison: RequestComparison) -> dict[str, int]:
        return add_counts(accumulator, counts_of(comparison))

    def merge_accumulators(self, accumulators: Iterable[dict[str, int]]) -> dict[str, int]:
        merged = self.create_accumulator()
        for acc in accumulators:
            merged = add_counts(merged, acc)
        return merged

    def extract_output(self, accumulator: dict[str, int]) -> dict[str, int]:
        return accumulator


class ReplayServedLog(beam.PTransform):
    """ServedRecord records -> (placement, summed counts), one copy per request id replayed."""

    def __init__(self, policy: ReservePolicy, quality_weight: float = 1.0):
        super().__init__()
        self.policy, self.quality_weight = policy, quality_weight

    def expand(self, served):
        policy, weight = self.policy, self.quality_weight
        return (served
                | "KeyByRequest" >> beam.Map(lambda r: (str(r["request_id"]), r))
                | "FirstCopy" >> beam.CombinePerKey(first_copy)
                | "Replay" >> beam.MapTuple(lambda _, r: compare_request(r, policy, weight))
                | "KeyByPlacement" >> beam.Map(lambda c: (c.placement, c))
                | "SumPerPlacement" >> beam.CombinePerKey(SumCounts()))


# I/O ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayOptions(ServedLogOptions):
    reserve_micros: int | None = None  # replayed reserve of every placement without its own --reserve
    reserve: list[str] = field(default_factory=list)  # PLACEMENT[/COUNTRY]=MICROS overrides
    quality_weight: float = 1.0  # weight of the quality term in total value (1.0: the live rule)
    output: str = ""  # folder for summary.json and table.txt


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipelines.auction_replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_served_log_arguments(parser)
    parser.add_argument("--reserve-micros", type=int, default=None,
                        help="replayed reserve of every placement without its own --reserve (default: the "
                             "reserve each request was served with)")
    parser.add_argument("--reserve", action="append", default=[], metavar="PLACEMENT[/COUNTRY]=MICROS",
                        help="replayed reserve of a placement, or of a placement in a country; repeatable")
    parser.add_argument("--quality-weight", type=float, default=1.0,
                        help="weight of the quality term in total value (default 1.0, the live rule)")
    parser.add_argument("--output", required=True, help="folder for summary.json and table.txt")
    return parser


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = _parser()
    options, beam_options = parse_options(parser, ReplayOptions, argv, save_main_session)
    try:
        policy = parse_reserves(options.reserve, options.reserve_micros)
    except ValueError as exc:
        parser.error(str(exc))
    days, files = served_log_files(parser, options)
    return replay(options, policy, days, files, beam_options)


def replay(options: ReplayOptions, policy: ReservePolicy, days: list[str], files: list[str],
           beam_options: PipelineOptions) -> dict[str, Any]:
    """The served files' requests replayed under `policy`; the summary (also written to <output>)."""
    logging.info("auction replay: %d served files, reserves %s, quality weight %s", len(files),
                 policy_json(policy), options.quality_weight)
    out = output_folder(options.output)
    header = {"from_day": days[0], "to_day": days[-1], "quality_weight": options.quality_weight,
              "reserves": policy_json(policy)}
    with beam.Pipeline(options=beam_options) as pipeline:
        served, corrupt = read_records(pipeline, "Served", files)
        if options.archive:
            served = of_days(served, days)
        per_placement = served | "ReplayServedLog" >> ReplayServedLog(policy, options.quality_weight)

        summary = (pipeline | "One" >> beam.Create([None])
                   | "Summary" >> beam.Map(
                       lambda _, rows, served_n, corrupt_n: summary_of(
                           rows, **header, served_records=served_n, corrupt_records=corrupt_n),
                       rows=beam.pvalue.AsList(per_placement), served_n=count_of("Served", served),
                       corrupt_n=count_of("Corrupt", corrupt)))
        summary | "SummaryJson" >> beam.Map(lambda s: json.dumps(s, indent=2)) | "WriteSummary" >> \
            beam.io.WriteToText(f"{out}/summary", file_name_suffix=".json", shard_name_template="")
        summary | "Table" >> beam.Map(lambda s: render_table(s).rstrip("\n")) | "WriteTable" >> beam.io.WriteToText(
            f"{out}/table", file_name_suffix=".txt", shard_name_template="")
    with FileSystems.open(f"{out}/summary.json") as f:
        result = json.loads(f.read())
    logging.info("auction replay: %d served records, %d replayed; RPM %s -> %s micros, fill %s -> %s",
                 result["served_records"], result["total"]["replayed_requests"],
                 result["total"]["logged_rpm_micros"], result["total"]["replayed_rpm_micros"],
                 result["total"]["logged_fill_rate"], result["total"]["replayed_fill_rate"])
    return result


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    print(render_table(run()), end="")
