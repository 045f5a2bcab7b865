"""The features publisher's rules (core.feature_events) on plain state: staging windows per tick, the merge of
a tick's windows into the known ads, publishing only what changed, forgetting the ads that are gone, and the
attributes' version test."""
from __future__ import annotations

from core.ad_stats import AdAttributes, KnownAd
from core.feature_events import (CampaignSeen, PublishRules, Published, PublisherState, Tick, TickWindow, TimerAt,
                                 WindowIn, apply, gone, merge, newer_attributes)
from core.feature_windows import Counts, WindowRules

T0 = 1_800_000_000_000
TICK = 300_000
RULES = PublishRules(windows=WindowRules(bucket_ms=TICK, window_ms=3_600_000))
FEED = ("feed", 1)


def _attributes(campaign_id: int = 1, advertiser_id: int = 100, version: int = 1, removed: bool = False):
    return AdAttributes(campaign_id, advertiser_id, version, "CPC", 1_000_000, 0, removed, (0.0,) * 16)


def _window(ad_id: int, tick_ms: int, attributes: AdAttributes | None = None, impressions: int = 0,
            campaign_id: int = 1) -> TickWindow:
    cells = {FEED: Counts(impressions=impressions)} if impressions else {}
    return TickWindow(ad_id, tick_ms, campaign_id, attributes, cells)


def _published(outputs) -> Published:
    (published,) = [o for o in outputs if isinstance(o, Published)]
    return published


def test_a_window_is_staged_for_its_own_tick_and_sets_its_timer():
    publisher, outputs = apply(PublisherState(), WindowIn(_window(11, T0 + TICK), T0), RULES)
    assert outputs == [TimerAt(T0 + TICK)]
    assert list(publisher.staged) == [(T0 + TICK, 11)]


def test_a_window_whose_tick_has_fired_is_staged_for_the_next_tick():
    publisher, outputs = apply(PublisherState(), WindowIn(_window(11, T0 + TICK), T0 + TICK + 5), RULES)
    assert outputs == [TimerAt(T0 + 2 * TICK)]
    assert publisher.staged[(T0 + 2 * TICK, 11)].tick_ms == T0 + 2 * TICK


def test_a_window_without_attributes_keeps_those_staged_before_it_for_the_same_tick():
    publisher = PublisherState()
    apply(publisher, WindowIn(_window(11, T0 + TICK, _attributes()), T0 + TICK + 5), RULES)
    apply(publisher, WindowIn(_window(11, T0 + 2 * TICK, impressions=3), T0 + TICK + 5), RULES)
    staged = publisher.staged[(T0 + 2 * TICK, 11)]
    assert staged.attributes == _attributes() and staged.cells == {FEED: Counts(impressions=3)}


def test_a_campaign_names_its_advertiser():
    publisher, outputs = apply(PublisherState(), CampaignSeen(1, 100), RULES)
    assert publisher.advertisers == {1: 100} and outputs == []


def test_a_merged_window_takes_its_cells_and_keeps_the_held_campaign_and_attributes():
    held = KnownAd(7, _attributes(campaign_id=7), {FEED: Counts(impressions=5)})
    assert merge(held, TickWindow(11, T0, 0, None, {})) == KnownAd(7, _attributes(campaign_id=7), {})
    newer = _attributes(campaign_id=8, version=2)
    assert merge(held, TickWindow(11, T0, 8, newer, {FEED: Counts(clicks=1)})) == KnownAd(
        8, newer, {FEED: Counts(clicks=1)})
    assert merge(None, TickWindow(11, T0, 0, None, {})) == KnownAd(0, None, {})


def test_a_tick_applies_its_windows_in_tick_order_and_leaves_later_ones_staged():
    publisher = PublisherState()
    apply(publisher, WindowIn(_window(11, T0 + 2 * TICK, impressions=99), T0), RULES)
    apply(publisher, WindowIn(_window(11, T0 + TICK, _attributes(), impressions=10), T0), RULES)
    records = _published(apply(publisher, Tick(T0 + TICK), RULES)[1]).records
    assert [r["impressions"] for r in records] == [10]
    assert list(publisher.staged) == [(T0 + 2 * TICK, 11)]
    records = _published(apply(publisher, Tick(T0 + 2 * TICK), RULES)[1]).records
    assert [r["impressions"] for r in records] == [99] and not publisher.staged


def test_a_tick_publishes_every_listed_ad_but_only_the_rows_that_changed():
    publisher = PublisherState()
    apply(publisher, WindowIn(_window(11, T0 + TICK, _attributes()), T0), RULES)
    first = _published(apply(publisher, Tick(T0 + TICK), RULES)[1])
    assert first.version_ms == T0 + TICK and [ad_id for ad_id, _ in first.changed] == [11]
    apply(publisher, WindowIn(_window(12, T0 + 2 * TICK, _attributes(campaign_id=2, advertiser_id=200),
                                      campaign_id=2), T0 + TICK), RULES)
    second = _published(apply(publisher, Tick(T0 + 2 * TICK), RULES)[1])
    assert len(second.records) == 2 and [ad_id for ad_id, _ in second.changed] == [12]
    assert publisher.version_ms == T0 + 2 * TICK


def test_a_tick_not_after_the_last_snapshot_or_without_a_listed_ad_publishes_nothing():
    publisher = PublisherState(version_ms=T0 + TICK)
    apply(publisher, WindowIn(_window(11, T0 + TICK, _attributes()), T0), RULES)
    assert apply(publisher, Tick(T0 + TICK), RULES)[1] == []
    assert 11 in publisher.known  # applied all the same
    removed = PublisherState()
    apply(removed, WindowIn(_window(12, T0 + TICK, _attributes(removed=True), impressions=4), T0), RULES)
    assert apply(removed, Tick(T0 + TICK), RULES)[1] == [] and removed.version_ms is None


def test_ads_not_listed_and_without_traffic_are_forgotten_after_a_snapshot():
    publisher = PublisherState(fingerprints={13: 1})
    apply(publisher, WindowIn(_window(11, T0 + TICK, _attributes()), T0), RULES)
    apply(publisher, WindowIn(_window(12, T0 + TICK, _attributes(removed=True), impressions=4), T0), RULES)
    apply(publisher, WindowIn(_window(13, T0 + TICK, _attributes(removed=True)), T0), RULES)
    apply(publisher, Tick(T0 + TICK), RULES)
    assert sorted(publisher.known) == [11, 12] and 13 not in publisher.fingerprints


def test_gone_ads_are_the_unlisted_ones_with_an_empty_window():
    known = {11: KnownAd(1, _attributes()), 12: KnownAd(1, None), 13: KnownAd(1, None, {FEED: Counts(clicks=1)}),
             14: KnownAd(1, _attributes(removed=True))}
    assert gone(known) == [12, 14]


def test_only_a_newer_version_of_an_ads_attributes_replaces_the_held_one():
    assert newer_attributes(None, _attributes(version=1))
    assert newer_attributes(_attributes(version=1), _attributes(version=2))
    assert not newer_attributes(_attributes(version=2), _attributes(version=2))
    assert not newer_attributes(_attributes(version=2), _attributes(version=1, removed=True))
