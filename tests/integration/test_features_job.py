"""The features job on the real broker and Redis: twenty minutes of served records, impression and click
beacons, hides and the compiled ads of two advertisers in; the snapshot file, features.ads, model.registry and
consented users' features out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from core.ad_stats import EstimateRules
from schemas import topics
from schemas.codec import AvroCodec
from streams import ad_features, kafka, redis_keys
from tests.features_records import T0, beacon, feedback, served, serving_ad, serving_campaign, winner

CODEC = AvroCodec()
TICK_MS = 300_000
SPAN_MS = 4 * TICK_MS  # four buckets: more than two ticks of traffic
GOOD, MEDIOCRE, NEW_GOOD, HIDDEN, NEW_POOR, NEW_UNKNOWN, REMOVED = 11, 12, 13, 21, 22, 31, 41
SERVED_TYPE, EVENT_TYPE = topics.record_type(topics.AD_SERVED), topics.record_type(topics.AD_EVENTS)
FEEDBACK_TYPE, DEAD_LETTER_TYPE = topics.record_type(topics.AD_FEEDBACK), topics.record_type(topics.DEAD_LETTERS)
AD_TYPE, CAMPAIGN_TYPE = topics.record_type(topics.SERVING_ADS), topics.record_type(topics.SERVING_CAMPAIGNS)
FEATURES_TYPE, REGISTRY_TYPE = topics.record_type(topics.FEATURES_ADS), topics.record_type(topics.MODEL_REGISTRY)


def _traffic(users: dict[int, tuple[str, bool]]):
    """Served records (one winner each) and beacons of 400 impressions per ad with traffic, over SPAN_MS:
    GOOD clicked 40 times, MEDIOCRE 4, HIDDEN 2 and hidden 60 times, REMOVED 10; positions alternate 1, 2.
    An ad's impressions go to users[ad] (user id, consented) when it has one; GOOD's ads are of category 4."""
    plan = {GOOD: (1, 40, 0), MEDIOCRE: (1, 4, 0), HIDDEN: (2, 2, 60), REMOVED: (3, 10, 0)}
    served_log, events, hides = [], [], []
    for ad_id, (campaign_id, clicks, hidden) in plan.items():
        for n in range(400):
            at = T0 + (n * SPAN_MS) // 400 + ad_id
            impression = f"{ad_id}-{n}:1"
            user, consented = users.get(ad_id, (None, False))
            served_log.append(served(f"{ad_id}-{n}", at, [winner(impression, ad_id, campaign_id, 1 + n % 2,
                                                                 category=4 if ad_id == GOOD else 0)],
                                     user_id=user, consented=consented))
            events.append(beacon(impression, ad_id, campaign_id, at + 1_000, user_id=user))
            if n < clicks:
                events.append(beacon(impression, ad_id, campaign_id, at + 2_000, "CLICK", user_id=user))
            if n < hidden:
                hides.append(feedback(impression, ad_id, campaign_id, at + 3_000))
    return served_log, events, hides


def _produce(bootstrap: str, topic: str, record_type: str, records, key, extra=()) -> None:
    rows = [(str(key(r)).encode(), CODEC.encode(record_type, r), int(r["event_time"])) for r in records]
    kafka.produce_all(bootstrap, topic, sorted([*rows, *extra], key=lambda row: row[2]))


def _latest_by_key(messages, record_type: str, key: str, order: str) -> dict:
    latest: dict = {}
    for m in messages:
        record = CODEC.decode(m.value(), record_type)
        if record[key] not in latest or record[order] >= latest[record[key]][order]:
            latest[record[key]] = record
    return latest


def test_the_job_publishes_a_snapshot_its_rows_and_the_registry_entry(platform, fresh_topics, tmp_path: Path):
    names = ("served", "events", "conversions", "feedback", "ads", "campaigns", "features", "registry", "dead")
    topics = dict(zip(names, fresh_topics(*names)))
    bootstrap = platform.kafka_bootstrap
    consented_user, new_user, anonymous_user = (f"u-{uuid.uuid4().hex[:8]}" for _ in range(3))
    profiles = redis.Redis.from_url(platform.redis_url)
    profiles.hset(redis_keys.user_profile(consented_user), mapping={"features": '{"age": 30.0}', "age_band": "25-34"})

    served_log, events, hides = _traffic({GOOD: (consented_user, True), MEDIOCRE: (new_user, True),
                                          REMOVED: (anonymous_user, False)})
    ads = [serving_ad(GOOD, 1, 100, T0 - 60_000), serving_ad(MEDIOCRE, 1, 100, T0 - 60_000),
           serving_ad(NEW_GOOD, 1, 100, T0 - 60_000), serving_ad(HIDDEN, 2, 200, T0 - 60_000),
           serving_ad(NEW_POOR, 2, 200, T0 - 60_000), serving_ad(NEW_UNKNOWN, 3, 0, T0 - 60_000),
           serving_ad(REMOVED, 3, 0, T0 - 60_000, removed=True)]
    _produce(bootstrap, topics["served"], SERVED_TYPE, served_log, key=lambda r: r["request_id"])
    _produce(bootstrap, topics["events"], EVENT_TYPE, events, key=lambda e: e["campaign_id"],
             extra=[(b"1", b"not avro at all", T0 + 5_000)])
    _produce(bootstrap, topics["feedback"], FEEDBACK_TYPE, hides, key=lambda f: f["impression_id"])
    _produce(bootstrap, topics["ads"], AD_TYPE, ads, key=lambda a: a["ad_id"])
    _produce(bootstrap, topics["campaigns"], CAMPAIGN_TYPE,
             [serving_campaign(1, 100, T0 - 60_000), serving_campaign(2, 200, T0 - 60_000)],
             key=lambda c: c["campaign_id"])

    folder = tmp_path / "features"
    # One injected exception halfway through (jobs.tripwire): the job restarts in place, in the same Python
    # worker, and must still publish exactly what the records say.
    tripwire = tmp_path / "tripwire"
    tripwire.write_text(str(len(served_log) // 2))
    done = subprocess.run(
        [sys.executable, "-m", "jobs.features", "--bounded", "--tripwire-file", str(tripwire), "--startup-mode", "earliest-offset",
         "--bootstrap", bootstrap, "--checkpoint-interval-ms", "1000", "--group-id", f"g-{topics['served']}",
         "--window-ms", "3600000", "--tick-ms", str(TICK_MS), "--snapshot-dir", str(folder),
         "--redis-url", platform.redis_url,
         *[arg for name in names[:-1] for arg in (f"--{name}-topic", topics[name])],
         "--dead-letter-topic", topics["dead"]],
        capture_output=True, text=True, timeout=900, env=os.environ | platform.as_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not tripwire.exists(), "the injected failure never fired"

    snapshot = ad_features.load(folder)
    assert sorted(snapshot.ad_id.tolist()) == [GOOD, MEDIOCRE, NEW_GOOD, HIDDEN, NEW_POOR, NEW_UNKNOWN]
    ctr = dict(zip(snapshot.ad_id.tolist(), snapshot.ctr_prior.tolist()))
    quality = dict(zip(snapshot.ad_id.tolist(), snapshot.quality_prior.tolist()))
    assert ctr[GOOD] > ctr[MEDIOCRE] > ctr[HIDDEN]
    assert ctr[NEW_GOOD] > ctr[NEW_UNKNOWN] > ctr[NEW_POOR]  # a new ad gets its advertiser's rate
    assert quality[HIDDEN] < quality[GOOD] and quality[HIDDEN] < 0
    assert snapshot.impressions[snapshot.rows([GOOD])[0]] == 400

    features = kafka.read_all(bootstrap, topics["features"], timeout_s=60)
    assert all(m.key() == str(CODEC.decode(m.value())["ad_id"]).encode() for m in features)
    latest = _latest_by_key(features, FEATURES_TYPE, "ad_id", "snapshot_version")
    assert set(latest) == set(snapshot.ad_id.tolist())
    assert latest[GOOD]["clicks"] == 40 and latest[HIDDEN]["hides"] == 60
    # A new ad's rate is its advertiser's ratio (clicks over expected clicks, shrunk toward 1) times the
    # platform's top rate, which is what a new ad of an unknown advertiser gets.
    pool = [latest[a] for a in (GOOD, MEDIOCRE, NEW_GOOD)]
    m_adv = EstimateRules().advertiser_pseudo_clicks
    ratio = (sum(r["clicks"] for r in pool) + m_adv) / (sum(r["expected_clicks"] for r in pool) + m_adv)
    assert latest[NEW_GOOD]["ctr_estimate"] == pytest.approx(ratio * latest[NEW_UNKNOWN]["ctr_estimate"], rel=1e-4)

    registry = kafka.read_all(bootstrap, topics["registry"], timeout_s=30)
    assert registry and all(m.key() == b"FEATURES" for m in registry)
    entry = CODEC.decode(registry[-1].value(), REGISTRY_TYPE)
    assert (entry["role"], entry["snapshot_version"], entry["snapshot_dir"]) == ("FEATURES", snapshot.version,
                                                                                 str(folder))
    assert len(registry) >= 2 and snapshot.version >= T0 + SPAN_MS

    letters = [CODEC.decode(m.value(), DEAD_LETTER_TYPE) for m in
               kafka.read_all(bootstrap, topics["dead"], expected=1, timeout_s=30)]
    assert [(l["source_topic"], l["error_type"]) for l in letters] == [(topics["events"], "CorruptRecord")]

    stored = profiles.hgetall(redis_keys.user_profile(consented_user))
    assert json.loads(stored[b"features"]) == {"age": 30.0, "impressions_window": 400.0, "clicks_window": 40.0,
                                               "clicks_cat_4": 40.0}
    assert stored[b"age_band"] == b"25-34" and profiles.pttl(redis_keys.user_profile(consented_user)) == -1
    assert json.loads(profiles.hget(redis_keys.user_profile(new_user), "features")) == {
        "impressions_window": 400.0, "clicks_window": 4.0}
    assert 0 < profiles.pttl(redis_keys.user_profile(new_user)) <= 7 * 86_400_000  # a key only the job made
    assert not profiles.exists(redis_keys.user_profile(anonymous_user))
    profiles.delete(redis_keys.user_profile(consented_user), redis_keys.user_profile(new_user))
