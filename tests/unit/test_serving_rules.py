"""Pure rules of the ad server and tracker: tokens, frequency notes and record trimming, leases, spend,
request validation and consent."""
from __future__ import annotations

import pytest

from core.frequency import DAY_MS, JustServed, field_name, fields_to_drop
from core.leases import LeaseBook
from core.spend import SpendAccumulator, SpendDedupe
from core.tokens import CLICK_ID_LIFETIME_MS, ClickIdClaims, InvalidToken, TokenClaims, TokenKeys
from schemas import topics
from serving.adserver.request import BadRequest, GeoResolver, parse_ad_request, targeting_terms

NOW = 1_800_000_000_000
KEYS = TokenKeys({"k2": b"second-key-0123456789", "k1": b"first-key-0123456789"}, active="k2")
SPEND_REPORT = topics.record_type(topics.BUDGET_SPEND)


def claims(**over) -> TokenClaims:
    base = dict(impression_id="r1:1", ad_id=7, campaign_id=3, price_micros=1_400_000, billing="CLICK",
                landing_url="https://shop.example/a", expires_ms=NOW + 3_600_000)
    return TokenClaims(**{**base, **over})


def test_a_token_verifies_and_carries_its_claims():
    got = KEYS.verify(KEYS.sign(claims()), NOW)
    assert (got.ad_id, got.price_micros, got.landing_url, got.key_id) == (7, 1_400_000, "https://shop.example/a", "k2")


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t[:-2] + ("A" if t[-2] != "A" else "B") + t[-1], "bad_signature"),
    (lambda t: t.split(".")[0][:-3] + "xyz." + t.split(".")[1], None),
    (lambda t: "garbage", "malformed"),
])
def test_a_tampered_or_forged_token_is_rejected(mutate, reason):
    with pytest.raises(InvalidToken) as e:
        KEYS.verify(mutate(KEYS.sign(claims())), NOW)
    assert reason is None or e.value.reason == reason


def test_a_token_with_a_changed_price_is_rejected():
    import base64
    import json
    payload, signature = KEYS.sign(claims()).split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["price_micros"] = 1
    forged = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).rstrip(b"=").decode()
    with pytest.raises(InvalidToken) as e:
        KEYS.verify(f"{forged}.{signature}", NOW)
    assert e.value.reason == "bad_signature"


def test_an_expired_token_is_rejected():
    token = KEYS.sign(claims(expires_ms=NOW - 1))
    with pytest.raises(InvalidToken) as e:
        KEYS.verify(token, NOW)
    assert e.value.reason == "expired"


def click_id_claims(**over) -> ClickIdClaims:
    base = dict(impression_id="r1:1", ad_id=7, campaign_id=3, served_ms=NOW - 5_000, click_ms=NOW,
                expires_ms=NOW + CLICK_ID_LIFETIME_MS)
    return ClickIdClaims(**{**base, **over})


def test_a_click_id_verifies_for_a_week_and_is_not_a_beacon_token_nor_the_reverse():
    click_id = KEYS.sign_click_id(click_id_claims())
    got = KEYS.verify_click_id(click_id, NOW + CLICK_ID_LIFETIME_MS)
    assert (got.impression_id, got.campaign_id, got.click_ms, got.key_id) == ("r1:1", 3, NOW, "k2")
    with pytest.raises(InvalidToken) as e:
        KEYS.verify_click_id(click_id, NOW + CLICK_ID_LIFETIME_MS + 1)
    assert e.value.reason == "expired"
    for wrong in (lambda: KEYS.verify(click_id, NOW), lambda: KEYS.verify_click_id(KEYS.sign(claims()), NOW),
                  lambda: KEYS.verify_click_id(KEYS.sign_click_id(click_id_claims(kind="beacon")), NOW)):
        with pytest.raises(InvalidToken) as e:
            wrong()
        assert e.value.reason == "malformed"
    tampered = click_id[:-2] + ("A" if click_id[-2] != "A" else "B") + click_id[-1]
    with pytest.raises(InvalidToken) as e:
        KEYS.verify_click_id(tampered, NOW)
    assert e.value.reason == "bad_signature"


def test_the_click_id_is_added_to_the_landing_urls_own_query():
    from serving.tracker import with_click_id

    assert with_click_id("https://shop.example/a", "CID") == "https://shop.example/a?adclid=CID"
    assert with_click_id("https://shop.example/a?utm=x&adclid=old#top", "CID") == \
        "https://shop.example/a?utm=x&adclid=CID#top"


def test_a_redirect_without_its_click_id_is_the_signed_landing_url():
    from serving.tracker import with_click_id, without_click_id

    for landing in ("https://shop.example/a", "https://shop.example/a?utm=x#top"):
        assert without_click_id(with_click_id(landing, "CID")) == landing


def test_keys_rotate_old_tokens_verify_until_the_old_key_is_retired():
    old = TokenKeys({"k1": b"first-key-0123456789"}, active="k1").sign(claims())
    assert KEYS.verify(old, NOW).key_id == "k1"
    retired = TokenKeys({"k2": b"second-key-0123456789"}, active="k2")
    with pytest.raises(InvalidToken) as e:
        retired.verify(old, NOW)
    assert e.value.reason == "unknown_key"


def test_token_keys_from_spec_first_is_active():
    keys = TokenKeys.from_spec("new:aaaaaaaaaaaaaaaaaaaa,old:bbbbbbbbbbbbbbbbbbbb")
    assert keys.active == "new" and set(keys.keys) == {"new", "old"}
    with pytest.raises(ValueError):
        TokenKeys.from_spec("nocolon")


def test_fields_older_than_a_week_and_beyond_the_limit_are_dropped_oldest_first():
    today = 20_000
    names = [field_name(1, today - d) for d in range(10)] + ["junk"]
    drop = fields_to_drop(names, today, max_fields=4, keep=frozenset({field_name(1, today - 6)}))
    assert set(drop) >= {"junk", field_name(1, today - 7), field_name(1, today - 8), field_name(1, today - 9)}
    kept = set(names) - set(drop)
    assert len(kept) == 4 and field_name(1, today - 6) in kept and field_name(1, today) in kept


def test_just_served_notes_count_until_their_increment_landed_before_the_read():
    notes = JustServed(window_ms=5_000)
    day = NOW // DAY_MS
    pending = notes.note("u", [3], day, NOW)
    assert notes.merged("u", None, NOW, NOW + 1) == {(3, day): 1}  # not yet in Redis
    JustServed.landed(pending, NOW + 10)
    assert notes.merged("u", {(3, day): 1}, NOW + 5, NOW + 20) == {(3, day): 2}  # read began before it landed
    assert notes.merged("u", {(3, day): 1}, NOW + 11, NOW + 20) == {(3, day): 1}  # Redis holds it: once
    assert notes.merged("u", {(3, day): 1}, NOW, NOW + 6_000) == {(3, day): 1}  # the note expired
    assert len(notes) == 0


def test_a_lease_is_held_until_spent_or_expired_and_only_for_this_server():
    book = LeaseBook("s1")
    assert not book.grant({"lease_id": "x", "server_id": "s2", "campaign_id": 1, "event_time": NOW,
                           "amount_micros": 100, "expires_at": NOW + 60_000})
    assert book.grant({"lease_id": "a", "server_id": "s1", "campaign_id": 1, "event_time": NOW,
                       "amount_micros": 100, "expires_at": NOW + 60_000})
    assert not book.grant({"lease_id": "a", "server_id": "s1", "campaign_id": 1, "event_time": NOW,
                           "amount_micros": 100, "expires_at": NOW + 60_000})  # once per lease id
    assert book.held(1, NOW + 29_999) and not book.held(1, NOW + 30_000)  # 30 s at most
    assert book.charge(1, 60, NOW) == 0 and book.remaining(1, NOW) == 40
    assert book.charge(1, 60, NOW) == 20 and not book.held(1, NOW)
    assert book.expire(NOW) == [1]


def test_spend_reports_share_a_sequence_and_a_resend_counts_once():
    acc = SpendAccumulator("s1")
    acc.add(1, 500, NOW)
    acc.add(1, 250, NOW)
    acc.add(2, 10, NOW)
    reports = acc.cut(NOW + 1000).items()
    assert [(r["campaign_id"], r["sequence"], r["expected_spend_micros"], r["served_ads"]) for r in reports] == \
        [(1, 1, 750, 2), (2, 1, 10, 1)]
    assert acc.cut(NOW + 2000) is None
    dedupe = SpendDedupe()
    counted = [r for r in reports + reports + reports[:1] if dedupe.first_time(r)]
    assert sum(r["expected_spend_micros"] for r in counted) == 760


@pytest.mark.parametrize("body, field", [
    ([], "body"), ({"slots": [{"position": 1}]}, "placement"), ({"placement": "feed"}, "slots"),
    ({"placement": "feed", "slots": [{"position": 0}]}, "slots[0].position"),
    ({"placement": "feed", "slots": [{"position": 1}, {"position": 1}]}, "slots[1].position"),
    ({"placement": "feed", "slots": [{"position": i} for i in range(1, 5)]}, "slots"),
    ({"placement": "feed", "slots": [{"position": 1}], "ip": "999.1.1.1"}, "ip"),
    ({"placement": "feed", "slots": [{"position": 1}], "consent": "yes"}, "consent"),
    ({"placement": "feed", "slots": [{"position": 1}], "language": [1]}, "language"),
])
def test_a_malformed_request_names_its_field(body, field):
    with pytest.raises(BadRequest) as e:
        parse_ad_request(body)
    assert e.value.field == field


def test_only_consented_profile_signals_become_targeting_terms():
    body = {"placement": "feed", "slots": [{"position": 1}], "device": "ios", "user_id": "u"}
    profile = {"interests": ["hiking"], "age_band": ["25-34"], "locations": ["US/CA"]}
    without = targeting_terms(parse_ad_request(body), None, profile)
    assert "interest" not in without and "age_band" not in without and "location" not in without
    with_consent = targeting_terms(parse_ad_request({**body, "consent": {"personalization": True}}), None, profile)
    assert with_consent["interest"] == {"hiking"} and with_consent["location"] == {"US", "US/CA"}


def test_the_location_comes_from_the_ip_by_the_longest_prefix():
    geo = GeoResolver([("203.0.113.0/24", "US/CA"), ("203.0.113.128/25", "US/CA/San Francisco")])
    assert geo.locate("203.0.113.200") == "US/CA/San Francisco"
    assert geo.locate("203.0.113.5") == "US/CA"
    assert geo.locate("198.51.100.1") is None


def test_a_cut_travels_as_one_record_per_partition_and_reads_back_as_its_reports():
    import numpy as np

    from core.spend import Partitioner, batch_records, partition_of, spend_items
    from schemas.codec import AvroCodec

    acc = SpendAccumulator("s1")
    rng = np.random.default_rng(3)
    batches = [np.unique(rng.integers(1, 5_000, 300)) for _ in range(50)]
    for batch in batches:
        acc.eligible_many(batch, NOW)
    acc.add(17, 900, NOW, price_micros=2_000)
    acc.want_slice(23, 1_500, NOW)
    cut = acc.cut(NOW + 1000, {17: "lease-17", 99_999: "not here"})
    partitioner = Partitioner(4)
    records = batch_records(cut, 4, partitioner)
    assert [p for p, _ in records] == [0, 1, 2, 3]  # every partition, an empty record its heartbeat
    codec = AvroCodec()
    read = {p: list(spend_items(codec.decode(codec.encode(SPEND_REPORT, r), SPEND_REPORT))) for p, r in records}
    assert all(partition_of(item["campaign_id"], 4) == p for p, items in read.items() for item in items)
    items = sorted((i for items in read.values() for i in items), key=lambda i: i["campaign_id"])
    assert items == cut.items()
    by_id = {i["campaign_id"]: i for i in items}
    assert by_id[17]["lease_id"] == "lease-17" and by_id[17]["expected_spend_micros"] == 900
    assert by_id[23]["wants_slice"] and 99_999 not in by_id
    assert sum(i["eligible_requests"] for i in items) == sum(len(b) for b in batches)
    assert (partitioner(cut.campaign_id) == [partition_of(c, 4) for c in cut.campaign_id.tolist()]).all()


def test_a_partition_with_many_campaigns_travels_in_records_of_bounded_size():
    from core.spend import batch_records, spend_items

    acc = SpendAccumulator("s1")
    acc.eligible_many(list(range(1, 41)), NOW)
    acc.add(7, 500, NOW)
    cut = acc.cut(NOW + 1000, {7: "lease-7"})
    records = batch_records(cut, 2, max_campaigns=3)
    assert all(len(r["campaigns"]["campaign_id"]) <= 3 * 8 for _, r in records)
    assert len(records) >= 40 // 3  # several records per partition, each campaign in exactly one
    items = sorted((i for _, r in records for i in spend_items(r)), key=lambda i: i["campaign_id"])
    assert items == cut.items()
    assert {r["sequence"] for _, r in records} == {cut.sequence}
    assert sum(1 for _, r in records if r["campaigns"]["lease_id"]) == 1
