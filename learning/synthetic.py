"""Synthetic labelled impressions with a known click probability, for the click model's tests and
`adserve bench model` (no decision engine in the loop: impressions are drawn directly, so a few thousand
cost milliseconds; `adserve learning-day` is the realistic day through the real engine).

The true click probability has the shape of the simulated day's:

    logit(p) = logit(ad base ctr) + placement + device + AFFINITY x (user . ad embedding)
               + 0.5 x activity + log(position effect)

so a priors-only predictor (the ad's ctr prior x position effect) cannot learn the user-ad interaction,
the placement or the device, and a model of the logged features can. Negatives are down-sampled with
core.training.keeps_negative at the keep rate and weighted 1 / w, as the real join does. Seeded; test and
benchmark data only, never read by a serving process."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from core import training
from serving.decision.prediction import position_effect
from serving.model.ad_features import AdFeatureSnapshot

DIM = 8
CATEGORIES = 6
AFFINITY = 3.0
PLACEMENT_EFFECT = {"feed": 0.0, "article": -0.5, "video": 0.4}
DEVICE_EFFECT = {"ios": 0.2, "android": 0.0, "desktop": -0.4}
COUNTRIES = ("US", "GB", "DE", None)
POSITIONS = (1, 2, 3, 4)
BID_TYPE_BILLING = ("IMPRESSION", "CLICK", "CLICK")


@dataclass
class SyntheticDay:
    snapshot: AdFeatureSnapshot
    examples: list[dict[str, Any]]  # TrainingExample records, negatives down-sampled
    truth: dict[str, float]  # impression id -> true click probability (every impression, kept or not)
    true_mean_ctr: float  # over every impression, before down-sampling
    keep_rate: float


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def make_snapshot(ads: int = 200, seed: int = 3, version: int = 1) -> tuple[AdFeatureSnapshot, np.ndarray]:
    """An ad-feature snapshot and the ads' TRUE base click rates (the prior is a noisy estimate of it)."""
    rng = np.random.default_rng(seed)
    base_ctr = np.clip(np.exp(rng.normal(math.log(0.02), 0.5, ads)), 1e-3, 0.3)
    snapshot = AdFeatureSnapshot(
        version=version, ad_id=np.arange(1_000, 1_000 + ads, dtype=np.int64),
        campaign_id=(np.arange(ads) // 4 + 100).astype(np.int64), bid_type=rng.integers(0, 3, ads).astype(np.int8),
        bid_micros=rng.integers(100_000, 5_000_000, ads).astype(np.int64),
        ctr_prior=(base_ctr * np.exp(rng.normal(0, 0.1, ads))).astype(np.float32),
        quality_prior=rng.normal(0, 1, ads).astype(np.float32),
        category=rng.integers(0, CATEGORIES, ads).astype(np.int32),
        embedding=rng.normal(0, 1 / math.sqrt(DIM), (ads, DIM)).astype(np.float32))
    return snapshot, base_ctr


def make_day(impressions: int = 20_000, *, ads: int = 200, users: int = 2_000, keep_rate: float = 0.1,
             seed: int = 1, world_seed: int = 3, affinity: float = AFFINITY) -> SyntheticDay:
    """One day of impressions over a world (the same world_seed gives the same ads and users; days differ by
    seed)."""
    snapshot, base_ctr = make_snapshot(ads, world_seed)
    world = np.random.default_rng(world_seed + 1)
    user_embedding = world.normal(0, 1 / math.sqrt(DIM), (users, DIM))
    user_activity = world.normal(0, 1, users)
    user_age = world.integers(18, 71, users).astype(np.float64)
    user_device = world.choice(list(DEVICE_EFFECT), users)
    user_country = world.choice(len(COUNTRIES), users)

    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, impressions)
    ad = rng.integers(0, ads, impressions)
    placement = rng.choice(list(PLACEMENT_EFFECT), impressions)
    position = rng.choice(POSITIONS, impressions)
    logit = (np.log(base_ctr[ad]) - np.log1p(-base_ctr[ad])
             + np.array([PLACEMENT_EFFECT[p] for p in placement])
             + np.array([DEVICE_EFFECT[d] for d in user_device[user]])
             + affinity * np.einsum("ij,ij->i", user_embedding[user], snapshot.embedding[ad].astype(np.float64))
             + 0.5 * user_activity[user] + np.log(position_effect(position)))
    p = _sigmoid(logit)
    label = rng.random(impressions) < p

    examples, truth = [], {}
    for i in range(impressions):
        impression_id = f"syn{seed}-{i:07d}"
        truth[impression_id] = float(p[i])
        if not label[i] and not training.keeps_negative(impression_id, keep_rate):
            continue
        u, a = int(user[i]), int(ad[i])
        features = {f"emb_{k}": float(v) for k, v in enumerate(user_embedding[u])}
        features.update(activity=float(user_activity[u]), age=float(user_age[u]))
        served_ms = 1_800_000_000_000 + i * 1_000
        examples.append({
            "impression_id": impression_id, "request_id": f"syn{seed}-r{i:07d}", "event_time": served_ms + 60_000,
            "served_time": served_ms, "label": int(label[i]),
            "sample_weight": 1.0 if label[i] else 1.0 / keep_rate, "ad_id": int(snapshot.ad_id[a]),
            "campaign_id": int(snapshot.campaign_id[a]), "slot_position": int(position[i]),
            "placement": str(placement[i]), "country": COUNTRIES[int(user_country[u])],
            "device": str(user_device[u]), "billing_type": BID_TYPE_BILLING[int(snapshot.bid_type[a])],
            "user_features": features, "ad_snapshot_version": snapshot.version,
            "logged_pctr": float(snapshot.ctr_prior[a] * position_effect([int(position[i])])[0]),
            "scored_by_fallback": False, "exploration": False})
    return SyntheticDay(snapshot, examples, truth, float(p.mean()), keep_rate)
