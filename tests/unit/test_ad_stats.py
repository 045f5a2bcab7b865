"""The features job's estimates (core.ad_stats): base rates, position normalisation, shrinkage toward the
advertiser and the platform, the Beta posterior, conversion rates, the quality term and the static score."""
from __future__ import annotations

import pytest

from core import ad_stats, campaigns
from core.ad_stats import AdTraffic, BaseRates, EstimateRules
from core.errors import InvalidArgument
from core.feature_windows import Counts

RULES = EstimateRules()


def test_before_any_traffic_every_base_rate_is_the_default():
    rates = ad_stats.base_rates({}, RULES)
    assert rates.platform == rates.top == RULES.default_base_rate
    assert rates.of(("feed", 3)) == RULES.default_base_rate


def test_with_plenty_of_traffic_a_cells_base_rate_is_its_click_rate():
    rates = ad_stats.base_rates({("feed", 1): Counts(impressions=1_000_000, clicks=30_000),
                                 ("feed", 2): Counts(impressions=1_000_000, clicks=10_000)}, RULES)
    assert rates.of(("feed", 1)) == pytest.approx(0.03, rel=1e-3)
    assert rates.of(("feed", 2)) == pytest.approx(0.01, rel=1e-3)
    assert rates.top == pytest.approx(0.03, rel=1e-3)
    assert rates.platform == pytest.approx(0.02, rel=1e-3)


def test_the_top_rate_pools_position_one_of_every_placement():
    rates = ad_stats.base_rates({("feed", 1): Counts(impressions=1_000_000, clicks=40_000),
                                 ("article", 1): Counts(impressions=1_000_000, clicks=20_000),
                                 ("article", 2): Counts(impressions=1_000_000, clicks=1_000)}, RULES)
    assert rates.top == pytest.approx(0.03, rel=1e-3)


def test_a_cell_with_few_impressions_stays_near_the_platform_rate():
    rates = ad_stats.base_rates({("feed", 1): Counts(impressions=1_000_000, clicks=20_000),
                                 ("rare", 1): Counts(impressions=10, clicks=5)}, RULES)
    assert rates.of(("rare", 1)) < 0.03


def test_expected_clicks_weigh_each_impression_by_its_cells_base_rate():
    rates = BaseRates({("feed", 1): 0.04, ("feed", 2): 0.01}, platform=0.02, top=0.04)
    cells = {("feed", 1): Counts(impressions=100), ("feed", 2): Counts(impressions=300),
             ("side", 1): Counts(impressions=50)}
    assert ad_stats.expected_clicks(cells, rates) == pytest.approx(100 * 0.04 + 300 * 0.01 + 50 * 0.02)


def _ads_under_a_position_effect():
    """Ad 1 is twice as good as ad 2 but mostly shown at position 3, where every ad gets half the clicks
    of position 1; ad 2 mostly at position 1; ad 3, average, fills both positions alike and dominates the
    base rates (an ad that is most of a cell moves its base rate: COEC assumes no single ad does)."""
    top_rate = 0.02

    def counts(quality: float, position: int, impressions: int) -> Counts:
        rate = top_rate * quality * (1.0 if position == 1 else 0.5)
        return Counts(impressions=impressions, clicks=round(impressions * rate))

    return {
        1: AdTraffic(10, 100, {("feed", 1): counts(2.0, 1, 2_000), ("feed", 3): counts(2.0, 3, 200_000)}),
        2: AdTraffic(20, 200, {("feed", 1): counts(1.0, 1, 200_000), ("feed", 3): counts(1.0, 3, 2_000)}),
        3: AdTraffic(30, 300, {("feed", 1): counts(1.0, 1, 50_000_000), ("feed", 3): counts(1.0, 3, 50_000_000)}),
    }


def test_position_normalisation_undoes_the_position_effect():
    ads = _ads_under_a_position_effect()
    raw = {ad_id: sum(c.clicks for c in a.cells.values()) / sum(c.impressions for c in a.cells.values())
           for ad_id, a in ads.items()}
    assert raw[1] == pytest.approx(raw[2], rel=0.05)  # raw click rates hide the difference
    estimates = ad_stats.estimate(ads, RULES)
    assert estimates[1].ctr_estimate / estimates[2].ctr_estimate == pytest.approx(2.0, rel=0.03)
    assert estimates[2].ctr_estimate == pytest.approx(0.02, rel=0.03)  # the top position's rate


def test_an_ad_without_evidence_gets_its_advertisers_ratio():
    assert ad_stats.ad_ratio(0, 0.0, 1.7, RULES) == pytest.approx(1.7)


def test_an_ad_with_a_lot_of_evidence_gets_its_own_ratio():
    assert ad_stats.ad_ratio(3_000, 1_000.0, 0.5, RULES) == pytest.approx(3.0, rel=0.01)


def test_an_advertiser_without_evidence_gets_the_platforms_ratio():
    assert ad_stats.advertiser_ratio(0, 0.0, RULES) == 1.0
    assert ad_stats.advertiser_ratio(600, 200.0, RULES) == pytest.approx(3.0, rel=0.05)


def test_a_new_ad_gets_its_advertisers_rate_and_an_unknown_advertisers_ad_the_platforms():
    good = {("feed", 1): Counts(impressions=100_000, clicks=4_000)}
    average = {("feed", 1): Counts(impressions=1_000_000, clicks=20_000)}
    ads = {1: AdTraffic(10, 100, good), 2: AdTraffic(10, 100), 3: AdTraffic(20, 200, average),
           4: AdTraffic(30, 0)}
    estimates = ad_stats.estimate(ads, RULES)
    rates = ad_stats.base_rates(ad_stats.pooled_cells(a.cells for a in ads.values()), RULES)
    advertiser = ad_stats.advertiser_ratio(4_000, ad_stats.expected_clicks(good, rates), RULES)
    assert estimates[2].ctr_estimate == pytest.approx(advertiser * rates.top)
    assert estimates[2].ctr_estimate > estimates[3].ctr_estimate
    assert estimates[4].ctr_estimate == pytest.approx(rates.top)


def test_the_posterior_mean_is_the_estimate_and_it_narrows_with_evidence():
    rates = BaseRates({}, platform=0.01, top=0.01)
    alpha, beta = ad_stats.ctr_posterior(0.02, 0.0, rates, RULES)
    assert alpha / (alpha + beta) == pytest.approx(0.02)
    assert alpha + beta == pytest.approx(RULES.ad_pseudo_clicks / 0.01)
    more_alpha, more_beta = ad_stats.ctr_posterior(0.02, 50.0, rates, RULES)
    assert more_alpha + more_beta > 20 * (alpha + beta)


def test_conversion_rate_is_shrunk_toward_the_advertisers():
    cells_a = {("feed", 1): Counts(impressions=100_000, clicks=2_000, conversions=400)}
    ads = {1: AdTraffic(10, 100, cells_a), 2: AdTraffic(10, 100, {("feed", 1): Counts(impressions=500, clicks=3)})}
    estimates = ad_stats.estimate(ads, RULES)
    assert estimates[1].cvr_estimate == pytest.approx(0.2, rel=0.02)
    assert estimates[2].cvr_estimate > 0.15  # three clicks and no conversion: mostly the advertiser's rate


def test_an_ad_without_clicks_has_the_default_conversion_rate_on_a_platform_without_conversions():
    estimates = ad_stats.estimate({1: AdTraffic(10, 0)}, RULES)
    assert estimates[1].cvr_estimate == pytest.approx(RULES.default_cvr)


def test_quality_is_zero_where_nobody_hides_or_reports():
    assert ad_stats.quality_micros(Counts(impressions=10_000), 0.0, 0.0, RULES) == 0


def test_an_ad_users_hide_gets_a_negative_quality():
    hidden = ad_stats.quality_micros(Counts(impressions=10_000, hides=500), 0.001, 0.0, RULES)
    liked = ad_stats.quality_micros(Counts(impressions=10_000, hides=5), 0.001, 0.0, RULES)
    assert hidden < liked <= 0
    assert hidden == pytest.approx(-(500 + 1_000 * 0.001) / 11_000 * RULES.hide_cost_micros, abs=1)


def test_a_report_costs_more_than_a_hide():
    hides = ad_stats.quality_micros(Counts(impressions=1_000, hides=10), 0.0, 0.0, RULES)
    reports = ad_stats.quality_micros(Counts(impressions=1_000, reports=10), 0.0, 0.0, RULES)
    assert reports < hides < 0


def test_a_new_ad_has_the_platforms_average_quality():
    assert ad_stats.quality_micros(Counts(), 0.01, 0.001, RULES) == -round(0.01 * 20_000 + 0.001 * 200_000)


def test_quality_in_estimates_is_lower_for_the_hidden_ad():
    ads = {1: AdTraffic(10, 100, {("feed", 1): Counts(impressions=5_000, clicks=50, hides=200)}),
           2: AdTraffic(10, 100, {("feed", 1): Counts(impressions=5_000, clicks=50)})}
    estimates = ad_stats.estimate(ads, RULES)
    assert estimates[1].quality_micros < estimates[2].quality_micros <= 0


def test_static_score_units_match_the_index_builders_at_its_priors():
    for bid_type, bid in (("CPM", 2_000_000), ("CPC", 1_500_000), ("CPA", 30_000_000)):
        assert ad_stats.static_score(bid_type, bid, campaigns.CTR_PRIOR, campaigns.CVR_PRIOR, -150) == \
            pytest.approx(campaigns.static_score(bid_type, bid, -150.0))


def test_static_score_is_bid_times_rate_plus_quality_in_micros():
    # The design's example: a $2.00 click bid at 1.5 % is $0.030 per impression before quality.
    assert ad_stats.static_score("CPC", 2_000_000, 0.015, 0.0, 2_000) == pytest.approx(32_000)
    assert ad_stats.static_score("CPM", 5_000_000, 0.5, 0.5, -100) == pytest.approx(4_900)
    assert ad_stats.static_score("CPA", 40_000_000, 0.01, 0.05, 0) == pytest.approx(20_000)


def test_an_unknown_bid_type_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="bid_type"):
        ad_stats.expected_value_micros("CPX", 1, 0.1, 0.1)


def test_rules_refuse_a_rate_outside_zero_and_one_by_name():
    with pytest.raises(InvalidArgument, match="default_base_rate"):
        EstimateRules(default_base_rate=1.5)
    with pytest.raises(InvalidArgument, match="ad_pseudo_clicks"):
        EstimateRules(ad_pseudo_clicks=0)


def test_estimates_stay_inside_zero_and_one():
    ads = {1: AdTraffic(10, 100, {("feed", 2): Counts(impressions=10_000, clicks=10_000)}),
           2: AdTraffic(10, 100, {("feed", 1): Counts(impressions=1_000_000, clicks=1_000)})}
    for e in ad_stats.estimate(ads, RULES).values():
        assert 0 < e.ctr_estimate < 1 and e.ctr_alpha > 0 and e.ctr_beta > 0


def _attributes(campaign_id: int, advertiser_id: int, *, removed: bool = False, bid_type: str = "CPC"):
    return ad_stats.AdAttributes(campaign_id, advertiser_id, 1, bid_type, 2_000_000, 3, removed, (1.0,) + (0.0,) * 15)


def test_an_ads_advertiser_is_its_campaigns_then_its_serving_records_then_unknown():
    assert ad_stats.advertiser_of(10, _attributes(10, 7), {10: 100}) == 100
    assert ad_stats.advertiser_of(10, _attributes(10, 7), {}) == 7
    assert ad_stats.advertiser_of(10, None, {}) == ad_stats.UNKNOWN_ADVERTISER


def test_published_records_list_known_ads_that_are_not_removed_and_count_every_ads_traffic():
    traffic = {("feed", 1): Counts(impressions=10_000, clicks=300)}
    ads = {1: ad_stats.KnownAd(10, _attributes(10, 0), {}),
           2: ad_stats.KnownAd(10, _attributes(10, 0, removed=True), traffic),
           3: ad_stats.KnownAd(10, None, traffic)}
    records = ad_stats.published_records(ads, {10: 100}, 1_800_000_300_000)
    assert list(records) == [1]
    record = records[1]
    assert (record["snapshot_version"], record["event_time"]) == (1_800_000_300_000, 1_800_000_300_000)
    assert record["advertiser_id"] == 100
    # The removed and the unlisted ad clicked at 3 %: their advertiser's new ad is estimated above the default.
    assert record["ctr_estimate"] > 0.02 and record["impressions"] == 0
    assert record["static_score"] == pytest.approx(2_000_000 * record["ctr_estimate"] + record["quality_micros"])
    assert record["category"] == 3 and len(record["embedding"]) == 16


def test_a_rows_fingerprint_ignores_its_version_and_float_noise_but_not_a_change():
    ads = {1: ad_stats.KnownAd(10, _attributes(10, 100), {("feed", 1): Counts(impressions=100, clicks=3)})}
    first = ad_stats.published_records(ads, {}, 1)[1]
    assert ad_stats.row_fingerprint(first) == ad_stats.row_fingerprint({**first, "snapshot_version": 2,
                                                                        "event_time": 2})
    assert ad_stats.row_fingerprint(first) == ad_stats.row_fingerprint(
        {**first, "ctr_estimate": first["ctr_estimate"] * (1 + 1e-9)})
    assert ad_stats.row_fingerprint(first) != ad_stats.row_fingerprint({**first, "clicks": 4})
