"""`adserve bench freshness`: the synthetic serving records its snapshot part boots a server from."""
from schemas import topics
from sim.synthetic import synthetic_serving_records


def test_the_snapshot_benchs_ads_are_approved_live_ads_with_the_platforms_quality():
    records = synthetic_serving_records(1_000)
    ads = records[topics.SERVING_ADS]
    assert len(ads) == 1_000 and not any(ad["removed"] for ad in ads)
    assert {ad["quality_prior"] for ad in ads} == {0.0}
    assert {ad["campaign_id"] for ad in ads} == {c["campaign_id"] for c in records[topics.SERVING_CAMPAIGNS]}
