"""The served log's replay fields (schemas/ad_served.avsc, version 2 and later), both directions: the functions
the ad server calls to write them (`winner_replay_fields`, `loser_record`, `loser_columns`,
`request_replay_fields`) and the ones that read the logged candidates back (`sampled_losers`,
`logged_candidates`), so the two cannot drift apart. Pure: records in, records or candidates out.

What is logged per request: the reserve, the slot positions, how many candidates entered the auction;
per winner every input of its total (bid type, bid, pCTR at every slot, pCVR, quality, exclusion
category, its index in the candidate list) and the same for its runner-up; 20 losers sampled uniformly
with the same inputs. The candidates read back are deduplicated by ad id and kept in their logged
candidate order, so ties of total value break as they did."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from core.auction import Candidate
from core.errors import AdserveError

Record = Mapping[str, Any]


class NotReplayable(AdserveError):
    """A served record without the inputs a replay needs (a version-1 record)."""


# writing: what the ad server adds to each ServedRecord ------------------------------------------------

def _symbol(bid_type: str | None) -> str | None:
    return bid_type.upper() if bid_type else None


def winner_replay_fields(explanation: Mapping[str, Any]) -> dict[str, Any]:
    """The version-2 fields of a ServedRecord Winner, from core.auction's explanation of that winner."""
    e = explanation

    def opt(name: str, cast):
        return None if e.get(name) is None else cast(e[name])

    return {
        "bid_type": _symbol(e.get("bid_type")),
        "pctr_by_slot": [float(p) for p in e.get("pctr_by_slot") or []],
        "exclusion_category": int(e.get("exclusion_category") or 0),
        "candidate_index": opt("candidate_index", int),
        "runner_up_ad_id": opt("runner_up_ad_id", int),
        "runner_up_campaign_id": opt("runner_up_campaign_id", int),
        "runner_up_bid_type": _symbol(e.get("runner_up_bid_type")),
        "runner_up_bid_micros": opt("runner_up_bid_micros", int),
        "runner_up_pctr": opt("runner_up_pctr", float),
        "runner_up_pctr_by_slot": [float(p) for p in e.get("runner_up_pctr_by_slot") or []],
        "runner_up_pcvr": opt("runner_up_pcvr", float),
        "runner_up_quality_micros": opt("runner_up_quality_micros", int),
        "runner_up_exclusion_category": opt("runner_up_exclusion_category", int),
        "runner_up_candidate_index": opt("runner_up_candidate_index", int),
    }


def loser_record(loser: Mapping[str, Any]) -> dict[str, Any]:
    """A ServedRecord Loser from one of core.auction's sampled losers."""
    return {
        "ad_id": int(loser["ad_id"]), "campaign_id": int(loser["campaign_id"]), "pctr": float(loser["pctr"]),
        "total_value_micros": int(loser["total_value_micros"]), "bid_type": _symbol(loser.get("bid_type")),
        "bid_micros": None if loser.get("bid_micros") is None else int(loser["bid_micros"]),
        "pctr_by_slot": [float(p) for p in loser.get("pctr_by_slot") or []],
        "pcvr": None if loser.get("pcvr") is None else float(loser["pcvr"]),
        "quality_micros": None if loser.get("quality_micros") is None else int(loser["quality_micros"]),
        "exclusion_category": int(loser.get("exclusion_category") or 0),
        "candidate_index": None if loser.get("candidate_index") is None else int(loser["candidate_index"]),
    }


def loser_columns(losers: Sequence[Mapping[str, Any]], slots: int) -> dict[str, Any]:
    """A ServedRecord's LoserColumns (version 4) from core.auction's sampled losers: a handful of arrays, which
    encode at a fraction of the cost of a record per loser. Each loser's pCTR per slot is padded or cut to the
    request's `slots`, so loser i's rate at slot s is pctr_by_slot[i x slots + s]."""
    pctr: list[float] = []
    for loser in losers:
        by_slot = [float(p) for p in (loser.get("pctr_by_slot") or [loser["pctr"]])[:slots]]
        pctr.extend(by_slot + [by_slot[-1]] * (slots - len(by_slot)))
    return {
        "ad_id": [int(l["ad_id"]) for l in losers], "campaign_id": [int(l["campaign_id"]) for l in losers],
        "total_value_micros": [int(l["total_value_micros"]) for l in losers],
        "bid_type": [_symbol(l["bid_type"]) for l in losers], "bid_micros": [int(l["bid_micros"]) for l in losers],
        "pctr_by_slot": pctr, "pcvr": [float(l.get("pcvr") or 0.0) for l in losers],
        "quality_micros": [int(l["quality_micros"]) for l in losers],
        "exclusion_category": [int(l.get("exclusion_category") or 0) for l in losers],
        "candidate_index": [int(l["candidate_index"]) for l in losers]}


def sampled_losers(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sampled losers of a ServedRecord of any version, one Loser dict each (the version-2 form): read from
    loser_columns when the record has them (version 4), else from sampled_losers."""
    columns = record.get("loser_columns")
    if not columns:
        return list(record.get("sampled_losers") or [])
    slots = len(record.get("slot_positions") or []) or 1
    pctr = columns["pctr_by_slot"]
    return [{"ad_id": ad_id, "campaign_id": campaign_id, "pctr": pctr[i * slots],
             "total_value_micros": total, "bid_type": bid_type, "bid_micros": bid,
             "pctr_by_slot": pctr[i * slots:(i + 1) * slots], "pcvr": pcvr if bid_type == "CPA" else None,
             "quality_micros": quality, "exclusion_category": category, "candidate_index": index}
            for i, (ad_id, campaign_id, total, bid_type, bid, pcvr, quality, category, index) in enumerate(zip(
                columns["ad_id"], columns["campaign_id"], columns["total_value_micros"], columns["bid_type"],
                columns["bid_micros"], columns["pcvr"], columns["quality_micros"], columns["exclusion_category"],
                columns["candidate_index"]))]


def request_replay_fields(reserve_micros: int, slot_positions: Sequence[int], auction_candidates: int | None,
                          quality_floor_micros: int | None = None) -> dict[str, Any]:
    """The top-level replay fields of a ServedRecord (version 2, and the quality floor of version 3)."""
    return {"reserve_micros": int(reserve_micros), "slot_positions": [int(p) for p in slot_positions],
            "auction_candidates": None if auction_candidates is None else int(auction_candidates),
            "quality_floor_micros": None if quality_floor_micros is None else int(quality_floor_micros)}


# reading: the logged candidates ----------------------------------------------------------------------

def winner_bid_type(winner: Record) -> str:
    """A winner's bid type (cpm/cpc/cpa); a version-1 record has none, but the auction logged a pCVR only
    for cpa bids, so impression billing is cpm and click billing with a pCVR is cpa."""
    if winner.get("bid_type"):
        return str(winner["bid_type"]).lower()
    if winner["billing_type"] == "IMPRESSION":
        return "cpm"
    return "cpa" if winner.get("pcvr") is not None else "cpc"


def slot_of(impression_id: str) -> int:
    """The 1-based slot number at the end of an impression id ("{request_id}:{slot}")."""
    return int(str(impression_id).rsplit(":", 1)[1])


def replay_gap(record: Record) -> str | None:
    """Why this record cannot be replayed, or None when it can."""
    slots = len(record.get("slot_positions") or [])
    if not slots or record.get("reserve_micros") is None:
        return "a version-1 record (no reserve or slot positions logged)"
    for w in record.get("winners") or []:
        if not w.get("bid_type") or len(w.get("pctr_by_slot") or []) != slots:
            return f"winner {w.get('impression_id')} lacks its bid type or pCTR per slot"
        if w.get("runner_up_ad_id") is not None and (
                not w.get("runner_up_bid_type") or len(w.get("runner_up_pctr_by_slot") or []) != slots):
            return f"the runner-up of {w.get('impression_id')} lacks its inputs"
    for loser in sampled_losers(record):
        if not loser.get("bid_type") or len(loser.get("pctr_by_slot") or []) != slots:
            return f"sampled loser {loser.get('ad_id')} lacks its inputs"
    return None


@dataclass(frozen=True)
class LoggedBid:
    """A logged ad's bid and the rates that price it: what its total and its bid value are computed from."""

    bid_type: str
    bid_micros: int
    pctr_by_slot: Sequence[float]
    pcvr: float | None
    quality_micros: int


def winner_bid(winner: Record, pctr_by_slot: Sequence[float]) -> LoggedBid:
    """A logged winner's bid, with the pCTR per slot the caller reads it at."""
    return LoggedBid(winner_bid_type(winner), winner["bid_micros"], pctr_by_slot, winner.get("pcvr"),
                     winner["quality_micros"])


def runner_up_bid(winner: Record, pctr_by_slot: Sequence[float]) -> LoggedBid:
    """The bid of a logged winner's runner-up, with the pCTR per slot the caller reads it at."""
    return LoggedBid(winner["runner_up_bid_type"], winner["runner_up_bid_micros"], pctr_by_slot,
                     winner.get("runner_up_pcvr"), winner["runner_up_quality_micros"])


def auction_candidate(ad_id: Any, campaign_id: Any, bid: LoggedBid, exclusion_category: int = 0,
                      participation: float = 1.0) -> Candidate:
    """A logged ad as core.auction's Candidate."""
    return Candidate(ad_id=ad_id, campaign_id=campaign_id, bid_type=str(bid.bid_type).lower(),
                     bid_micros=int(bid.bid_micros), pctr=[float(p) for p in bid.pctr_by_slot],
                     pcvr=float(bid.pcvr or 0.0), quality_micros=int(bid.quality_micros),
                     exclusion_category=int(exclusion_category or 0), participation_probability=float(participation))


def _logged(record: Record) -> list[tuple[int | None, Candidate]]:
    """(candidate index, candidate) of every logged ad: winners, runner-ups, sampled losers, in that order."""
    found: list[tuple[int | None, Candidate]] = []
    for w in record.get("winners") or []:
        found.append((w.get("candidate_index"), auction_candidate(
            w["ad_id"], w["campaign_id"], winner_bid(w, w["pctr_by_slot"]), w.get("exclusion_category", 0),
            w.get("participation_probability", 1.0))))
    for w in record.get("winners") or []:
        if w.get("runner_up_ad_id") is not None:
            found.append((w.get("runner_up_candidate_index"), auction_candidate(
                w["runner_up_ad_id"], w["runner_up_campaign_id"], runner_up_bid(w, w["runner_up_pctr_by_slot"]),
                w.get("runner_up_exclusion_category", 0))))
    for loser in sampled_losers(record):
        bid = LoggedBid(loser["bid_type"], loser["bid_micros"], loser["pctr_by_slot"], loser.get("pcvr"),
                        loser["quality_micros"])
        found.append((loser.get("candidate_index"), auction_candidate(
            loser["ad_id"], loser["campaign_id"], bid, loser.get("exclusion_category", 0))))
    return found


def logged_candidates(record: Record) -> list[Candidate]:
    """The candidates a replay can rerun: each logged ad once, in the auction's candidate order (an ad
    without a logged index after those with one, winners before runner-ups before losers).

    Raises NotReplayable when the record lacks the inputs (see replay_gap)."""
    gap = replay_gap(record)
    if gap:
        raise NotReplayable(f"request {record.get('request_id')}: {gap}")
    seen: dict[Any, tuple[tuple[int, int, int], Candidate]] = {}
    for order, (index, candidate) in enumerate(_logged(record)):
        if candidate.ad_id not in seen:
            key = (0, index, order) if index is not None else (1, 0, order)
            seen[candidate.ad_id] = (key, candidate)
    return [c for _, c in sorted(seen.values(), key=lambda kc: kc[0])]


def log_is_complete(record: Record) -> bool:
    """Whether the log holds every candidate of the auction (then any replay of it is exact)."""
    count = record.get("auction_candidates")
    return count is not None and replay_gap(record) is None and len(logged_candidates(record)) >= int(count)
