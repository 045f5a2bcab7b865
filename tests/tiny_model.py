"""A tiny click model trained in seconds on synthetic impressions, for the prediction service's tests (unit and
integration): the real network, correction and calibration, just small and briefly trained."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from learning import synthetic
from learning.network import Architecture, TrainConfig
from learning.trainer import train_click_model
from serving.model.ad_features import AdFeatureSnapshot
from serving.model.click_model import ClickModel

TINY = TrainConfig(epochs=2, batch_size=512, patience=1, architecture=Architecture(hidden=(16,)))


def tiny_model(version: str = "click-tiny-1", *, impressions: int = 12_000, seed: int = 1) -> tuple[ClickModel,
                                                                                                   AdFeatureSnapshot]:
    """A trained model (metadata model_version = version) and the synthetic snapshot it was trained on."""
    day = synthetic.make_day(impressions, seed=seed, keep_rate=0.2)
    model = train_click_model(day.examples, {day.snapshot.version: day.snapshot}, day.keep_rate,
                              replace(TINY, seed=seed), min_segment_clicks=30, log=lambda line: None)
    model.metadata["model_version"] = version
    return model, day.snapshot


def snapshot_for(ad_ids, like: AdFeatureSnapshot, version: int = 2) -> AdFeatureSnapshot:
    """A snapshot that holds the given ad ids, each with the features of one of `like`'s ads (in turn)."""
    ad_ids = np.asarray(ad_ids, dtype=np.int64)
    source = np.arange(len(ad_ids)) % len(like)
    return AdFeatureSnapshot(
        version=version, ad_id=ad_ids, campaign_id=like.campaign_id[source], bid_type=like.bid_type[source],
        bid_micros=like.bid_micros[source], ctr_prior=like.ctr_prior[source],
        quality_prior=like.quality_prior[source], category=like.category[source], embedding=like.embedding[source])
