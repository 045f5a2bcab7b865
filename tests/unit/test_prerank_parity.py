"""The pre-ranker skips the features its weights ignore (serving.decision.prerank._adjustment): for the default
weights the sum of the two weighted columns equals the whole feature matrix times the weights bit for bit, and any
other weights take the matrix. Random candidates, hypothesis."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from serving.decision import prerank as pr
from serving.decision.index import AdRecord, TargetingIndex
from core.targeting import compile_targeting

EVERYWHERE = compile_targeting({"placement": ["feed"]})


def _index(rng: np.random.Generator, n: int) -> TargetingIndex:
    return TargetingIndex.build([AdRecord(
        ad_id=a, campaign_id=a % 7 + 1, version=1, bid_type=("CPM", "CPC", "CPA")[a % 3],
        bid_micros=int(rng.integers(1, 50_000_000)), quality_micros=int(rng.integers(-20_000, 20_000)),
        static_score=float(rng.random()), targeting=EVERYWHERE, creative_ref="c", landing_url="https://x.example/",
        ctr_prior=float(rng.random() * 0.1), embedding=rng.normal(size=8).tolist()) for a in range(1, n + 1)])


WEIGHTS = {"default": pr.DEFAULT_WEIGHTS, "model": pr.DEFAULT_MODEL_WEIGHTS}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), weights=st.sampled_from(["default", "model", "fitted",
                                                                                      "one", "two_inexact"]),
       with_affinity=st.booleans())
def test_the_weighted_sum_equals_the_feature_matrix_times_the_weights(seed, n, weights, with_affinity):
    rng = np.random.default_rng(seed)
    index = _index(rng, n)
    rows = np.arange(n, dtype=np.int32)
    hot = index.hot.gather(rows)
    participation = rng.random(n).astype(np.float32)
    user = rng.normal(size=8).astype(np.float32)
    affinity = rng.normal(size=n).astype(np.float32) if with_affinity else None
    w = WEIGHTS.get(weights)
    if w is None:
        w = np.zeros(len(pr.FEATURES), dtype=np.float32)
        picked = {"fitted": np.arange(len(w)), "one": [3], "two_inexact": [6, 20]}[weights]
        w[picked] = rng.normal(size=len(picked)).astype(np.float32)
    args = (hot, participation, pr.RequestSignals(user, 1.3, 2, affinity))
    matrix = pr._features(*args) @ w
    got = pr._adjustment(*args, w)
    assert got.dtype == np.float32 and got.tobytes() == matrix.astype(np.float32).tobytes()
    assert (pr._exact_few(w) is None) == (weights in ("fitted", "two_inexact"))
