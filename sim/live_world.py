"""A simulated world for the live loop's benchmark (`adserve bench live-loop`): advertisers, campaigns and ads
whose appeal comes from what the platform can observe, and users with known click probabilities.

An ad's true click rate at a slot is sigmoid(base + advertiser + ad + placement + position + affinity + user):
- advertiser and ad effects: each advertiser has its own level and its ads vary around it, so the features
  job's shrinkage toward the advertiser's average has something to gain;
- affinity: AFFINITY x (the ad's content vector . the user's taste vector), where the content vector is exactly
  core.ad_content.content_embedding of the ad's creative words, landing URL and category. Content drives
  appeal, so a model fed the content embedding (the features job's) and the user's taste (the profile's model
  features) can learn it;
- the user's activity level.
The ads are CPC bids, so every winner's price and rank depend on pCTR. New ads (`new_ads`) join part-way
through a run so the time a new ad needs to be learned can be measured. The world only answers "what is the
true probability"; serving, beacons and learning are the platform's. Pure: numpy randomness from the seed."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.ad_content import EMBEDDING_DIM, content_embedding
from schemas.topics import SERVING_ADS, SERVING_CAMPAIGNS
from serving.decision.prediction import position_effect
from sim.learning_day import _logit, _sigmoid

WORDS = ("shoes", "sale", "travel", "hotel", "phone", "laptop", "garden", "coffee", "yoga", "bike", "pizza",
         "books", "music", "games", "camera", "watch", "jacket", "tea", "paint", "kids", "pets", "fitness",
         "beauty", "cars", "tickets", "flowers", "tools", "kitchen", "movies", "course", "bank", "loans")
PLACEMENTS = {"feed": (0.5, 0.0, (1, 2)), "article": (0.3, -0.3, (1, 2)), "video": (0.2, 0.3, (1,))}
COUNTRIES = ("US", "GB", "DE")
CATEGORIES = 10
AFFINITY = 3.0
BASE_CTR = 0.02
USER_FEATURES = tuple(f"taste_{i}" for i in range(EMBEDDING_DIM)) + ("activity",)


@dataclass
class LiveWorld:
    seed: int
    ad_id: np.ndarray
    campaign_id: np.ndarray
    advertiser_id: np.ndarray
    bid_micros: np.ndarray
    category: np.ndarray
    creative_ref: list[str]
    landing_url: list[str]
    ad_logit: np.ndarray  # base + advertiser + ad effects
    content: np.ndarray  # (ads, EMBEDDING_DIM): core.ad_content of each ad
    joins_at: np.ndarray  # share of the run after which the ad exists (0: from the start)
    user_taste: np.ndarray  # (users, EMBEDDING_DIM)
    user_activity: np.ndarray
    user_country: np.ndarray

    @property
    def ads(self) -> int:
        return len(self.ad_id)

    @property
    def users(self) -> int:
        return len(self.user_activity)

    def true_ctr(self, user: int, rows: np.ndarray, placement: str, position: int) -> np.ndarray:
        """The true click probability; `placement` may carry a run's suffix ("feed.run1": the feed)."""
        logit = (self.ad_logit[rows] + PLACEMENTS[placement.split(".")[0]][1] + AFFINITY * (self.content[rows] @ self.user_taste[user])
                 + 0.4 * self.user_activity[user] + math.log(float(position_effect([position])[0])))
        return _sigmoid(logit)

    def top_ctr(self, rows: np.ndarray, users: np.ndarray) -> np.ndarray:
        """Each ad's mean true click rate at the top position of an average placement over `users` (the rate the
        features job's ctr_estimate aims at)."""
        logit = (self.ad_logit[rows][None, :] + AFFINITY * self.user_taste[users] @ self.content[rows].T
                 + 0.4 * self.user_activity[users][:, None])
        return _sigmoid(logit).mean(axis=0)

    def user_features(self, user: int) -> dict[str, float]:
        """The user's model features as the profile holds them (the features the server sends to the model)."""
        values = np.concatenate([self.user_taste[user], [self.user_activity[user]]]).astype(np.float32)
        return dict(zip(USER_FEATURES, values.tolist()))

    def serving_records(self, placement_of: dict[int, tuple[str, ...]], now_ms: int,
                        rows: np.ndarray | None = None, *, suffix: str = "",
                        removed: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """(topic, record) of the campaigns and ads at `rows` (default all) as the index builder would compile
        them: ServingCampaign and ServingAd, CPC, no caps, a budget no bench day spends. The ads target their
        placements named with `suffix` ("feed" + ".run1"), so a run's requests meet only its own ads;
        removed=True retires them."""
        rows = np.arange(self.ads) if rows is None else rows
        out: list[tuple[str, dict[str, Any]]] = []
        seen: set[int] = set()
        for row in rows.tolist():
            campaign = int(self.campaign_id[row])
            if campaign not in seen:
                seen.add(campaign)
                out.append((SERVING_CAMPAIGNS, {
                    "campaign_id": campaign, "advertiser_id": int(self.advertiser_id[row]), "version": now_ms,
                    "event_time": now_ms, "status": "ACTIVE", "bid_type": "CPC",
                    "daily_budget_micros": 10 ** 15, "currency": "USD", "timezone": "UTC", "flight_start": None,
                    "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None,
                    "cpa_target_micros": None}))
            out.append((SERVING_ADS, {
                "ad_id": int(self.ad_id[row]), "campaign_id": campaign, "advertiser_id": int(self.advertiser_id[row]),
                "version": now_ms, "event_time": now_ms, "removed": removed, "bid_type": "CPC",
                "bid_micros": int(self.bid_micros[row]), "quality_prior": 0.0, "creative_ref": self.creative_ref[row],
                "landing_url": self.landing_url[row], "static_score": float(self.bid_micros[row]) * BASE_CTR,
                "exclusion_category": 0,
                "targeting": [{"attribute": "placement", "values": [p + suffix for p in placement_of[campaign]],
                               "excluded": False}]}))
        return out


def make_live_world(seed: int = 5, advertisers: int = 20, campaigns_per_advertiser: int = 5,
                    ads_per_campaign: int = 4, users: int = 20_000, new_ad_share: float = 0.1,
                    id_base: int = 7_000_000) -> tuple[LiveWorld, dict[int, tuple[str, ...]]]:
    """(the world, each campaign's placements). The same seed gives the same world; ids start at `id_base` so
    a run's ads do not collide with other data on the platform."""
    rng = np.random.default_rng(seed)
    campaigns = advertisers * campaigns_per_advertiser
    n = campaigns * ads_per_campaign
    advertiser_of_campaign = np.repeat(np.arange(advertisers), campaigns_per_advertiser)
    campaign_row = np.repeat(np.arange(campaigns), ads_per_campaign)
    advertiser_effect = rng.normal(0, 0.5, advertisers)
    campaign_category = rng.integers(1, CATEGORIES, campaigns)
    campaign_bid = rng.uniform(0.5, 2.0, campaigns)
    creative, landing = [], []
    for row in range(n):
        words = rng.choice(WORDS, size=3, replace=False)
        advertiser = int(advertiser_of_campaign[campaign_row[row]])
        creative.append("-".join(words))
        landing.append(f"https://adv{advertiser}.example/{words[0]}")
    category = campaign_category[campaign_row]
    content = np.array([content_embedding(c, u, int(k)) for c, u, k in zip(creative, landing, category)])
    joins = np.where(rng.random(n) < new_ad_share, rng.uniform(0.3, 0.6, n), 0.0)
    world = LiveWorld(
        seed=seed, ad_id=id_base + np.arange(n) + 1, campaign_id=id_base + campaign_row + 1,
        advertiser_id=id_base + advertiser_of_campaign[campaign_row] + 1,
        bid_micros=np.round(campaign_bid[campaign_row] * 1e6).astype(np.int64), category=category,
        creative_ref=creative, landing_url=landing,
        ad_logit=float(_logit(BASE_CTR)) + advertiser_effect[advertiser_of_campaign[campaign_row]]
        + rng.normal(0, 0.3, n),
        content=content, joins_at=joins, user_taste=rng.normal(0, 1 / math.sqrt(EMBEDDING_DIM), (users, EMBEDDING_DIM)),
        user_activity=rng.normal(0, 1, users), user_country=rng.choice(COUNTRIES, size=users))
    placement_names = tuple(PLACEMENTS)
    placement_of = {int(world.campaign_id[campaign_row == c][0]): tuple(sorted(
        rng.choice(placement_names, size=int(rng.integers(1, 4)), replace=False).tolist()))
        for c in range(campaigns)}
    return world, placement_of


def pick_placement(rng: np.random.Generator) -> str:
    names = tuple(PLACEMENTS)
    return names[int(rng.choice(len(names), p=[PLACEMENTS[p][0] for p in names]))]
