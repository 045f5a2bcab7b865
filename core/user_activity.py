"""A consented user's model features from the features job's window of their impressions and clicks: a small,
fixed set of names the ad server sends to the model with the user's other features (docs/features.md).
Pure: window totals in, features out."""
from __future__ import annotations

from typing import Mapping

from core.feature_windows import Counts, total

IMPRESSIONS, CLICKS = "impressions_window", "clicks_window"
CATEGORY_CLICKS_PREFIX = "clicks_cat_"  # clicks_cat_{category}: clicks on ads of one content category
OWNED_NAMES = (IMPRESSIONS, CLICKS)  # the names this module writes; other writers' features are left alone
OWNED_PREFIXES = (CATEGORY_CLICKS_PREFIX,)


def user_features(by_category: Mapping[int, Counts]) -> dict[str, float]:
    """impressions_window and clicks_window (the window's rendered impressions and clicks), and
    clicks_cat_{c} for each nonzero category c the user clicked; empty for a user with nothing in the window."""
    everything = total(by_category.values())
    if everything.empty:
        return {}
    features = {IMPRESSIONS: float(everything.impressions), CLICKS: float(everything.clicks)}
    for category, counts in sorted(by_category.items()):
        if category != 0 and counts.clicks:
            features[f"{CATEGORY_CLICKS_PREFIX}{category}"] = float(counts.clicks)
    return features


def owned(name: str) -> bool:
    """Whether a user feature is one this module writes (and so may replace or remove)."""
    return name in OWNED_NAMES or name.startswith(OWNED_PREFIXES)
