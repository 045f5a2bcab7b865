"""What the publisher writes at a tick besides the features.ads rows: the snapshot file (the published rows as
the columns of streams.ad_features) and the registry entry that names it. Adapts records to the file format;
decides nothing."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from core.ad_content import EMBEDDING_DIM
from core.ad_stats import BID_TYPE_CODES
from streams.ad_features import AdFeatureSnapshot, prune

FEATURES_ROLE, REGISTRY_KEY = "FEATURES", b"FEATURES"


def snapshot_of(version: int, records: Sequence[dict]) -> AdFeatureSnapshot:
    """The snapshot file's columns from the published AdFeatures records (ctr_prior is ctr_estimate,
    quality_prior is quality_micros)."""
    def column(name: str, dtype) -> np.ndarray:
        return np.array([r[name] for r in records], dtype=dtype)

    embedding = np.array([r["embedding"] for r in records], dtype=np.float32).reshape(len(records), EMBEDDING_DIM)
    return AdFeatureSnapshot(
        version, ad_id=column("ad_id", np.int64), campaign_id=column("campaign_id", np.int64),
        bid_type=np.array([BID_TYPE_CODES[r["bid_type"]] for r in records], dtype=np.int8),
        bid_micros=column("bid_micros", np.int64), ctr_prior=column("ctr_estimate", np.float32),
        quality_prior=column("quality_micros", np.float32), category=column("category", np.int32),
        embedding=embedding, ctr_alpha=column("ctr_alpha", np.float32), ctr_beta=column("ctr_beta", np.float32),
        impressions=column("impressions", np.float32))


def write_snapshot(version: int, records: Sequence[dict], folder: Path, keep: int) -> Path:
    """Write ad-features-v{version}.npz (renamed into place whole) and keep only the newest `keep` files."""
    path = snapshot_of(version, records).write(folder)
    prune(folder, keep)
    return path


def registry_entry(version: int, folder: Path, ads: int, window_ms: int) -> dict:
    """The RegistryEntry that names the newest complete snapshot (schemas/registry_entry.avsc)."""
    return {"role": FEATURES_ROLE, "event_time": int(version), "model_version": None, "model_dir": None,
            "canary_share": 0.0, "snapshot_version": int(version), "snapshot_dir": str(folder),
            "reason": f"features job: {ads} ads, window {window_ms} ms"}
