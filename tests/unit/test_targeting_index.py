"""The targeting index against brute-force evaluation of every expression (hypothesis)."""
from __future__ import annotations

import random
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidArgument
from core.targeting import Targeting, matches, request_terms
import serving.decision.index as index_module
from serving.decision.index import AdColumns, AdRecord, TargetingColumns, TargetingIndex
from serving.decision.partitions import Partitions

COUNTRIES = ["US", "CA", "GB", "DE"]
REGIONS = {"US": ["US/CA", "US/NY"], "CA": ["CA/ON"], "GB": ["GB/ENG"], "DE": ["DE/BY"]}
CITIES = {"US/CA": ["US/CA/San Francisco", "US/CA/Los Angeles"], "US/NY": ["US/NY/New York"],
          "CA/ON": ["CA/ON/Toronto"], "GB/ENG": ["GB/ENG/London"], "DE/BY": ["DE/BY/Munich"]}
ALL_LOCATIONS = COUNTRIES + [r for rs in REGIONS.values() for r in rs] + [c for cs in CITIES.values() for c in cs]
VOCAB = {
    "location": ALL_LOCATIONS,
    "age_band": ["18-24", "25-34", "35-44", "45-54"],
    "gender": ["female", "male"],
    "language": ["en", "fr", "de"],
    "device": ["ios", "android", "desktop"],
    "placement": ["feed", "article", "video"],
    "interest": [f"i{n}" for n in range(12)],
    "audience": [f"aud{n}" for n in range(6)],
}


def random_targeting(rng: random.Random) -> Targeting:
    include, exclude = {}, {}
    for attribute, values in VOCAB.items():
        if rng.random() < 0.45:
            include[attribute] = frozenset(rng.sample(values, rng.randint(1, min(3, len(values)))))
        if rng.random() < 0.15:
            exclude[attribute] = frozenset(rng.sample(values, 1))
    return Targeting(include, exclude)


def random_request(rng: random.Random) -> dict[str, frozenset[str]]:
    country = rng.choice(COUNTRIES)
    region = rng.choice(REGIONS[country])
    location = rng.choice([country, region, rng.choice(CITIES[region])])
    attributes = {a: rng.sample(v, rng.randint(0, 2)) for a, v in VOCAB.items() if a not in ("location",)}
    attributes["age_band"] = attributes["age_band"][:1]
    return request_terms(location=[location], **attributes)


def random_ads(rng: random.Random, n: int, first_id: int = 1, version: int = 1) -> list[AdRecord]:
    return [AdRecord(ad_id=first_id + i, campaign_id=rng.randint(1, 50), version=version,
                     bid_type=rng.choice(["CPM", "CPC", "CPA"]), bid_micros=rng.randint(1, 5_000_000),
                     quality_micros=rng.randint(-2000, 2000), static_score=rng.random(),
                     targeting=random_targeting(rng)) for i in range(n)]


def brute_force(ads: dict[int, AdRecord], terms) -> set[int]:
    return {ad_id for ad_id, ad in ads.items() if matches(ad.targeting, terms)}


def retrieved_ids(index: TargetingIndex, terms, k: int) -> set[int]:
    return {int(index.ad_id.data[row]) for row in index.retrieve(terms, k=k)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_index_returns_exactly_the_matching_ads(seed):
    rng = random.Random(seed)
    ads = {a.ad_id: a for a in random_ads(rng, 300)}
    index = TargetingIndex.build(ads.values())
    for _ in range(25):
        terms = random_request(rng)
        assert retrieved_ids(index, terms, k=10**9) == brute_force(ads, terms)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_index_stays_exact_after_random_in_place_updates(seed):
    # Small row ranges and early compaction, so range boundaries, segments that move when full and the
    # compaction of the space they leave are all exercised.
    with patch.object(index_module, "CHUNK_ROWS", 16), patch.object(Partitions, "COMPACT_AFTER", 8):
        _random_updates_stay_exact(seed)


def _random_updates_stay_exact(seed: int) -> None:
    rng = random.Random(seed)
    ads = {a.ad_id: a for a in random_ads(rng, 200)}
    index = TargetingIndex.build(ads.values())
    repeated = [random_request(rng) for _ in range(2)]
    next_id = 10_000
    for step in range(150):
        action = rng.random()
        if action < 0.4:  # change an ad (newer version)
            ad_id = rng.choice(list(ads))
            changed = random_ads(rng, 1, first_id=ad_id, version=ads[ad_id].version + 1)[0]
            assert index.upsert(changed)
            ads[ad_id] = changed
        elif action < 0.6:  # remove
            ad_id = rng.choice(list(ads))
            removed = AdRecord(**{**ads.pop(ad_id).__dict__, "version": 10**6 + step, "removed": True})
            assert index.upsert(removed)
        elif action < 0.8:  # add
            new = random_ads(rng, 1, first_id=next_id)[0]
            next_id += 1
            assert index.upsert(new)
            ads[new.ad_id] = new
        else:  # a stale record must change nothing
            ad_id = rng.choice(list(ads))
            stale = random_ads(rng, 1, first_id=ad_id, version=ads[ad_id].version - 1)[0]
            assert not index.upsert(stale)
        if step % 10 == 0:
            for terms in (*repeated, random_request(rng)):
                assert retrieved_ids(index, terms, k=10**9) == brute_force(ads, terms)
    for _ in range(10):
        terms = random_request(rng)
        assert retrieved_ids(index, terms, k=10**9) == brute_force(ads, terms)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 40))
def test_top_k_keeps_the_best_broad_ads_and_every_narrow_one(seed, k):
    rng = random.Random(seed)
    ads = {a.ad_id: a for a in random_ads(rng, 400)}
    index = TargetingIndex.build(ads.values())
    chunk_rows = rng.choice([7, 64, index_module.CHUNK_ROWS])
    with patch.object(index_module, "CHUNK_ROWS", chunk_rows):
        _top_k_holds(rng, ads, index, k)


def _top_k_holds(rng: random.Random, ads: dict[int, AdRecord], index: TargetingIndex, k: int) -> None:
    for _ in range(10):
        terms = random_request(rng)
        every = brute_force(ads, terms)
        narrow = {i for i in every if ads[i].targeting.narrow}
        broad_by_score = sorted(every - narrow, key=lambda i: (-ads[i].static_score, i))
        got = retrieved_ids(index, terms, k=k)
        assert got == narrow | set(broad_by_score[:k])


def test_a_narrow_ad_is_never_crowded_out_by_broad_ones():
    broad = [AdRecord(ad_id=i, campaign_id=1, version=1, bid_type="CPM", bid_micros=1, quality_micros=0,
                      static_score=1.0 + i, targeting=Targeting({"location": frozenset({"US"})}, {}))
             for i in range(1, 101)]
    narrow = AdRecord(ad_id=999, campaign_id=2, version=1, bid_type="CPC", bid_micros=1, quality_micros=0,
                      static_score=0.0, targeting=Targeting({"audience": frozenset({"runners"}),
                                                             "location": frozenset({"US"})}, {}))
    index = TargetingIndex.build([*broad, narrow])
    rows = index.retrieve(request_terms(location=["US/NY"], audience=["runners"]), k=10)
    ids = {int(index.ad_id.data[r]) for r in rows}
    assert 999 in ids and len(ids) == 11


def test_an_older_record_never_overwrites_a_newer_one():
    ad = random_ads(random.Random(1), 1, version=5)[0]
    index = TargetingIndex.build([ad])
    older = AdRecord(**{**ad.__dict__, "version": 4, "bid_micros": 1})
    assert not index.upsert(older)
    assert index.bid_micros.data[index.row_of(ad.ad_id)] == ad.bid_micros
    assert not index.upsert(AdRecord(**{**ad.__dict__}))  # the same version again: a harmless duplicate


def test_a_removal_followed_by_an_older_add_stays_removed():
    ad = random_ads(random.Random(2), 1, version=5)[0]
    index = TargetingIndex()
    assert index.upsert(AdRecord(**{**ad.__dict__, "version": 7, "removed": True}))
    assert not index.upsert(ad)
    assert index.row_of(ad.ad_id) is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_bulk_build_from_columns_is_the_same_index(seed):
    rng = random.Random(seed)
    ads = sorted(random_ads(rng, 250), key=lambda a: (-a.static_score, a.ad_id))
    bulk = _bulk(ads)
    by_id = {a.ad_id: a for a in ads}
    for _ in range(20):
        terms = random_request(rng)
        assert retrieved_ids(bulk, terms, k=10**9) == brute_force(by_id, terms)
        assert retrieved_ids(bulk, terms, k=7) == retrieved_ids(TargetingIndex.build(ads), terms, k=7)
    changed = random_ads(rng, 1, first_id=ads[0].ad_id, version=2)[0]
    assert bulk.upsert(changed)
    by_id[changed.ad_id] = changed
    terms = random_request(rng)
    assert retrieved_ids(bulk, terms, k=10**9) == brute_force(by_id, terms)


def test_values_outside_the_closed_vocabularies_and_other_attributes_are_checked_exactly():
    # compile_targeting never produces them, but the index must not depend on that: a gender outside the
    # sig bits and an attribute the partitions do not know go through the exact check of the ad's terms.
    odd = AdRecord(ad_id=1, campaign_id=1, version=1, bid_type="CPM", bid_micros=1, quality_micros=0,
                   static_score=1.0, targeting=Targeting({"gender": frozenset({"nonbinary"}),
                                                          "publisher_segment": frozenset({"s1"})}, {}))
    plain = AdRecord(ad_id=2, campaign_id=1, version=1, bid_type="CPM", bid_micros=1, quality_micros=0,
                     static_score=0.5, targeting=Targeting({"gender": frozenset({"female"})}, {}))
    # One value inside the vocabulary and one outside: the sig cannot decide gender, so the check reads both.
    mixed = AdRecord(ad_id=3, campaign_id=1, version=1, bid_type="CPM", bid_micros=1, quality_micros=0,
                     static_score=0.25, targeting=Targeting({"gender": frozenset({"male", "nonbinary"}),
                                                             "age_band": frozenset({"25-34"})},
                                                            {"interest": frozenset({"golf"})}))
    ads = [odd, plain, mixed]
    for index in (TargetingIndex.build(ads), _upserted(ads), _bulk(ads)):
        assert retrieved_ids(index, request_terms(gender="nonbinary", publisher_segment="s1"), k=10) == {1}
        assert retrieved_ids(index, request_terms(gender="nonbinary"), k=10) == set()
        assert retrieved_ids(index, request_terms(gender="female", publisher_segment="s1"), k=10) == {2}
        assert retrieved_ids(index, request_terms(gender="nonbinary", age_band="25-34"), k=10) == {3}
        assert retrieved_ids(index, request_terms(gender="male", age_band="25-34"), k=10) == {3}
        assert retrieved_ids(index, request_terms(gender="male", age_band="35-44"), k=10) == set()
        assert retrieved_ids(index, request_terms(gender="male", age_band="25-34", interest=["golf"]), k=10) == set()


def _bulk(ads: list[AdRecord], **columns) -> TargetingIndex:
    """TargetingIndex.from_columns of these ads (rows in the order given)."""
    keys, ids, counts, flat = [], {}, [], []
    for a in ads:
        terms = [(attr, v, False) for attr, vs in a.targeting.include.items() for v in vs]
        terms += [(attr, v, True) for attr, vs in a.targeting.exclude.items() for v in vs]
        for key in terms:
            if key not in ids:
                ids[key] = len(keys)
                keys.append(key)
        counts.append(len(terms))
        flat.extend(ids[k] for k in terms)
    n = len(ads)
    return TargetingIndex.from_columns(AdColumns(
        ad_id=np.array([a.ad_id for a in ads]), campaign_id=np.array([a.campaign_id for a in ads]),
        version=np.ones(n), bid_type=np.zeros(n), bid_micros=np.ones(n), quality_micros=np.zeros(n),
        static_score=np.array([a.static_score for a in ads]), ctr_prior=np.array([a.ctr_prior for a in ads]),
        embedding=np.zeros((n, 8)), **columns),
        TargetingColumns(term_keys=keys, term_counts=np.array(counts), terms_flat=np.array(flat)))


def _upserted(ads: list[AdRecord]) -> TargetingIndex:
    index = TargetingIndex()
    for ad in ads:
        index.upsert(ad)
    return index


def test_retrievals_on_several_threads_at_once_stay_exact():
    # The compiled scan releases the GIL, and a retrieval marks the request's terms as hit in the index's
    # per-term words while it scans: without the index's scan lock a second thread's request would see the
    # first's hits and get ads it does not match.
    import threading

    rng = random.Random(11)
    ads = random_ads(rng, 3_000)
    index = _bulk(sorted(ads, key=lambda a: -a.static_score))
    requests = [random_request(rng) for _ in range(60)]
    expected = [retrieved_ids(index, terms, k=10**9) for terms in requests]
    wrong: list[int] = []

    def work(offset: int) -> None:
        for round_ in range(40):
            i = (offset + round_) % len(requests)
            if retrieved_ids(index, requests[i], k=10**9) != expected[i]:
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in (0, 30, 15)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_updates_on_one_thread_while_another_retrieves_leave_the_index_exact():
    # An upsert that adds a term can grow the index's per-term words. A retrieval scanning at that moment (the
    # compiled scan releases the GIL) has set its request's hits in the old array and clears them there, so
    # the grown array keeps them, and the next requests match ads they do not. Updates wait for the lock.
    import threading

    rng = random.Random(12)
    ads = {a.ad_id: a for a in random_ads(rng, 3_000)}
    index = _bulk(sorted(ads.values(), key=lambda a: -a.static_score))
    requests = [random_request(rng) for _ in range(40)]
    expected = [brute_force(ads, terms) for terms in requests]  # the new ads below match none of them
    done = threading.Event()
    wrong: list[int] = []

    def retrieve_until_done() -> None:
        while not done.is_set():
            for i, terms in enumerate(requests):
                if retrieved_ids(index, terms, k=10**9) != expected[i]:
                    wrong.append(i)

    def update() -> None:
        try:
            for i in range(3_000):  # each ad brings a term the index has not seen: the per-term words grow
                ad = AdRecord(ad_id=10_000 + i, campaign_id=1, version=1, bid_type="CPC", bid_micros=1_000,
                              quality_micros=0, static_score=0.5,
                              targeting=Targeting({"interest": frozenset({f"new{i}"})}, {}))
                ads[ad.ad_id] = ad
                index.upsert(ad)
        finally:
            done.set()

    threads = [threading.Thread(target=retrieve_until_done), threading.Thread(target=update)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    for terms in requests:
        assert retrieved_ids(index, terms, k=10**9) == brute_force(ads, terms)


# ------------------------------------------------------------------------- learned estimates (apply_learned)
def learned_ads():
    return [AdRecord(ad_id=i, campaign_id=i, version=1, bid_type="CPC", bid_micros=1_000_000, quality_micros=100 * i,
                     static_score=1.0 / i, targeting=Targeting({"placement": frozenset({"feed"})}, {}),
                     ctr_prior=0.01 * i) for i in (1, 2, 3)]


def columns_of(index, ad_id):
    row = index.row_of(ad_id)
    return (float(index.ctr_prior.data[row]), float(index.ctr_alpha.data[row]), float(index.ctr_beta.data[row]),
            int(index.quality_micros.data[row]))


def test_a_new_ad_holds_ten_pseudo_impressions_at_its_ctr_prior_however_the_index_was_built():
    for index in (TargetingIndex.build(learned_ads()), _upserted(learned_ads()), _bulk(learned_ads())):
        prior = float(index.ctr_prior.data[index.row_of(2)])
        assert columns_of(index, 2)[1:3] == pytest.approx((10 * prior, 10 * (1 - prior)))
    given = _bulk(learned_ads(), ctr_alpha=np.array([1.0, 2.0, 3.0]), ctr_beta=np.array([10.0, 20.0, 30.0]))
    assert columns_of(given, 3)[1:3] == (3.0, 30.0)


def test_a_snapshot_sets_the_held_ads_estimates_ignores_others_and_counts_the_rows_it_changed():
    index = TargetingIndex.build(learned_ads())
    ids = np.array([3, 99, 1])  # 99: an ad this index does not hold
    args = (ids, np.array([0.05, 0.5, 0.004]), np.array([150.0, 1.0, 8.0]), np.array([2_850.0, 1.0, 1_992.0]),
            np.array([-250.4, 7.0, 1_000.6]))
    assert index.apply_learned(*args) == 2
    assert columns_of(index, 3) == pytest.approx((0.05, 150.0, 2_850.0, -250))
    assert columns_of(index, 1) == pytest.approx((0.004, 8.0, 1_992.0, 1_001))
    assert columns_of(index, 2) == pytest.approx((0.02, 0.2, 9.8, 200))  # not in the snapshot: untouched
    assert index.apply_learned(*args) == 0  # the same snapshot again changes nothing
    assert index.apply_learned(np.array([1]), [0.004], [8.0], [1_993.0], [1_001]) == 1


def test_an_edit_of_an_ad_keeps_the_snapshots_estimates_and_a_new_ad_starts_from_its_record():
    index = _upserted(learned_ads())
    index.apply_learned(np.array([1]), [0.004], [8.0], [1_992.0], [-30])
    assert index.upsert(AdRecord(**{**learned_ads()[0].__dict__, "version": 2, "bid_micros": 2_000_000}))
    assert columns_of(index, 1) == pytest.approx((0.004, 8.0, 1_992.0, -30))
    assert int(index.bid_micros.data[index.row_of(1)]) == 2_000_000
    # an ad the snapshot never covered takes its record's values on an edit
    assert index.upsert(AdRecord(**{**learned_ads()[1].__dict__, "version": 2, "quality_micros": 7,
                                    "ctr_prior": 0.03}))
    assert columns_of(index, 2) == pytest.approx((0.03, 0.3, 9.7, 7))
    assert index.upsert(AdRecord(ad_id=50, campaign_id=9, version=1, bid_type="CPM", bid_micros=5, quality_micros=0,
                                 static_score=0.1, targeting=Targeting({}, {}), ctr_prior=0.05))
    assert columns_of(index, 50) == pytest.approx((0.05, 0.5, 9.5, 0))


def test_a_snapshot_reaches_ads_by_id_when_the_ids_are_sparse():
    ads = [AdRecord(**{**a.__dict__, "ad_id": a.ad_id * 10**12}) for a in learned_ads()]
    index = _bulk(ads)
    assert index.apply_learned(np.array([2 * 10**12, 5]), [0.07, 0.1], [70.0, 1.0], [930.0, 9.0], [0, 0]) == 1
    assert columns_of(index, 2 * 10**12)[:3] == (np.float32(0.07), 70.0, 930.0)


def test_a_snapshot_with_a_missing_or_impossible_value_is_refused_naming_the_column():
    index = TargetingIndex.build(learned_ads())
    ids = np.array([1, 2])
    good = {"ctr_prior": [0.01, 0.02], "ctr_alpha": [1.0, 2.0], "ctr_beta": [99.0, 98.0], "quality_micros": [0, 0]}
    for column, bad in (("ctr_prior", [0.01, 1.5]), ("ctr_alpha", [0.0, 2.0]), ("ctr_beta", [99.0, -1.0]),
                        ("quality_micros", [0, float("nan")]), ("ctr_alpha", [1.0])):
        with pytest.raises(InvalidArgument, match=column):
            index.apply_learned(ids, **{**good, column: bad})
    assert columns_of(index, 1)[1] == pytest.approx(0.1)  # a refused snapshot changes nothing
    with pytest.raises(InvalidArgument, match="ctr_beta"):
        _bulk(learned_ads(), ctr_alpha=np.ones(3))
