"""The competitive-exclusion category from the campaign store to the page: an ads row compiles to a ServingAd
carrying its campaign's category, older serving records read as category 0, the ad server's state indexes it
(one record at a time and in a snapshot's bulk build), and the auction on that state never puts two ads of
one nonzero category on a page."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from core.campaigns import ad_serving_record, validate_ad
from core.targeting import request_terms
from schemas import HISTORY_DIR
from schemas import topics
from schemas.cdc import serving_record_from_change
from schemas.codec import AvroCodec, SchemaRegistry
from serving.adserver.state import ServingState
from serving.decision.engine import DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FilterContext

NOW_MS = 1_800_000_000_000
SERVING_AD = topics.record_type(topics.SERVING_ADS)
AD = {"creative_ref": "cdn://a.png", "landing_url": "https://shop.example/", "bid_micros": 2_000_000,
      "targeting": {"placement": ["feed"]}}


def ads_row(**over) -> dict:
    """An approved ads row as Debezium hands it (targeting as JSON text)."""
    return {"ad_id": 7, "campaign_id": 3, "advertiser_id": 1, "bid_type": "CPM", "version": 4, "quality_prior": 0.0,
            **validate_ad(AD, creating=True), "targeting": json.dumps(AD["targeting"]),
            "review_status": "APPROVED", **over}


def change(row: dict) -> bytes:
    return json.dumps({"before": None, "after": row, "op": "u", "source": {"ts_ms": NOW_MS}}).encode()


# ------------------------------------------------------------------------------------------------ compiling

def test_an_ad_compiles_with_the_exclusion_category_its_row_carries_from_the_campaign():
    _, _, record_type, record = serving_record_from_change(topics.CDC_ADS, change(ads_row(exclusion_category=42)))
    assert record_type == SERVING_AD and record["exclusion_category"] == 42
    codec = AvroCodec()
    assert codec.decode(codec.encode(SERVING_AD, record))["exclusion_category"] == 42


def test_a_change_from_before_the_store_had_the_column_compiles_as_no_category():
    row = ads_row()
    row.pop("exclusion_category", None)
    assert ad_serving_record(row, commit_ms=NOW_MS)["exclusion_category"] == 0


# ------------------------------------------------------------------------------------------------ the contract

def _registry_with_v1() -> tuple[SchemaRegistry, dict]:
    registry = SchemaRegistry.from_directory()
    v1 = registry.by_fingerprint[registry.register(json.loads((HISTORY_DIR / "serving_ad.v1.avsc").read_text()))]
    return registry, v1


def test_a_serving_ad_written_with_version_1_reads_with_the_current_schema_as_no_category():
    registry, v1 = _registry_with_v1()
    codec = AvroCodec(registry)
    old = {k: v for k, v in ad_serving_record(ads_row(), NOW_MS).items() if k != "exclusion_category"}
    written_by_v1 = codec.encode(v1, old)
    assert codec.decode(written_by_v1, SERVING_AD) == {**old, "exclusion_category": 0}
    # the ad server decodes with the writer's schema: the field is absent, and the state reads it as 0
    as_followed = codec.decode(written_by_v1)
    assert "exclusion_category" not in as_followed
    state = ServingState("s")
    state.apply(topics.SERVING_ADS, as_followed, NOW_MS)
    assert int(state.index.exclusion_category.data[state.index.row_of(7)]) == 0


def test_a_current_serving_ad_reads_with_version_1_without_the_category():
    registry, v1 = _registry_with_v1()
    codec = AvroCodec(registry)
    record = ad_serving_record(ads_row(exclusion_category=9), NOW_MS)
    assert codec.decode(codec.encode(SERVING_AD, record), v1) == \
        {k: v for k, v in record.items() if k != "exclusion_category"}


# ------------------------------------------------------------------------------------------------ the ad server

def campaign(campaign_id: int) -> dict:
    return {"campaign_id": campaign_id, "advertiser_id": 100 + campaign_id, "version": 1, "event_time": NOW_MS,
            "status": "ACTIVE", "bid_type": "CPM", "daily_budget_micros": 10**12, "currency": "USD",
            "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
            "cap_per_week": None, "cpa_target_micros": None}


def serving_ad(ad_id: int, campaign_id: int, bid_micros: int, category: int, version: int = 1) -> dict:
    row = ads_row(ad_id=ad_id, campaign_id=campaign_id, advertiser_id=100 + campaign_id, bid_micros=bid_micros,
                  version=version, exclusion_category=category)
    return ad_serving_record(row, NOW_MS)


# two car brands (category 7) and a bookshop (no category), all on the feed; the cars bid most
CARS_AND_BOOKS = [serving_ad(11, 1, 3_000_000, 7), serving_ad(12, 2, 2_900_000, 7), serving_ad(13, 3, 1_000_000, 0)]


def state_of(ads: list[dict], *, bulk: bool = False) -> ServingState:
    records = [(topics.SERVING_CAMPAIGNS, campaign(c)) for c in (1, 2, 3)] + [(topics.SERVING_ADS, a) for a in ads]
    state = ServingState("s")
    if bulk:
        state.load_snapshot(iter(records), NOW_MS)
    else:
        for topic, record in records:
            state.apply(topic, record, NOW_MS)
    return state


def categories(state: ServingState) -> dict[int, int]:
    index = state.index
    return {int(index.ad_id.data[r]): int(index.exclusion_category.data[r]) for r in range(index.size)}


@pytest.mark.parametrize("bulk", [False, True], ids=["record by record", "snapshot bulk build"])
def test_the_ad_server_indexes_each_ads_category(bulk):
    assert categories(state_of(CARS_AND_BOOKS, bulk=bulk)) == {11: 7, 12: 7, 13: 0}


def test_a_new_version_of_an_ad_with_another_category_replaces_it_in_the_index():
    state = state_of(CARS_AND_BOOKS)
    state.apply(topics.SERVING_ADS, serving_ad(12, 2, 2_900_000, 8, version=2), NOW_MS)
    assert categories(state)[12] == 8


def page(state: ServingState) -> list[int]:
    """The ads a two-slot feed request gets from this state, in slot order."""
    engine = DecisionEngine(state.index, state.campaigns, config=EngineConfig(exploration_share=0),
                            reserves=state.reserves)
    request = RequestContext("r-1", "feed", [1, 2], request_terms(placement=["feed"]), FilterContext(NOW_MS))
    decision = engine.decide(request, clock=lambda: 0.0, deadline=0.1, rng=random.Random(1),
                             np_rng=np.random.default_rng(1))
    return [w.ad_id for w in decision.winners]


@pytest.mark.parametrize("bulk", [False, True], ids=["record by record", "snapshot bulk build"])
def test_two_ads_of_one_category_never_share_a_page_the_ad_server_decides(bulk):
    # the second car outbids the bookshop, yet the page's second slot is the bookshop's
    assert page(state_of(CARS_AND_BOOKS, bulk=bulk)) == [11, 13]


def test_once_the_categories_differ_both_rivals_may_share_the_page():
    state = state_of(CARS_AND_BOOKS)
    state.apply(topics.SERVING_ADS, serving_ad(12, 2, 2_900_000, 8, version=2), NOW_MS)
    assert page(state) == [11, 12]
