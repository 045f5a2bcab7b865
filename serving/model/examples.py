"""ExampleTable: labelled impressions (TrainingExample records) as columns, the shape in which the shared
feature assembly (serving.model.features) reads training and evaluation examples.

Owns the column layout only; never reads files (learning.dataset does) and never decides a label or a sample
weight (core.training does)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass
class ExampleTable:
    """TrainingExample records as columns (one row per labelled impression)."""

    impression_id: list[str]
    request_id: list[str]
    label: np.ndarray  # int8
    sample_weight: np.ndarray  # float64
    ad_id: np.ndarray  # int64
    slot_position: np.ndarray  # int32
    placement: np.ndarray  # object (str)
    country: np.ndarray  # object (str, "" when the request had none)
    device: np.ndarray  # object (str, "" when unknown)
    billing_type: np.ndarray  # object ("IMPRESSION" | "CLICK")
    user_features: list[dict[str, float]]
    ad_snapshot_version: np.ndarray  # int64
    logged_pctr: np.ndarray  # float64
    scored_by_fallback: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.label)

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> "ExampleTable":
        def column(name: str, dtype) -> np.ndarray:
            return np.fromiter((r[name] for r in records), dtype=dtype, count=len(records))

        def text(name: str) -> np.ndarray:
            return np.array([r.get(name) or "" for r in records], dtype=object)

        return cls(
            impression_id=[r["impression_id"] for r in records], request_id=[r["request_id"] for r in records],
            label=column("label", np.int8), sample_weight=column("sample_weight", np.float64),
            ad_id=column("ad_id", np.int64), slot_position=column("slot_position", np.int32),
            placement=text("placement"), country=text("country"), device=text("device"),
            billing_type=text("billing_type"), user_features=[dict(r.get("user_features") or {}) for r in records],
            ad_snapshot_version=column("ad_snapshot_version", np.int64), logged_pctr=column("logged_pctr", np.float64),
            scored_by_fallback=np.fromiter((bool(r.get("scored_by_fallback", False)) for r in records), dtype=bool,
                                           count=len(records)))

    def take(self, mask_or_index: np.ndarray) -> "ExampleTable":
        index = np.flatnonzero(mask_or_index) if mask_or_index.dtype == bool else mask_or_index
        picked = index.tolist()
        return ExampleTable(
            impression_id=[self.impression_id[i] for i in picked], request_id=[self.request_id[i] for i in picked],
            label=self.label[index], sample_weight=self.sample_weight[index], ad_id=self.ad_id[index],
            slot_position=self.slot_position[index], placement=self.placement[index], country=self.country[index],
            device=self.device[index], billing_type=self.billing_type[index],
            user_features=[self.user_features[i] for i in picked],
            ad_snapshot_version=self.ad_snapshot_version[index], logged_pctr=self.logged_pctr[index],
            scored_by_fallback=self.scored_by_fallback[index])

    @property
    def positives(self) -> int:
        return int(self.label.sum())
