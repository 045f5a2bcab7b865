"""The canary's promotion check, offline: whether a candidate click model may replace the current one, from
what the two arms of serving.model.canary served.

From served records (model_version, winners' impression ids and expected cost) joined with labelled
TrainingExamples by impression id, `canary_report` computes per model version requests, revenue per request
(the winners' expected cost over the requests, micros) and calibration (predicted over observed clicks, sum of
logged pCTR x weight over sum of label x weight) overall and per (placement, country, billing type), then a
verdict: "promote", "hold" (with the reasons) or "not enough data" (with how many clicks are needed). The
calibration band holds overall and in every segment of the candidate with at least min_segment_clicks clicks;
the report names the segments judged and their clicks (`segments_judged`).
Conversion bids are judged too: over the CONVERSION examples of CPA winners, predicted conversions (the logged
pCVR of each clicked impression) over observed ones; once the candidate has min_conversions of them, a
conversion calibration outside its band holds the candidate, and before that the report says it was not
judged (conversions are rare: they do not stall a click model's promotion). Requests scored on fallback carry
no model version; they are counted apart and their impressions judge no model. Pure: never reads files or the
clock."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Iterable, Mapping

from serving.model.canary import HOLD, NOT_ENOUGH_DATA, PROMOTE


@dataclass(frozen=True)
class PromotionRule:
    calibration_low: float = 0.95
    calibration_high: float = 1.05
    revenue_tolerance: float = 0.02  # the candidate's revenue per request may be this much below the current's
    # A ratio of predicted over observed clicks over n clicks is good to about +-2/sqrt(n): +-5 % needs 1,600.
    min_clicks: int = 1_600
    # Each (placement, country, billing type) of the candidate with at least this many clicks is held to the
    # same band: a model calibrated overall can still be off in a segment (its own overestimates win there).
    min_segment_clicks: int = 1_600
    # pCVR of conversion bids: predicted over observed conversions, judged from 400 conversions (+-10 %)
    conversion_low: float = 0.9
    conversion_high: float = 1.1
    min_conversions: int = 400


@dataclass
class _Arm:
    requests: int = 0
    revenue_micros: int = 0
    revenue_squares: int = 0  # sum of each request's revenue squared (the standard error of the mean)
    impressions: float = 0.0  # labelled impressions, weighted (the population they stand for)
    clicks: int = 0
    predicted_clicks: float = 0.0
    observed_weighted: float = 0.0
    conversion_clicks: int = 0  # clicked CPA impressions with a conversion label
    conversions: int = 0
    predicted_conversions: float = 0.0

    def figures(self) -> dict[str, Any]:
        per_request = self.revenue_micros // self.requests if self.requests else None
        standard_error = None
        if self.requests > 1:
            mean = self.revenue_micros / self.requests
            spread = max(0.0, self.revenue_squares / self.requests - mean * mean)
            variance = spread * self.requests / (self.requests - 1)  # the sample variance of a request's revenue
            standard_error = round(math.sqrt(variance / self.requests), 1)
        return {"requests": self.requests, "revenue_micros": self.revenue_micros,
                "revenue_per_request_micros": per_request, "revenue_per_request_standard_error_micros": standard_error,
                "impressions": round(self.impressions, 1), "clicks": self.clicks,
                "predicted_clicks": round(self.predicted_clicks, 2), "calibration": _ratio(self.predicted_clicks,
                                                                                          self.observed_weighted),
                "conversion_clicks": self.conversion_clicks, "conversions": self.conversions,
                "predicted_conversions": round(self.predicted_conversions, 2),
                "conversion_calibration": _ratio(self.predicted_conversions, self.conversions)}


def _ratio(predicted: float, observed: float) -> float | None:
    return round(predicted / observed, 4) if observed > 0 else None


def arm_figures(served: Iterable[Mapping[str, Any]],
                examples: Iterable[Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Per model version: requests, revenue, labelled impressions and calibration overall and per segment;
    and the counts that judge no model (fallback requests, examples without a served record)."""
    arms: dict[str, _Arm] = {}
    segments: dict[str, dict[tuple, _Arm]] = {}
    version_of_impression: dict[str, str] = {}
    logged_pcvr: dict[str, float] = {}  # CPA winners' logged pCVR by impression id
    other = {"fallback_requests": 0, "unmatched_examples": 0, "fallback_examples": 0}
    seen: set[str] = set()
    for record in served:
        if record["request_id"] in seen:  # the served log is at least once: a repeat is the same request
            continue
        seen.add(record["request_id"])
        version = record.get("model_version")
        if version is None or record.get("scored_by_fallback"):
            other["fallback_requests"] += 1
            continue
        arm = arms.setdefault(version, _Arm())
        revenue = sum(int(w["expected_cost_micros"]) for w in record.get("winners", []))
        arm.requests += 1
        arm.revenue_micros += revenue
        arm.revenue_squares += revenue * revenue
        for w in record.get("winners", []):
            version_of_impression[w["impression_id"]] = version
            if w.get("bid_type") == "CPA" and w.get("pcvr") is not None:
                logged_pcvr[w["impression_id"]] = float(w["pcvr"])
    for example in examples:
        if example.get("task", "CLICK") != "CLICK":  # a conversion example: pCVR of a CPA winner, if it is one
            impression = example["impression_id"]
            if impression in logged_pcvr and version_of_impression.get(impression) in arms:
                arm = arms[version_of_impression[impression]]
                arm.conversion_clicks += 1
                arm.conversions += int(example["label"])
                arm.predicted_conversions += logged_pcvr[impression]
            continue
        version = version_of_impression.get(example["impression_id"])
        if version is None:
            other["fallback_examples" if example.get("scored_by_fallback") else "unmatched_examples"] += 1
            continue
        weight, label = float(example["sample_weight"]), int(example["label"])
        key = (example["placement"], example.get("country"), example["billing_type"])
        for arm in (arms[version], segments.setdefault(version, {}).setdefault(key, _Arm())):
            arm.impressions += weight
            arm.clicks += label
            arm.predicted_clicks += float(example["logged_pctr"]) * weight
            arm.observed_weighted += label * weight
    figures = {}
    for version, arm in arms.items():
        figures[version] = arm.figures()
        figures[version]["segments"] = [
            {"placement": key[0], "country": key[1], "billing_type": key[2], "impressions": round(s.impressions, 1),
             "clicks": s.clicks, "predicted_clicks": round(s.predicted_clicks, 2),
             "calibration": _ratio(s.predicted_clicks, s.observed_weighted)}
            for key, s in sorted(segments.get(version, {}).items(), key=lambda kv: tuple(v or "" for v in kv[0]))]
    return figures, other


def _pick_arms(figures: Mapping[str, Mapping[str, Any]], current: str | None,
               candidate: str | None) -> tuple[str | None, str | None]:
    """The arms to compare: as given, else the most served version is the current one and the next the
    candidate (the canary serves the smaller share)."""
    by_requests = sorted(figures, key=lambda v: (-figures[v]["requests"], v))
    current = current or next((v for v in by_requests if v != candidate), None)
    candidate = candidate or next((v for v in by_requests if v != current), None)
    return current, candidate


def verdict(current: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None, names: tuple[str, str],
            rule: PromotionRule = PromotionRule()) -> tuple[str, list[str]]:
    """Promote, hold or not enough data, with the reasons."""
    current_name, candidate_name = names
    if not candidate or not candidate["requests"]:
        return NOT_ENOUGH_DATA, [f"no request was scored by the candidate {candidate_name or '(none)'}"]
    if not current or not current["requests"]:
        return NOT_ENOUGH_DATA, [f"no request was scored by the current model {current_name or '(none)'}"]
    if candidate["clicks"] < rule.min_clicks:
        return NOT_ENOUGH_DATA, [
            f"the candidate {candidate_name} has {candidate['clicks']:,} labelled clicks; judging its calibration "
            f"within {rule.calibration_low:g}-{rule.calibration_high:g} needs {rule.min_clicks:,} "
            f"({rule.min_clicks - candidate['clicks']:,} more; a ratio over n clicks is good to about "
            f"+-2/sqrt(n))"]
    reasons = []
    calibration = candidate["calibration"]
    calibrated = calibration is not None and rule.calibration_low <= calibration <= rule.calibration_high
    if not calibrated:
        reasons.append(f"calibration {calibration} (predicted {candidate['predicted_clicks']:,.0f} clicks for "
                       f"{candidate['clicks']:,} observed) is outside {rule.calibration_low:g}-"
                       f"{rule.calibration_high:g}")
    judged = judged_segments(candidate, rule)
    for s in judged:
        if s["calibration"] is None or not rule.calibration_low <= s["calibration"] <= rule.calibration_high:
            reasons.append(f"calibration {s['calibration']} in {_segment_name(s)} over {s['clicks']:,} clicks is "
                           f"outside {rule.calibration_low:g}-{rule.calibration_high:g}")
    # revenue per request, compared exactly: candidate / its requests >= current / its requests x (1 - tolerance)
    ours = Fraction(candidate["revenue_micros"], candidate["requests"])
    theirs = Fraction(current["revenue_micros"], current["requests"])
    change = float(ours / theirs - 1) * 100 if theirs else 0.0
    if ours < theirs * (1 - Fraction(str(rule.revenue_tolerance))):
        reasons.append(f"revenue per request {candidate['revenue_per_request_micros']:,} micros is {-change:.1f} % "
                       f"below the current model's {current['revenue_per_request_micros']:,} (tolerance "
                       f"{rule.revenue_tolerance * 100:g} %)")
    conversions, conversion_calibration = candidate.get("conversions", 0), candidate.get("conversion_calibration")
    if conversions >= rule.min_conversions:
        if conversion_calibration is None or not rule.conversion_low <= conversion_calibration <= rule.conversion_high:
            reasons.append(f"pCVR calibration {conversion_calibration} (predicted "
                           f"{candidate['predicted_conversions']:,.0f} conversions for {conversions:,}) is outside "
                           f"{rule.conversion_low:g}-{rule.conversion_high:g}")
        conversion_note = f"pCVR calibration {conversion_calibration} over {conversions:,} conversions"
    else:
        conversion_note = (f"pCVR not judged: {conversions:,} conversions of CPA winners (judged from "
                           f"{rule.min_conversions:,})")
    if reasons:
        return HOLD, reasons
    return PROMOTE, [f"calibration {calibration} within {rule.calibration_low:g}-{rule.calibration_high:g} over "
                     f"{candidate['clicks']:,} clicks, and in each of {len(judged)} segments with at least "
                     f"{rule.min_segment_clicks:,} clicks; revenue per request {candidate['revenue_per_request_micros']:,} "
                     f"micros against {current['revenue_per_request_micros']:,} ({change:+.1f} %); {conversion_note}"]


def judged_segments(arm: Mapping[str, Any], rule: PromotionRule) -> list[Mapping[str, Any]]:
    """The arm's segments with enough clicks for the rule to judge their calibration."""
    return [s for s in arm.get("segments", []) if s["clicks"] >= rule.min_segment_clicks]


def _segment_name(s: Mapping[str, Any]) -> str:
    return "/".join(str(s[k] or "-") for k in ("placement", "country", "billing_type"))


def canary_report(served: Iterable[Mapping[str, Any]], examples: Iterable[Mapping[str, Any]], *,
                  current: str | None = None, candidate: str | None = None,
                  rule: PromotionRule = PromotionRule()) -> dict[str, Any]:
    """The canary's figures per model version and the verdict on the candidate (see the module docstring)."""
    figures, other = arm_figures(served, examples)
    current, candidate = _pick_arms(figures, current, candidate)
    outcome, reasons = verdict(figures.get(current or ""), figures.get(candidate or ""), (current, candidate), rule)
    judged = judged_segments(figures.get(candidate or "", {}), rule)
    return {"current": current, "candidate": candidate, "verdict": outcome, "reasons": reasons,
            "segments_judged": [{"segment": _segment_name(s), "clicks": s["clicks"], "calibration": s["calibration"]}
                                for s in judged],
            "versions": figures, **other, "rule": asdict(rule)}


def render_report(report: Mapping[str, Any]) -> str:
    lines = [f"canary: candidate {report['candidate']} against current {report['current']}: "
             f"{report['verdict'].upper()}"]
    lines += [f"  - {reason}" for reason in report["reasons"]]
    lines.append("  version            requests   revenue/request (micros)   clicks   predicted/observed")
    for version, f in sorted(report["versions"].items(), key=lambda kv: -kv[1]["requests"]):
        per_request = "-" if f["revenue_per_request_micros"] is None else f"{f['revenue_per_request_micros']:,}"
        se = f["revenue_per_request_standard_error_micros"]
        per_request += f" +- {se:,.0f}" if se is not None else ""
        lines.append(f"  {version:<18} {f['requests']:>9,}   {per_request:>24}   {f['clicks']:>6,}   "
                     f"{'-' if f['calibration'] is None else format(f['calibration'], '.3f')}")
        if f.get("conversion_clicks"):
            cal = f["conversion_calibration"]
            lines.append(f"      conversion bids: {f['conversion_clicks']:,} clicks, {f['conversions']:,} conversions, "
                         f"predicted/observed {'-' if cal is None else format(cal, '.3f')}")
        for s in f["segments"]:
            key = "/".join(str(v or "-") for v in (s["placement"], s["country"], s["billing_type"]))
            lines.append(f"      {key:<40} clicks {s['clicks']:>6,}   "
                         f"{'-' if s['calibration'] is None else format(s['calibration'], '.3f')}")
    lines.append(f"  fallback requests {report['fallback_requests']:,} (no model version; judged by neither arm), "
                 f"examples without a served record {report['unmatched_examples']:,}")
    return "\n".join(lines)
