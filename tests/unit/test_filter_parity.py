"""The compiled filters (serving.decision.filters.apply_filters over filter_kernels) equal their array
specification (reference_filters) on random worlds: the same survivors in the same order, the same p, the same
counts per reason, eligible campaigns and slices wanted, and the same random numbers drawn."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from core.frequency import day_number
from core.targeting import compile_targeting
from serving.decision.campaigns import BUDGET_STATES, CampaignRecord, CampaignTable
from serving.decision import filters
from serving.decision.filters import FREQUENCY_RECORD_UNAVAILABLE, FilterContext, apply_filters, reference_filters
from serving.decision.index import AdRecord, TargetingIndex

NOW = 1_800_000_000_000
EVERYWHERE = compile_targeting({"placement": ["feed"]})
STATUSES = ("ACTIVE", "ACTIVE", "ACTIVE", "PAUSED", "ENDED")
MORNING = [{"day_of_week": d, "start_minute": 0, "end_minute": 8 * 60} for d in range(1, 8)]


def _world(seed: int, campaigns_n: int, ads_n: int) -> tuple[TargetingIndex, CampaignTable, np.random.Generator]:
    rng = np.random.default_rng(seed)
    table = CampaignTable()
    for cid in range(1, campaigns_n + 1):
        table.upsert(CampaignRecord(
            campaign_id=cid, advertiser_id=100 + int(rng.integers(0, 4)), version=1,
            status=STATUSES[int(rng.integers(0, len(STATUSES)))],
            flight_start=None if rng.random() < 0.8 else NOW + int(rng.integers(-10, 10)),
            flight_end=None if rng.random() < 0.8 else NOW + int(rng.integers(-10, 10)),
            dayparts=MORNING if rng.random() < 0.15 else (),
            timezone="America/Los_Angeles" if rng.random() < 0.5 else "UTC",
            cap_per_day=None if rng.random() < 0.6 else int(rng.integers(1, 4)),
            cap_per_week=None if rng.random() < 0.8 else int(rng.integers(1, 9))))
        table.set_budget(cid, BUDGET_STATES[int(rng.integers(0, 3))], float(rng.choice([1.0, 0.5, 0.1, 0.0])),
                         slice_held=bool(rng.random() < 0.5))
    ads = [AdRecord(ad_id=a, campaign_id=int(rng.integers(1, campaigns_n + 8)), version=1, bid_type="CPM",
                    bid_micros=int(rng.integers(1, 5_000_000)), quality_micros=0, static_score=float(a),
                    targeting=EVERYWHERE, creative_ref=f"c{a}", landing_url="https://x.example/", ctr_prior=0.01,
                    embedding=[0.0] * 8) for a in range(1, ads_n + 1)]
    return TargetingIndex.build(ads), table, rng


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), campaigns_n=st.integers(1, 30), ads_n=st.integers(0, 120),
       frequency=st.sampled_from(["none", "empty", "record", "unavailable"]), hide=st.booleans())
def test_the_compiled_filters_equal_the_array_specification(seed, campaigns_n, ads_n, frequency, hide):
    index, campaigns, rng = _world(seed, campaigns_n, ads_n)
    today = day_number(NOW)
    record = {"none": None, "empty": {}, "unavailable": FREQUENCY_RECORD_UNAVAILABLE,
              "record": {(c, today): int(rng.integers(1, 5)) for c in range(1, campaigns_n + 1, 2)}}[frequency]
    hidden = frozenset({100, 102}) if hide else frozenset()
    context = FilterContext(NOW + int(rng.integers(-5, 5)), record, hidden)
    rows = np.sort(rng.choice(max(ads_n, 1), size=min(ads_n, int(rng.integers(0, ads_n + 1))), replace=False)) \
        .astype(np.int32) if ads_n else np.zeros(0, np.int32)
    compiled_rng, reference_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    got = apply_filters(rows, index, campaigns, context, compiled_rng)
    want = reference_filters(rows, index, campaigns, context, reference_rng)
    assert got.rows.tolist() == want.rows.tolist()
    assert got.campaign_rows.tolist() == want.campaign_rows.tolist()
    assert got.participation.tolist() == want.participation.tolist()
    assert got.dropped == want.dropped
    assert got.eligible_campaigns.tolist() == want.eligible_campaigns.tolist()
    assert got.slices_wanted == want.slices_wanted
    assert compiled_rng.random() == reference_rng.random()  # the same numbers were drawn
    assert (filters._slot_scratch(campaigns.size) == -1).all()  # the scratch is left as found


def test_the_parity_test_sees_a_difference_in_the_coin():
    """A check on the check: one coin flipped the other way is a different result."""
    index, campaigns, _ = _world(3, 5, 40)
    rows = np.arange(40, dtype=np.int32)
    for cid in range(1, 6):
        campaigns.set_budget(cid, "OPEN", 0.5)
    got = apply_filters(rows, index, campaigns, FilterContext(NOW), np.random.default_rng(1))
    other = reference_filters(rows, index, campaigns, FilterContext(NOW), np.random.default_rng(2))
    assert got.rows.tolist() != other.rows.tolist()
