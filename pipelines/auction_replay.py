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

With `--recommend` it recommends a reserve per (placement, country) instead (core.replay.recommend_reserves'
rule): each replayed request under every candidate reserve (`--candidate-reserves 0,10000,...` micros per
impression, else per (placement, country) 0, the reserves it was served with and half-octave steps from ~1/16
to ~2x its median winner's bid value per impression), and of the candidates whose fill rate is at least
`--min-fill` (default 0.8) x the fill with no reserve, the one with the highest revenue per thousand
requests (ties: the lower reserve). Output: `<output>/recommended_reserves.json` ({"from_day", "to_day",
"quality_weight", "min_fill", "min_requests", "total", "recommendations": [{"placement", "country",
"requests", "candidates": [{"reserve_micros", "revenue_per_mille_micros", "fill_rate", "exact_share"}],
"recommended_reserve_micros", "revenue_per_mille_micros", "fill_rate", "min_fill_rate",
"revenue_per_mille_gain_pct", "in_rules"}], "rules": [{"placement", "country", "reserve_micros"}]}: the
rules of the keys with at least `--min-requests` replayed requests, which `adserve reserves set --from-file`
applies) and `<output>/recommended_reserves.txt` (the same as a table).

    python -m pipelines.auction_replay --archive .platform/archive --from-day 2026-03-10 --to-day 2026-03-16 \\
        --reserve feed=30000 --reserve feed/US=40000 --output out/replay
    python -m pipelines.auction_replay --served 'day/served.avro' --quality-weight 1.5 --output out/replay
    python -m pipelines.auction_replay --archive .platform/archive --from-day 2026-03-10 --to-day 2026-03-16 \\
        --recommend --output out/reserves && adserve reserves set --from-file out/reserves/recommended_reserves.json
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
from core.replay import (DEFAULT_MIN_FILL_RATIO, BidProfile, RequestComparison, ReserveChoice, ReservePolicy,
                         candidate_grid, choose_reserve, compare_request, is_replayed, overall_gain_pct, per_thousand,
                         reserve_figures, reserve_key, sum_figures, sum_profiles)
from core.reserves import MAX_RESERVE_MICROS
from pipelines.avro_files import add_served_log_arguments, count_of, of_days, output_folder, served_log_files
from pipelines.options import ServedLogOptions, parse_options, run_as_main
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



def _share(part: int, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def figures(counts: Mapping[str, int]) -> dict[str, Any]:
    """A placement's sums with the rates derived from them."""
    n, offered = counts["replayed_requests"], counts["offered_slots"]
    return {**{name: counts[name] for name in COUNTS},
            "logged_rpm_micros": per_thousand(counts["logged_revenue_micros"], n),
            "replayed_rpm_micros": per_thousand(counts["replayed_revenue_micros"], n),
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


def parse_candidate_reserves(text: str | None) -> list[int] | None:
    """`0,10000,20000` (micros per impression) -> the candidate reserves, 0 always among them; None: none given."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) <= MAX_RESERVE_MICROS for p in parts):
        raise InvalidSettings(f"--candidate-reserves {text!r}: expected reserves in micros per impression between 0 "
                              f"and {MAX_RESERVE_MICROS}, separated by commas, e.g. 0,10000,20000")
    return candidate_grid([int(p) for p in parts])


def check_min_fill(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise InvalidSettings(f"--min-fill {value}: expected a share of the fill with no reserve between 0 and 1, "
                              "e.g. 0.8")
    return value


def recommendation_json(key: tuple[str, str], choice: ReserveChoice, min_requests: int) -> dict[str, Any]:
    """One (placement, country)'s candidates and recommended reserve, as recommended_reserves.json holds it."""
    best = choice.recommended
    return {"placement": key[0], "country": key[1], "requests": best.requests,
            "candidates": [{"reserve_micros": c.reserve_micros, "revenue_per_mille_micros": c.revenue_per_mille_micros,
                            "fill_rate": c.fill_rate, "exact_share": c.exact_share} for c in choice.candidates],
            "recommended_reserve_micros": best.reserve_micros,
            "revenue_per_mille_micros": best.revenue_per_mille_micros, "fill_rate": best.fill_rate,
            "min_fill_rate": choice.min_fill_rate,
            "revenue_per_mille_gain_pct": choice.revenue_per_mille_gain_pct, "in_rules": best.requests >= min_requests}


def recommendations_document(choices: Iterable[tuple[tuple[str, str], ReserveChoice]], min_requests: int,
                             **header: Any) -> dict[str, Any]:
    """recommended_reserves.json: the header, each (placement, country)'s recommendation, the overall gain of the
    rules (keys under min_requests stay at no reserve in it) and the rules `adserve reserves set --from-file`
    applies."""
    by_key = dict(sorted(choices))
    rows = [recommendation_json(key, choice, min_requests) for key, choice in by_key.items()]
    ruled = [(row["placement"], row["country"]) for row in rows if row["in_rules"]]
    requests = sum(c.no_reserve.requests for c in by_key.values())
    return {**header, "min_requests": min_requests,
            "total": {"requests": requests,
                      "revenue_per_mille_micros_no_reserve": per_thousand(
                          sum(c.no_reserve.revenue_micros for c in by_key.values()), requests),
                      "revenue_per_mille_micros_recommended": per_thousand(
                          sum((c.recommended if k in ruled else c.no_reserve).revenue_micros
                              for k, c in by_key.items()), requests),
                      "revenue_per_mille_gain_pct": overall_gain_pct(by_key, ruled)},
            "recommendations": rows,
            "rules": [{"placement": row["placement"], "country": row["country"],
                       "reserve_micros": row["recommended_reserve_micros"]} for row in rows if row["in_rules"]]}


def _pct(gain: float | None) -> str:
    return "n/a" if gain is None else f"{gain:+.2f} %"


def render_recommendations(document: Mapping[str, Any]) -> str:
    """recommended_reserves.json as a table a person reads: per (placement, country) its recommendation, then
    every candidate, the recommended one marked."""
    lines = [f"Reserve recommendation {document.get('from_day') or ''}..{document.get('to_day') or ''}: quality "
             f"weight {document.get('quality_weight')}, fill at least {document.get('min_fill')} x the fill with "
             f"no reserve, rules for at least {document['min_requests']:,} requests. Reserves as CPM (micros per "
             "impression x 1000); RPM: expected revenue per thousand replayed requests."]
    columns = f"{'reserve':>12}{'RPM':>12}{'fill':>9}{'exact':>8}"
    for row in document["recommendations"]:
        lines += ["", f"{row['placement']}/{row['country']}: {row['requests']:,} requests, recommended "
                      f"{_dollars(row['recommended_reserve_micros'] * 1000)} "
                      f"({_pct(row['revenue_per_mille_gain_pct'])} against no reserve), fill floor "
                      f"{row['min_fill_rate']:.1%}" + ("" if row["in_rules"] else "; too few requests for a rule"),
                  columns, "-" * len(columns)]
        for c in row["candidates"]:
            mark = "  <- recommended" if c["reserve_micros"] == row["recommended_reserve_micros"] else ""
            lines.append(f"{_dollars(c['reserve_micros'] * 1000):>12}{_dollars(c['revenue_per_mille_micros']):>12}"
                         f"{c['fill_rate']:>9.1%}{c['exact_share']:>8.0%}{mark}")
    total = document["total"]
    lines += ["", f"all: {total['requests']:,} requests, RPM {_dollars(total['revenue_per_mille_micros_no_reserve'])} "
                  f"with no reserve, {_dollars(total['revenue_per_mille_micros_recommended'])} under the "
                  f"{len(document['rules'])} rules ({_pct(total['revenue_per_mille_gain_pct'])}). Apply them: "
                  "adserve reserves set --from-file recommended_reserves.json"]
    return "\n".join(lines) + "\n"


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


class RecommendReserves(beam.PTransform):
    """ServedRecord records -> ((placement, country), ReserveChoice), one copy per request id replayed under
    every candidate reserve (`candidate_reserves` and 0, else each key's BidProfile.grid)."""

    def __init__(self, candidate_reserves: list[int] | None = None, quality_weight: float = 1.0,
                 min_fill_ratio: float = DEFAULT_MIN_FILL_RATIO):
        super().__init__()
        self.candidate_reserves = None if candidate_reserves is None else candidate_grid(candidate_reserves)
        self.quality_weight = quality_weight
        self.min_fill_ratio = min_fill_ratio

    def expand(self, served):
        weight, ratio, fixed = self.quality_weight, self.min_fill_ratio, self.candidate_reserves
        keyed = (served
                 | "KeyByRequest" >> beam.Map(lambda r: (str(r["request_id"]), r))
                 | "FirstCopy" >> beam.CombinePerKey(first_copy)
                 | "Records" >> beam.Values()
                 | "Replayable" >> beam.Filter(is_replayed)
                 | "KeyByPlacementCountry" >> beam.Map(lambda r: (reserve_key(r), r)))
        def under_each(key_record, grid_of=None):
            key, record = key_record
            for reserve in (fixed if grid_of is None else grid_of[key]):
                yield (key, reserve), reserve_figures(record, reserve, weight)

        if fixed is None:
            grids = (keyed
                     | "Profile" >> beam.MapTuple(lambda key, r: (key, BidProfile.of(r)))
                     | "SumProfiles" >> beam.CombinePerKey(sum_profiles)
                     | "Grid" >> beam.MapTuple(lambda key, profile: (key, profile.grid())))
            per_candidate = keyed | "UnderEachReserve" >> beam.FlatMap(under_each, grid_of=beam.pvalue.AsDict(grids))
        else:
            per_candidate = keyed | "UnderEachReserve" >> beam.FlatMap(under_each)
        return (per_candidate
                | "SumPerReserve" >> beam.CombinePerKey(sum_figures)
                | "KeyByPlacementCountryAgain" >> beam.MapTuple(lambda key_reserve, f: (key_reserve[0], f))
                | "Candidates" >> beam.GroupByKey()
                | "Choose" >> beam.MapTuple(lambda key, figures: (key, choose_reserve(list(figures), ratio))))


# I/O ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayOptions(ServedLogOptions):
    reserve_micros: int | None = None  # replayed reserve of every placement without its own --reserve
    reserve: list[str] = field(default_factory=list)  # PLACEMENT[/COUNTRY]=MICROS overrides
    quality_weight: float = 1.0  # weight of the quality term in total value (1.0: the live rule)
    output: str = ""  # folder for summary.json and table.txt (or recommended_reserves.json and .txt)
    recommend: bool = False  # recommend a reserve per (placement, country) instead of replaying one policy
    candidate_reserves: str | None = None  # "0,10000,20000": the same candidates everywhere (default: a grid)
    min_fill: float = DEFAULT_MIN_FILL_RATIO  # least fill of a recommendation, a share of no reserve's fill
    min_requests: int = 1000  # least replayed requests of a (placement, country) for a rule


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
    parser.add_argument("--output", required=True,
                        help="folder for summary.json and table.txt (with --recommend: recommended_reserves.json "
                             "and recommended_reserves.txt)")
    parser.add_argument("--recommend", action="store_true",
                        help="recommend a reserve per placement and country: the candidate with the highest "
                             "revenue per thousand requests whose fill stays above --min-fill")
    parser.add_argument("--candidate-reserves", default=None, metavar="MICROS,MICROS,...",
                        help="with --recommend: the candidate reserves (micros per impression; 0 is always one), "
                             "default per placement and country: 0, the reserves it was served with and "
                             "half-octave steps from ~1/16 to ~2x its median winner's bid value per impression")
    parser.add_argument("--min-fill", type=float, default=DEFAULT_MIN_FILL_RATIO,
                        help="with --recommend: a recommended reserve keeps at least this share of the fill "
                             f"with no reserve (default {DEFAULT_MIN_FILL_RATIO})")
    parser.add_argument("--min-requests", type=int, default=1000,
                        help="with --recommend: the least replayed requests of a placement and country for its "
                             "recommendation to become a rule (default 1000)")
    return parser


def _check_modes(parser: argparse.ArgumentParser, options: ReplayOptions) -> list[int] | None:
    """The candidate reserves of --recommend (None: the default grid); a parser error on mixed modes."""
    if not options.recommend:
        if options.candidate_reserves is not None or options.min_fill != DEFAULT_MIN_FILL_RATIO or \
                options.min_requests != 1000:
            parser.error("--candidate-reserves, --min-fill and --min-requests go with --recommend")
        return None
    if options.reserve or options.reserve_micros is not None:
        parser.error("--recommend replays its own candidate reserves: give --candidate-reserves, not --reserve or "
                     "--reserve-micros")
    if options.min_requests < 0:
        parser.error("--min-requests: expected 0 or more")
    try:
        check_min_fill(options.min_fill)
        return parse_candidate_reserves(options.candidate_reserves)
    except InvalidSettings as exc:
        parser.error(str(exc))


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = _parser()
    options, beam_options = parse_options(parser, ReplayOptions, argv, save_main_session)
    candidates = _check_modes(parser, options)
    if options.recommend:
        days, files = served_log_files(parser, options)
        return recommend(options, candidates, days, files, beam_options)
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


def recommend(options: ReplayOptions, candidates: list[int] | None, days: list[str], files: list[str],
              beam_options: PipelineOptions) -> dict[str, Any]:
    """The served files' requests replayed under each candidate reserve; the recommendations (also written to
    <output>/recommended_reserves.json and .txt)."""
    logging.info("reserve recommendation: %d served files, candidates %s, min fill %s, quality weight %s",
                 len(files), candidates or "per placement and country", options.min_fill, options.quality_weight)
    out = output_folder(options.output)
    header = {"from_day": days[0], "to_day": days[-1], "quality_weight": options.quality_weight,
              "min_fill": options.min_fill, "candidate_reserves": candidates}
    with beam.Pipeline(options=beam_options) as pipeline:
        served, corrupt = read_records(pipeline, "Served", files)
        if options.archive:
            served = of_days(served, days)
        choices = served | "RecommendReserves" >> RecommendReserves(candidates, options.quality_weight,
                                                                    options.min_fill)
        document = (pipeline | "One" >> beam.Create([None])
                    | "Document" >> beam.Map(
                        lambda _, rows, served_n, corrupt_n: recommendations_document(
                            rows, options.min_requests, **header, served_records=served_n, corrupt_records=corrupt_n),
                        rows=beam.pvalue.AsList(choices), served_n=count_of("Served", served),
                        corrupt_n=count_of("Corrupt", corrupt)))
        document | "DocumentJson" >> beam.Map(lambda d: json.dumps(d, indent=2)) | "WriteDocument" >> \
            beam.io.WriteToText(f"{out}/recommended_reserves", file_name_suffix=".json", shard_name_template="")
        document | "Table" >> beam.Map(lambda d: render_recommendations(d).rstrip("\n")) | "WriteTable" >> \
            beam.io.WriteToText(f"{out}/recommended_reserves", file_name_suffix=".txt", shard_name_template="")
    with FileSystems.open(f"{out}/recommended_reserves.json") as f:
        result = json.loads(f.read())
    logging.info("reserve recommendation: %d rules, RPM gain %s %%", len(result["rules"]),
                 result["total"]["revenue_per_mille_gain_pct"])
    return result


def main(save_main_session: bool = False) -> None:
    """The command: runs the pipeline and prints its table."""
    logging.getLogger().setLevel(logging.INFO)
    result = run(save_main_session=save_main_session)
    print(render_recommendations(result) if "recommendations" in result else render_table(result), end="")


if __name__ == "__main__":
    run_as_main("pipelines.auction_replay", "main")
