"""The pre-ranker: ~20 cheap in-memory features per candidate, vectorised, ranking by
approximate expected value so a high bid with a modest click rate survives; keeps 200.

approx pCTR = the ad's CTR prior x exp(w . features), clipped; approx value per
impression = bid x approx action rate + quality (core.auction's formula on
approximate predictions). The weights are a small linear model; `fit_weights`
retrains them against the learned click model's scores (the recall monitor,
serving.decision.recall, says when they no longer agree). With the learned
model in process, one feature is the model's own cheap estimate
(`model_affinity`, its bilinear student: serving.model.student), and with no
fitted weights the pre-ranker ranks by it alone (DEFAULT_MODEL_WEIGHTS). Pure."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidSettings
from serving.decision.index import TargetingIndex

DEFAULT_KEEP = 200
DEFAULT_CVR_PRIOR = 0.05
FEATURES = (
    "ctr_prior", "log_bid", "is_cpm", "is_cpc", "is_cpa", "quality", "embedding_dot", "static_score",
    "participation", "log_ctr_prior", "bid_x_ctr", "emb_norm", "user_emb_norm", "placement_ctr_mult",
    "slot_count", "category_set", "quality_positive", "quality_negative", "dot_x_ctr", "bias", "model_affinity",
)
# Weights of the log-CTR adjustment; by default only the embedding affinity moves the prior, and the learned
# model's own interaction term (model_affinity, 0 without a model) enters as the logit summand it is.
DEFAULT_WEIGHTS = np.zeros(len(FEATURES), dtype=np.float32)
DEFAULT_WEIGHTS[FEATURES.index("embedding_dot")] = 0.5
DEFAULT_WEIGHTS[FEATURES.index("model_affinity")] = 1.0
# With a model whose student gives model_affinity, that estimate alone (it already holds the user-ad affinity).
DEFAULT_MODEL_WEIGHTS = np.zeros(len(FEATURES), dtype=np.float32)
DEFAULT_MODEL_WEIGHTS[FEATURES.index("model_affinity")] = 1.0


@dataclass(frozen=True)
class RequestSignals:
    """What the pre-ranker's features read of the request: the user's embedding, the placement's CTR
    multiplier, how many slots it asks for, and the learned model's user-ad interaction per candidate (the
    predictor's `affinity`; None without one)."""
    user_embedding: np.ndarray
    placement_ctr_multiplier: float = 1.0
    slot_count: int = 1
    affinity: np.ndarray | None = None


@dataclass
class Preranked:
    rows: np.ndarray  # the kept rows, best approximate value first
    approx_pctr: np.ndarray  # approximate pCTR of each kept row (first position)
    approx_value_micros: np.ndarray


def features(index: TargetingIndex, rows: np.ndarray, participation: np.ndarray, user_embedding: np.ndarray,
             placement_ctr_multiplier: float, slot_count: int, affinity: np.ndarray | None = None) -> np.ndarray:
    """The feature matrix, shape (len(rows), len(FEATURES)), float32. `affinity`: the learned model's
    user-ad interaction per row (the predictor's `affinity`), None without one."""
    return _features(index.hot.gather(rows), participation,
                     RequestSignals(user_embedding, placement_ctr_multiplier, slot_count, affinity))


class _Inputs:
    """One request's candidates as the features read them, each intermediate computed once, on first use."""

    def __init__(self, hot: np.ndarray, participation: np.ndarray, request: RequestSignals) -> None:
        self.hot, self.participation, self.user_embedding = hot, participation, request.user_embedding
        self.multiplier, self.slot_count, self.affinity = (request.placement_ctr_multiplier, request.slot_count,
                                                           request.affinity)
        self.n = len(hot)
        self._cache: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> np.ndarray:
        cache = self.__dict__["_cache"]
        if name not in cache:
            cache[name] = getattr(type(self), "_" + name)(self)
        return cache[name]

    def _ctr(self) -> np.ndarray:
        return self.hot["ctr_prior"].astype(np.float32)

    def _bid(self) -> np.ndarray:
        return self.hot["bid_micros"].astype(np.float32)

    def _quality(self) -> np.ndarray:
        return self.hot["quality_micros"].astype(np.float32)

    def _emb(self) -> np.ndarray:
        return self.hot["embedding"].astype(np.float32)

    def _dot(self) -> np.ndarray:
        return self.emb @ self.user_embedding.astype(np.float32)


# Each feature's column, in FEATURES order, from the request's inputs (bools and float64 columns become float32
# in the matrix, as every column does).
_COLUMNS = {
    "ctr_prior": lambda i: i.ctr, "log_bid": lambda i: np.log1p(i.bid), "is_cpm": lambda i: i.hot["bid_type"] == 0,
    "is_cpc": lambda i: i.hot["bid_type"] == 1, "is_cpa": lambda i: i.hot["bid_type"] == 2,
    "quality": lambda i: i.quality / 1e4, "embedding_dot": lambda i: i.dot,
    "static_score": lambda i: i.hot["static_score"], "participation": lambda i: i.participation,
    "log_ctr_prior": lambda i: np.log(np.maximum(i.ctr, 1e-6)), "bid_x_ctr": lambda i: i.bid * i.ctr / 1e6,
    "emb_norm": lambda i: np.linalg.norm(i.emb, axis=1),
    "user_emb_norm": lambda i: np.full(i.n, np.linalg.norm(i.user_embedding)),
    "placement_ctr_mult": lambda i: np.full(i.n, i.multiplier), "slot_count": lambda i: np.full(i.n, i.slot_count),
    "category_set": lambda i: i.hot["exclusion_category"] > 0,
    "quality_positive": lambda i: np.maximum(i.quality, 0) / 1e4,
    "quality_negative": lambda i: np.minimum(i.quality, 0) / 1e4, "dot_x_ctr": lambda i: i.dot * i.ctr,
    "bias": lambda i: np.ones(i.n), "model_affinity": lambda i: np.zeros(i.n) if i.affinity is None else i.affinity,
}
assert tuple(_COLUMNS) == FEATURES


def _features(hot: np.ndarray, participation: np.ndarray, request: RequestSignals) -> np.ndarray:
    inputs = _Inputs(hot, participation, request)
    return np.column_stack([column(inputs) for column in _COLUMNS.values()]).astype(np.float32)


def _exact_few(weights: np.ndarray) -> np.ndarray | None:
    """The features a weighted sum needs when it can skip the rest exactly: one weight, or two that are powers of
    two (the default weights: 0.5 on embedding_dot and 1 on model_affinity). Each product is then exact (or the
    only rounding) and the sum one rounding in any order, so the sum of those columns alone equals the matrix
    product x @ weights bit for bit. None otherwise: the whole matrix is built."""
    used = np.flatnonzero(weights)
    if len(used) > 2:
        return None
    if len(used) == 2 and not np.all(np.abs(np.frexp(weights[used].astype(np.float64))[0]) == 0.5):
        return None
    return used


def _adjustment(hot: np.ndarray, participation: np.ndarray, request: RequestSignals,
                weights: np.ndarray) -> np.ndarray:
    """x @ weights (float32): from the columns that weigh when the weights allow it exactly (_exact_few), else
    from the whole feature matrix."""
    used = _exact_few(weights)
    if used is None:
        return _features(hot, participation, request) @ weights
    inputs = _Inputs(hot, participation, request)
    total = np.zeros(len(hot), dtype=np.float32)
    for f in used:
        total = total + np.asarray(_COLUMNS[FEATURES[f]](inputs)).astype(np.float32) * weights[f]
    return total


def prerank(index: TargetingIndex, rows: np.ndarray, participation: np.ndarray, request: RequestSignals, *,
            keep: int = DEFAULT_KEEP, weights: np.ndarray = DEFAULT_WEIGHTS,
            cvr_prior: float | np.ndarray = DEFAULT_CVR_PRIOR) -> Preranked:
    """The `keep` candidates of highest approximate value per impression. `cvr_prior`: the pCVR of conversion
    bids, one for all, or one per row (the learned conversion model's, when the predictor offers it)."""
    if len(rows) == 0:
        empty = np.empty(0, dtype=np.float32)
        return Preranked(rows, empty, empty)
    hot = index.hot.gather(rows)  # one gather per candidate; every feature reads this compact copy
    adjustment = np.clip(_adjustment(hot, participation, request, weights), -3.0, 3.0)
    pctr = np.clip(hot["ctr_prior"] * request.placement_ctr_multiplier * np.exp(adjustment), 1e-6, 0.99)
    bid = hot["bid_micros"].astype(np.float64)
    code = hot["bid_type"]
    action = np.where(code == 0, 1 / 1000, np.where(code == 1, pctr, pctr * cvr_prior))
    value = bid * action + hot["quality_micros"]
    if len(rows) > keep:
        top = np.argpartition(-value, keep - 1)[:keep]
    else:
        top = np.arange(len(rows))
    top = top[np.argsort(-value[top], kind="stable")]
    return Preranked(rows[top], pctr[top].astype(np.float32), value[top])


def fit_weights(features_matrix: np.ndarray, ctr_prior: np.ndarray, model_pctr: np.ndarray,
                ridge: float = 1.0, cvr_prior: float = DEFAULT_CVR_PRIOR) -> np.ndarray:
    """Weights of the log-CTR adjustment that best reproduce the model's first-slot pCTR from the cheap
    features: weighted least squares (ridge-regularised, in units of rows) of log(model pCTR / prior) on the
    feature matrix (`features`; the prior already carries the placement multiplier), clipped like `prerank`
    clips. Each candidate weighs its model value per impression squared (relative to the mean), so the fit
    is best where the ranking is decided, among the valuable candidates: on the simulated world the refit
    took the pre-ranker's recall from 57.9 % (default weights) to 80.7 % unweighted and 87.9 % weighted by
    value squared (benchmarks/RESULTS.md)."""
    x = np.asarray(features_matrix, dtype=np.float64)
    model_pctr = np.clip(np.asarray(model_pctr, dtype=np.float64), 1e-6, 0.99)
    target = np.clip(np.log(model_pctr) - np.log(np.maximum(ctr_prior, 1e-6)), -3.0, 3.0)
    bid = np.expm1(x[:, FEATURES.index("log_bid")])
    value = np.where(x[:, FEATURES.index("is_cpm")] > 0, bid / 1000,
                     bid * model_pctr * np.where(x[:, FEATURES.index("is_cpa")] > 0, cvr_prior, 1.0))
    weight = (value / max(value.mean(), 1e-12)) ** 2
    gram = (x * weight[:, None]).T @ x + ridge * np.eye(x.shape[1])
    return np.linalg.solve(gram, (x * weight[:, None]).T @ target).astype(np.float32)


def save_weights(weights: np.ndarray, path) -> None:
    """The weights as JSON by feature name (the file `--prerank-weights` reads)."""
    import json
    from pathlib import Path

    Path(path).write_text(json.dumps({name: float(w) for name, w in zip(FEATURES, weights)}, indent=2))


def load_weights(path) -> np.ndarray:
    """Weights from a JSON file by feature name; a feature the file lacks weighs 0."""
    import json
    from pathlib import Path

    named = json.loads(Path(path).read_text())
    unknown = sorted(set(named) - set(FEATURES))
    if unknown:
        raise InvalidSettings(f"{path}: unknown pre-ranker features {unknown}; known: {list(FEATURES)}")
    return np.array([float(named.get(name, 0.0)) for name in FEATURES], dtype=np.float32)
