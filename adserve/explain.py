"""`adserve explain IMPRESSION_ID`: why one impression cost what it did, in words an advertiser reads.

Finds the served record whose winner has the impression id ("{request_id}:{slot}") in the archived
ad.served files (`--archive DIR`) or, by default, on the ad.served topic of the platform's Kafka (the
record key is the request id, so only that request's records are decoded). It shows the ad's bid, its
predicted click (and conversion) rate at its position, its quality term and total value, the runner-up's
total or the reserve that set the price, and the arithmetic of the price. The price is recomputed from
the logged inputs with the auction's own pricing (core.replay.explain_winner over core.auction) and
checked against the logged price. The look-up is streams.served_lookup's (the topic) and
pipelines.served_archive's (the archive); this module only parses the command and renders the explanation.

    adserve explain 4f2a9c...:1                                   # the local platform's ad.served topic
    adserve explain 4f2a9c...:1 --archive .platform/archive --day 2026-03-10 --json

Exit status: 0 when the recomputed price equals the logged one, 1 when it does not (the output says so),
2 when no served record has the impression id or the log cannot be read."""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Mapping

from core.auction import charge_per_event
from core.errors import AdserveError
from core.replay import explain_winner
from schemas import topics
from streams.served_lookup import find_in_records, request_id_of, topic_records

UNIT = {"cpm": "per thousand impressions", "cpc": "per click", "cpa": "per conversion"}


# rendering ------------------------------------------------------------------------------------------------

def money(micros: int | float | Fraction | None) -> str:
    """Micro-units as dollars: at least cents, up to the micro, trailing zeros dropped ($1.40, $0.032)."""
    if micros is None:
        return "-"
    value = Fraction(micros) if not isinstance(micros, float) else Fraction(repr(micros))
    sign = "-" if value < 0 else ""
    digits = f"{float(abs(value) / 1_000_000):.7f}".rstrip("0")
    whole, _, cents = digits.partition(".")
    return f"{sign}${int(whole):,}.{cents.ljust(2, '0')}"


def rate(probability: float | None) -> str:
    return "-" if probability is None else f"{probability * 100:.4g} %"


def _signed(micros: int | float) -> str:
    return f"+{money(micros)}" if micros >= 0 else money(micros)


def _plus(micros: int | float) -> str:
    """A term added in an expression: "+ $0.002", "- $0.001"."""
    return f"+ {money(micros)}" if micros >= 0 else f"- {money(-micros)}"


def _value_lines(e: Mapping[str, Any]) -> list[str]:
    own = e["bid_type"]
    lines = [f"  predicted click rate at position {e['slot_position']}:".ljust(44) + rate(e["pctr"])
             + (" (not part of a cpm bid's value)" if own == "cpm" else "")]
    if own == "cpm":
        lines.append("  bid per impression:".ljust(44) + f"{money(e['bid_micros'])} / 1,000 = "
                     f"{money(Fraction(e['bid_micros'], 1000))}")
    elif own == "cpc":
        lines.append("  bid x click rate:".ljust(44) + f"{money(e['bid_micros'])} x {rate(e['pctr'])} = "
                     f"{money(e['own_total_micros'] - e['quality_micros'])} per impression")
    else:
        lines.append("  predicted conversion rate after a click:".ljust(44) + rate(e["pcvr"]))
        lines.append("  bid x click rate x conversion rate:".ljust(44) +
                     f"{money(e['bid_micros'])} x {rate(e['pctr'])} x {rate(e['pcvr'])} = "
                     f"{money(e['own_total_micros'] - e['quality_micros'])} per impression")
    lines.append("  quality term (predicted user experience):".ljust(44) + _signed(e["quality_micros"]))
    lines.append("  total value:".ljust(44) + f"{money(e['own_total_micros'])} per impression")
    return lines


def _runner_up_value(r: Mapping[str, Any]) -> str:
    if r.get("bid_type") == "cpm":
        action = f"{money(r['bid_micros'])} / 1,000"
    elif r.get("bid_type") == "cpa":
        action = f"{money(r['bid_micros'])} x {rate(r['pctr'])} x {rate(r['pcvr'])}"
    else:
        action = f"{money(r['bid_micros'])} x {rate(r['pctr'])}"
    return f"{action} {_plus(r['quality_micros'])} = {money(r['total_micros'])} per impression"


def _next_lines(e: Mapping[str, Any]) -> list[str]:
    r, reserve = e["runner_up"], e["reserve_micros"]
    reserve_text = "not logged (a version-1 record)" if reserve is None else f"{money(reserve)} per impression"
    if e["price_set_by"] == "runner_up" and r and r.get("bid_micros") is not None:
        return [f"What you had to beat: the next ad, ad {r['ad_id']} of campaign {r['campaign_id']} "
                f"({r['bid_type']}, bid {money(r['bid_micros'])} {UNIT[r['bid_type']]}):",
                "  its bid x rate + quality:".ljust(44) + _runner_up_value(r),
                f"  (the reserve of this placement and country, the least an impression must bring and pay, was "
                f"{reserve_text})"]
    if e["price_set_by"] == "runner_up" and r:
        return [f"What you had to beat: the next ad, total {money(r['total_micros'])} per impression "
                "(a version-1 record logs only that total, rounded down)"]
    if r and reserve is not None and r["total_micros"] >= reserve:
        return [f"What you had to beat: the next ad, ad {r['ad_id']}, worth {money(r['total_micros'])} per "
                f"impression; less your quality that is under the reserve, {reserve_text}, which no impression "
                "pays less than."]
    if r:
        return [f"What you had to beat: the reserve, {reserve_text}: the next ad, ad {r['ad_id']}, was worth only "
                f"{money(r['total_micros'])} per impression."]
    return [f"What you had to beat: the reserve, {reserve_text}: no ad of another campaign below yours "
            "cleared it."]


def _price_lines(e: Mapping[str, Any]) -> list[str]:
    a, own, unit = e["arithmetic"], e["bid_type"], UNIT[e["bid_type"]]
    if a.get("floored_at_reserve"):
        lead = ("Your price is the reserve: the next ad less your quality came to less, and no impression pays less "
                "than the reserve:")
        top, top_numbers = "reserve", money(e["reserve_micros"] or 0)
    else:
        lead = "Your price is the least bid that would still have kept your place:"
        top = "(next total - your quality)"
        top_numbers = f"({money(e['next_total_micros'])} - {money(e['quality_micros'])})"
    if own == "cpm":
        formula, numbers = f"{top} x 1,000", f"{top_numbers} x 1,000"
    elif own == "cpc":
        formula, numbers = f"{top} / your click rate", f"{top_numbers} / {rate(e['pctr'])}"
    else:
        formula = f"{top} / (your click rate x your conversion rate)"
        numbers = f"{top_numbers} / ({rate(e['pctr'])} x {rate(e['pcvr'])})"
    raw = "no rate to divide by: the bid" if a["raw_price_micros"] is None else money(a["raw_price_micros"])
    capped = f"your bid {money(e['bid_micros'])} caps it" + (": it does" if a["capped_at_bid"] else ": not reached")
    return [lead, f"  {formula}", f"  = {numbers} = {raw} {unit}",
            f"  rounded up to a whole micro: {money(a['rounded_up_micros'])}; {capped}"
            + ("; never below zero" if a["floored_at_zero"] else "")]


def _charge_lines(e: Mapping[str, Any]) -> list[str]:
    unit = UNIT[e["bid_type"]]
    if e["price_matches"]:
        check = ("Recomputed from the logged inputs with the auction's own pricing: "
                 f"{money(e['recomputed_price_micros'])}, equal to the logged price.")
    else:
        check = (f"MISMATCH: recomputed from the logged inputs the price is {money(e['recomputed_price_micros'])} "
                 f"{unit}, but the log says {money(e['logged_price_micros'])}. The log or the pricing changed "
                 "since this impression was served: do not quote this explanation to the advertiser.")
    per_event = {"cpm": f" ({money(e['logged_price_micros'] // 1000)} per impression)",
                 "cpa": f" (billed by the click: x your conversion rate {rate(e['pcvr'] or 0.0)} = "
                        f"{money(charge_per_event('cpa', e['logged_price_micros'], e['pcvr']))} per click)"}
    per_impression = per_event.get(e["bid_type"], "")
    return [f"Charged: {money(e['logged_price_micros'])} {unit}{per_impression}, never more than your bid.", check,
            f"Expected cost recorded against the budget at serve: {money(e['expected_cost_micros'])}."]


def _flag_lines(e: Mapping[str, Any]) -> list[str]:
    scored = "the pre-ranker's fallback scores (the click model did not answer in time)" \
        if e["scored_by_fallback"] else f"the click model {e['model_version'] or '(version not logged)'}"
    explored = (f"in the exploration slice: the shuffle of near-tied ads put yours here with probability "
                f"{e['exploration_probability']:.2f} (the price still follows the ad below)") \
        if e["exploration_probability"] < 1.0 else \
        ("in the exploration slice, but this slot was filled in ranking order" if e["exploration"]
         else "not in the exploration slice")
    return ["Also applied:",
            f"  pacing let campaign {e['campaign_id']} into this auction with probability "
            f"{e['participation_probability']:.2f} (it spreads the budget over the day; it does not change the price)",
            f"  predictions from {scored}", f"  {explored}",
            *(f"  note: {n}" for n in e["notes"])]


def _when(ms: int | None) -> str:
    if ms is None:
        return "at an unknown time"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def render(e: Mapping[str, Any]) -> str:
    """The explanation (core.replay.explain_winner's dict) in words."""
    unit = UNIT[e["bid_type"]]
    lines = [f"Impression {e['impression_id']}: ad {e['ad_id']} paid {money(e['logged_price_micros'])} {unit}",
             f"  request {e['request_id']}, slot {e['slot']} (position {e['slot_position']}) of placement "
             f"{e['placement']}, country {e['country'] or 'unknown'}, served {_when(e['event_time'])}", "",
             f"Your ad (campaign {e['campaign_id']}) bid {money(e['bid_micros'])} {unit} ({e['bid_type']}).",
             *_value_lines(e), "", *_next_lines(e), "", *_price_lines(e), *_charge_lines(e), "", *_flag_lines(e)]
    return "\n".join(lines) + "\n"


# the command ----------------------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("explain", help="why one impression cost what it did, recomputed from the served log",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("impression_id", metavar="IMPRESSION_ID", help="the impression id, REQUEST_ID:SLOT")
    p.add_argument("--archive", help="read the archived ad.served files under this folder (the archiver's root) "
                                     "instead of the Kafka topic")
    p.add_argument("--day", action="append", default=[], metavar="YYYY-MM-DD",
                   help="with --archive: only the served records of this UTC day (repeatable; default every day)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local platform's, from "
                                       "ADSERVE_KAFKA_PORT)")
    p.add_argument("--topic", default=topics.AD_SERVED,
                   help=f"the served log's topic or archive folder (default {topics.AD_SERVED})")
    p.add_argument("--timeout-s", type=float, default=30.0, help="give up reading the topic after this (default 30)")
    p.add_argument("--json", action="store_true", help="print the explanation as one JSON object")
    p.set_defaults(handler=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    try:
        request_id = request_id_of(args.impression_id)
        if args.archive:
            from pipelines.served_archive import archived_records

            records = archived_records(args.archive, request_id, topic=args.topic, days=args.day)
            where = f"the archive {args.archive}"
        else:
            from streams.endpoints import current

            bootstrap = args.bootstrap or current().kafka.bootstrap_servers
            records = topic_records(bootstrap, request_id, topic=args.topic, timeout_s=args.timeout_s)
            where = f"topic {args.topic} at {bootstrap}"
        try:
            record = find_in_records(records, args.impression_id)
        finally:
            records.close()  # a Kafka consumer is closed as soon as the record is found
    except (ValueError, AdserveError) as exc:
        print(f"adserve explain: {exc}", file=sys.stderr)
        return 2
    if record is None:
        print(f"adserve explain: no served record in {where} has impression {args.impression_id}", file=sys.stderr)
        return 2
    explanation = explain_winner(record, args.impression_id)
    print(json.dumps(explanation, indent=2) if args.json else render(explanation), end="\n" if args.json else "")
    return 0 if explanation["price_matches"] else 1

