"""The features job's estimates of every ad from a window of the platform's own traffic: position- and
placement-normalised click rates shrunk toward the advertiser's (the design's answer to "a new ad has no
history"), their Beta posterior, conversion rates, the quality term and the static score. Pure and typed:
counts in, numbers out; no clock, no I/O. docs/features.md gives every default and why.

Click rates (COEC, clicks over expected clicks): the base rate of a cell (placement, slot position) is the
click rate of all ads' impressions there; an ad's expected clicks are the clicks an average ad would have had
on the same impressions, the sum of its impressions' base rates; its ratio clicks / expected clicks is free of
where it was shown. Shrinkage, with pseudo-counts in expected clicks:
    advertiser ratio = (advertiser's clicks + m_adv) / (advertiser's expected clicks + m_adv)     (toward 1)
    ad ratio         = (clicks + m_ad x advertiser ratio) / (expected clicks + m_ad)
    ctr_estimate     = ad ratio x top rate   (position 1 over all placements)
so an ad without traffic gets its advertiser's rate, an advertiser without traffic the platform's, and an ad
with many expected clicks its own. Its Beta posterior has n_eff = (expected clicks + m_ad) / top rate
pseudo-impressions: alpha = ctr_estimate x n_eff, beta = (1 - ctr_estimate) x n_eff."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from core.campaigns import CTR_PRIOR, CVR_PRIOR
from core.errors import InvalidArgument
from core.feature_windows import Counts, total

Cell = tuple[str, int]  # (placement, slot position)
TOP_POSITION = 1
UNKNOWN_ADVERTISER = 0
BID_TYPE_CODES = {"CPM": 0, "CPC": 1, "CPA": 2}  # the snapshot file's bid_type column
MAX_CTR = 0.999  # a Beta posterior needs a rate strictly inside (0, 1)


@dataclass(frozen=True)
class EstimateRules:
    """The estimates' priors and costs (defaults and reasons in docs/features.md)."""

    default_base_rate: float = CTR_PRIOR  # clicks per top-position impression before any traffic
    base_rate_pseudo_impressions: float = 1_000.0  # a cell's base rate is shrunk toward the platform's by these
    ad_pseudo_clicks: float = 2.0  # m_ad, in expected clicks: ~200 top impressions at 1 %
    advertiser_pseudo_clicks: float = 5.0  # m_adv, in expected clicks
    default_cvr: float = CVR_PRIOR  # conversions per click before any conversion
    cvr_pseudo_clicks: float = 20.0  # each level's conversion rate is shrunk toward the next by these clicks
    quality_pseudo_impressions: float = 1_000.0  # an ad's hide and report rates shrink toward the platform's
    hide_cost_micros: int = 20_000  # what one hide costs the platform in future engagement, micros
    report_cost_micros: int = 200_000  # what one report costs, micros

    def __post_init__(self) -> None:
        for name in ("default_base_rate", "default_cvr"):
            if not 0 < getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be in (0, 1), got {getattr(self, name)}")
        for name in ("base_rate_pseudo_impressions", "ad_pseudo_clicks", "advertiser_pseudo_clicks",
                     "cvr_pseudo_clicks", "quality_pseudo_impressions"):
            if not getattr(self, name) > 0:
                raise InvalidArgument(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("hide_cost_micros", "report_cost_micros"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"{name} must not be negative, got {getattr(self, name)}")


def shrunk_rate(events: float, trials: float, prior_rate: float, pseudo_trials: float) -> float:
    """(events + pseudo x prior) / (trials + pseudo): the prior with no evidence, the raw rate with a lot."""
    return (events + pseudo_trials * prior_rate) / (trials + pseudo_trials)


# ------------------------------------------------------------------ base rates

@dataclass(frozen=True)
class BaseRates:
    """Click rates of the window's traffic: per cell, over everything, and at the top position."""

    by_cell: Mapping[Cell, float] = field(default_factory=dict)
    platform: float = CTR_PRIOR
    top: float = CTR_PRIOR

    def of(self, cell: Cell) -> float:
        """A cell's base rate; the platform's for a cell the window never saw."""
        return self.by_cell.get(cell, self.platform)


def base_rates(cells: Mapping[Cell, Counts], rules: EstimateRules = EstimateRules()) -> BaseRates:
    """Base rates from every ad's counts by cell, pooled. Each cell's rate is shrunk toward the platform's
    (so a cell with a handful of impressions does not swing its ads' ratios); before any traffic every rate
    is the default."""
    pseudo = rules.base_rate_pseudo_impressions
    everything = total(cells.values())
    platform = shrunk_rate(everything.clicks, everything.impressions, rules.default_base_rate, pseudo)
    by_cell = {cell: shrunk_rate(c.clicks, c.impressions, platform, pseudo) for cell, c in cells.items()}
    top = total(c for cell, c in cells.items() if cell[1] == TOP_POSITION)
    return BaseRates(by_cell, platform, shrunk_rate(top.clicks, top.impressions, platform, pseudo))


def pooled_cells(per_ad: Iterable[Mapping[Cell, Counts]]) -> dict[Cell, Counts]:
    out: dict[Cell, Counts] = {}
    for cells in per_ad:
        for cell, counts in cells.items():
            out[cell] = out.get(cell, Counts()) + counts
    return out


def expected_clicks(cells: Mapping[Cell, Counts], rates: BaseRates) -> float:
    """The clicks an average ad would have had on these impressions: the position-normalised exposure."""
    return sum(counts.impressions * rates.of(cell) for cell, counts in cells.items())


# ------------------------------------------------------------------ click rates

def advertiser_ratio(clicks: float, expected: float, rules: EstimateRules = EstimateRules()) -> float:
    """The advertiser's clicks over expected clicks, shrunk toward 1 (the platform's average)."""
    return shrunk_rate(clicks, expected, 1.0, rules.advertiser_pseudo_clicks)


def ad_ratio(clicks: float, expected: float, prior_ratio: float, rules: EstimateRules = EstimateRules()) -> float:
    """The ad's clicks over expected clicks, shrunk toward its advertiser's ratio."""
    return shrunk_rate(clicks, expected, prior_ratio, rules.ad_pseudo_clicks)


def ctr_estimate(ratio: float, rates: BaseRates) -> float:
    """A ratio as a click rate at the top position of an average placement."""
    return min(max(ratio * rates.top, 0.0), MAX_CTR)


def ctr_posterior(ctr: float, expected: float, rates: BaseRates,
                  rules: EstimateRules = EstimateRules()) -> tuple[float, float]:
    """(alpha, beta) of the Beta posterior whose mean is ctr: the evidence (expected clicks plus the prior's
    m_ad) as top-position pseudo-impressions."""
    n_eff = (expected + rules.ad_pseudo_clicks) / rates.top
    return ctr * n_eff, (1.0 - ctr) * n_eff


# ------------------------------------------------------------------ quality and value

def quality_micros(counts: Counts, platform_hide_rate: float, platform_report_rate: float,
                   rules: EstimateRules = EstimateRules()) -> int:
    """Minus the predicted user-experience cost of one impression, micros: the ad's hide and report rates,
    each shrunk toward the platform's, times their money cost. Zero for an ad nobody hides or reports on a
    platform where nobody does; more negative the more its users hide and report it."""
    pseudo = rules.quality_pseudo_impressions
    hide_rate = shrunk_rate(counts.hides, counts.impressions, platform_hide_rate, pseudo)
    report_rate = shrunk_rate(counts.reports, counts.impressions, platform_report_rate, pseudo)
    return -round(hide_rate * rules.hide_cost_micros + report_rate * rules.report_cost_micros)


def expected_value_micros(bid_type: str, bid_micros: int, ctr: float, cvr: float) -> float:
    """Expected value of one impression before quality, micros: a CPM bid counts bid / 1000, a click bid
    bid x pCTR, a conversion goal target CPA x pCTR x pCVR (the design's total value; core.campaigns'
    static_score is this at its constant priors)."""
    if bid_type == "CPM":
        return bid_micros / 1000
    if bid_type == "CPC":
        return bid_micros * ctr
    if bid_type == "CPA":
        return bid_micros * ctr * cvr
    raise InvalidArgument(f"bid_type must be one of CPM, CPC, CPA, got {bid_type!r}")


def static_score(bid_type: str, bid_micros: int, ctr: float, cvr: float, quality: int) -> float:
    """The ad's recent expected value per impression with its quality term, micros: the order the index
    reads postings in."""
    return expected_value_micros(bid_type, bid_micros, ctr, cvr) + quality


# ------------------------------------------------------------------ every ad at once

@dataclass(frozen=True)
class AdTraffic:
    """What the window holds of one ad: its campaign and advertiser (0: not known) and its counts by cell."""

    campaign_id: int
    advertiser_id: int
    cells: Mapping[Cell, Counts] = field(default_factory=dict)


@dataclass(frozen=True)
class AdEstimate:
    """One ad's estimates from one window."""

    ad_id: int
    campaign_id: int
    advertiser_id: int
    counts: Counts
    expected_clicks: float
    ctr_estimate: float
    ctr_alpha: float
    ctr_beta: float
    cvr_estimate: float
    quality_micros: int


@dataclass(frozen=True)
class _Pool:
    clicks: float = 0.0
    expected: float = 0.0
    conversions: float = 0.0

    def __add__(self, other: "_Pool") -> "_Pool":
        return _Pool(self.clicks + other.clicks, self.expected + other.expected,
                     self.conversions + other.conversions)


def estimate(ads: Mapping[int, AdTraffic], rules: EstimateRules = EstimateRules()) -> dict[int, AdEstimate]:
    """Every ad's estimates from the window's traffic of all ads (the base rates and the advertisers' pools
    are the ads' own, so one call sees the whole platform). An ad of an unknown advertiser is shrunk toward
    the platform's ratio, 1."""
    rates = base_rates(pooled_cells(a.cells for a in ads.values()), rules)
    totals = {ad_id: total(a.cells.values()) for ad_id, a in ads.items()}
    expected = {ad_id: expected_clicks(a.cells, rates) for ad_id, a in ads.items()}
    pools: dict[int, _Pool] = {}
    for ad_id, a in ads.items():
        if a.advertiser_id != UNKNOWN_ADVERTISER:
            own = _Pool(totals[ad_id].clicks, expected[ad_id], totals[ad_id].conversions)
            pools[a.advertiser_id] = pools.get(a.advertiser_id, _Pool()) + own
    everything = total(totals.values())
    platform_cvr = shrunk_rate(everything.conversions, everything.clicks, rules.default_cvr, rules.cvr_pseudo_clicks)
    platform_hide = everything.hides / everything.impressions if everything.impressions else 0.0
    platform_report = everything.reports / everything.impressions if everything.impressions else 0.0
    out = {}
    for ad_id, a in ads.items():
        pool = pools.get(a.advertiser_id)
        prior_ratio = 1.0 if pool is None else advertiser_ratio(pool.clicks, pool.expected, rules)
        prior_cvr = platform_cvr if pool is None else \
            shrunk_rate(pool.conversions, pool.clicks, platform_cvr, rules.cvr_pseudo_clicks)
        counts = totals[ad_id]
        ctr = ctr_estimate(ad_ratio(counts.clicks, expected[ad_id], prior_ratio, rules), rates)
        alpha, beta = ctr_posterior(ctr, expected[ad_id], rates, rules)
        out[ad_id] = AdEstimate(
            ad_id, a.campaign_id, a.advertiser_id, counts, expected[ad_id], ctr, alpha, beta,
            shrunk_rate(counts.conversions, counts.clicks, prior_cvr, rules.cvr_pseudo_clicks),
            quality_micros(counts, platform_hide, platform_report, rules))
    return out


# ------------------------------------------------------------------ an ad's published row

@dataclass(frozen=True)
class AdAttributes:
    """What serving.ads says of an ad that its published row carries (the compiled serving record, newest
    version), with its content embedding (core.ad_content)."""

    campaign_id: int
    advertiser_id: int
    version: int
    bid_type: str
    bid_micros: int
    category: int
    removed: bool
    embedding: tuple[float, ...]


def features_record(found: AdEstimate, attributes: AdAttributes, version: int) -> dict:
    """The ad's AdFeatures record (schemas/ad_features.avsc) in the snapshot `version`."""
    counts = found.counts
    return {
        "snapshot_version": int(version), "event_time": int(version), "ad_id": int(found.ad_id),
        "campaign_id": int(found.campaign_id), "advertiser_id": int(found.advertiser_id),
        "bid_type": attributes.bid_type, "bid_micros": int(attributes.bid_micros), "category": int(attributes.category),
        "impressions": counts.impressions, "clicks": counts.clicks, "conversions": counts.conversions,
        "hides": counts.hides, "reports": counts.reports, "expected_clicks": float(found.expected_clicks),
        "ctr_estimate": float(found.ctr_estimate), "ctr_alpha": float(found.ctr_alpha),
        "ctr_beta": float(found.ctr_beta), "cvr_estimate": float(found.cvr_estimate),
        "quality_micros": int(found.quality_micros),
        "static_score": static_score(attributes.bid_type, attributes.bid_micros, found.ctr_estimate,
                                     found.cvr_estimate, found.quality_micros),
        "embedding": [float(v) for v in attributes.embedding],
    }


def row_fingerprint(record: dict) -> int:
    """A 63-bit fingerprint of what an AdFeatures record says, its snapshot version and time aside, with the
    estimates to 6 significant digits: equal fingerprints, nothing worth republishing for the ad."""
    def canonical(value):
        if isinstance(value, float):
            return f"{value:.6g}"
        if isinstance(value, list):
            return [canonical(v) for v in value]
        return value

    said = sorted((k, canonical(v)) for k, v in record.items() if k not in ("snapshot_version", "event_time"))
    digest = hashlib.blake2b(repr(said).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def advertiser_of(campaign_id: int, attributes: AdAttributes | None, advertisers: Mapping[int, int]) -> int:
    """An ad's advertiser: its campaign's (serving.campaigns), else what its serving record says, else 0."""
    found = advertisers.get(campaign_id)
    if found:
        return int(found)
    return attributes.advertiser_id if attributes is not None else UNKNOWN_ADVERTISER


@dataclass(frozen=True)
class KnownAd:
    """What the publisher holds of one ad: its campaign, its attributes (None until serving.ads had it) and
    its latest window by cell."""

    campaign_id: int
    attributes: AdAttributes | None = None
    cells: Mapping[Cell, Counts] = field(default_factory=dict)

    @property
    def listed(self) -> bool:
        """Whether the ad belongs in a snapshot: known to serving.ads and not removed."""
        return self.attributes is not None and not self.attributes.removed


def published_records(ads: Mapping[int, KnownAd], advertisers: Mapping[int, int], version: int,
                      rules: EstimateRules = EstimateRules()) -> dict[int, dict]:
    """The AdFeatures record of every listed ad in snapshot `version`, by ad id, from every ad's window (ads
    that are removed or not known to serving.ads still count in the base rates and their advertiser's pool,
    since their traffic was real)."""
    campaign = {ad_id: (ad.attributes.campaign_id if ad.attributes is not None else ad.campaign_id)
                for ad_id, ad in ads.items()}
    traffic = {ad_id: AdTraffic(campaign[ad_id], advertiser_of(campaign[ad_id], ad.attributes, advertisers),
                                ad.cells) for ad_id, ad in ads.items()}
    found = estimate(traffic, rules)
    return {ad_id: features_record(found[ad_id], ad.attributes, version)
            for ad_id, ad in sorted(ads.items()) if ad.listed}
