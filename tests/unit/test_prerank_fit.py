"""Refitting the pre-ranker's weights to the learned model's scores (serving.decision.prerank.fit_weights)."""
from __future__ import annotations

import numpy as np
import pytest

from serving.decision.prerank import FEATURES, fit_weights, load_weights, save_weights


def test_the_fit_recovers_the_weights_that_turn_the_prior_into_the_models_rate():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (5_000, len(FEATURES))).astype(np.float32)
    x[:, FEATURES.index("bias")] = 1.0
    true = np.zeros(len(FEATURES))
    true[FEATURES.index("embedding_dot")] = 0.6
    true[FEATURES.index("bias")] = -0.2
    prior = rng.uniform(0.005, 0.02, len(x))
    model_pctr = prior * np.exp(np.clip(x @ true, -3, 3))
    fitted = fit_weights(x, prior, np.clip(model_pctr, 1e-6, 0.99), ridge=1e-3)
    assert np.allclose(fitted, true, atol=0.02)


def test_weights_round_trip_through_their_file_by_feature_name(tmp_path):
    weights = np.arange(len(FEATURES), dtype=np.float32) / 10
    save_weights(weights, tmp_path / "prerank.json")
    assert np.allclose(load_weights(tmp_path / "prerank.json"), weights)
    (tmp_path / "bad.json").write_text('{"no_such_feature": 1.0}')
    with pytest.raises(ValueError, match="no_such_feature"):
        load_weights(tmp_path / "bad.json")
