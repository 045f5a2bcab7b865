"""ModelPredictor: the click model in process, behind the decision engine's Predictor protocol.

Per request: the candidates' ad ids become snapshot rows (one dict lookup each), the request's context and
the candidates are tiled over the slot positions (serving.model.features.packed_request_inputs), padded to
the smallest fixed bucket that holds candidates x slots, and scored by a tf.function traced once per bucket
at load (a fixed input signature: no tracing, no `model.predict`, on the request path). The network's
output is corrected for the training data's down-sampling (core.training.recalibrate) and calibrated for
the request's segment (placement, country, the candidate's billing type). pCVR is a constant prior: the
training examples carry no conversion labels yet.

Thread-safe: concurrent predict calls share the traced functions (TensorFlow runs them concurrently) and
read the ad table through one reference, which use_snapshot swaps whole. Raises PredictionTimeout when the
deadline has passed before or after scoring, so the engine runs the auction on the pre-ranker's scores."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from core import training
from core.errors import AdserveError
from serving.decision.prediction import PredictionRequest, Predictions, PredictionTimeout
from serving.model import ad_features
from serving.model.calibration import logit, sigmoid
from serving.model.click_model import ClickModel
from serving.model.features import (INDEX_INPUTS, AdFeatureTable, ad_table, packed_request_inputs, packed_width,
                                     unpack)

DEFAULT_BUCKETS = (200, 400, 600, 800, 1_600)  # input rows: 200 candidates x 1-4 slots (x 8 at most)


class PredictionUnavailable(AdserveError):
    """The request cannot be scored by the model (no ad ids in it); the engine falls back."""


class ModelPredictor:
    def __init__(self, model: ClickModel, snapshot: ad_features.AdFeatureSnapshot, *,
                 buckets: Sequence[int] = DEFAULT_BUCKETS, warm_up: bool = True):
        import tensorflow as tf

        self._tf = tf
        self.model = model
        self.spec = model.spec
        self.buckets = tuple(sorted(buckets))
        self.use_snapshot(snapshot)
        network, spec = model.network, self.spec

        def compiled(rows: int):
            @tf.function(input_signature=[tf.TensorSpec((rows, packed_width(spec)), tf.float32, name="floats"),
                                          tf.TensorSpec((rows, len(INDEX_INPUTS)), tf.int32, name="indexes")])
            def score(floats, indexes):
                return tf.reshape(network(unpack(spec, floats, indexes), training=False), [-1])

            # Traced here, once per bucket; requests call the traced graph (no signature matching per call).
            return score.get_concrete_function()

        quiet = tf.get_logger().level
        tf.get_logger().setLevel("ERROR")  # five traces in a row are intended here, not a retracing problem
        try:
            self._score = {rows: compiled(rows) for rows in self.buckets}
        finally:
            tf.get_logger().setLevel(quiet)
        if warm_up:
            self.warm_up()

    @classmethod
    def load(cls, model_dir: Path, ad_features_dir: Path, snapshot_version: int | None = None,
             **options) -> "ModelPredictor":
        """A predictor of a saved model over an ad-feature snapshot: the version asked for, else the newest."""
        snapshot = ad_features.load(ad_features_dir, snapshot_version)
        return cls(ClickModel.load(model_dir), snapshot, **options)

    def use_snapshot(self, snapshot: ad_features.AdFeatureSnapshot) -> None:
        """Score against another ad-feature snapshot from the next request on (precomputed, then swapped)."""
        table = ad_table(self.spec, snapshot)
        self._ads: tuple[AdFeatureTable, np.ndarray] = (table, table.billing_type == "CLICK")

    @property
    def snapshot_version(self) -> int:
        return self._ads[0].version

    def warm_up(self) -> None:
        """Run every bucket once (the first run of a graph allocates), so no request pays for it."""
        for rows in self.buckets:
            self._run(rows, *packed_request_inputs(self.spec, self._ads[0], np.full(1, -1), [1], user_features={},
                                                   placement="", country=None, device=None, padded_to=rows))

    def _run(self, bucket: int, floats: np.ndarray, indexes: np.ndarray) -> np.ndarray:
        tf = self._tf
        return self._score[bucket](tf.constant(floats), tf.constant(indexes)).numpy()

    def _bucket(self, rows: int) -> int:
        for size in self.buckets:
            if size >= rows:
                return size
        return self.buckets[-1]

    def raw_scores(self, table: AdFeatureTable, rows: np.ndarray, request: PredictionRequest) -> np.ndarray:
        """The network's output (down-sampled scale), (candidates, slots)."""
        slots = len(request.positions)
        largest = self.buckets[-1]
        if slots > largest:
            raise PredictionUnavailable(f"{slots} slot positions exceed the largest input bucket ({largest} rows)")
        per_call = max(1, largest // slots)  # candidates per call when a request exceeds the largest bucket
        out = np.empty((len(rows), slots), dtype=np.float64)
        for begin in range(0, len(rows), per_call):
            part = rows[begin: begin + per_call]
            size = len(part) * slots
            bucket = self._bucket(size)
            floats, indexes = packed_request_inputs(
                self.spec, table, part, request.positions, user_features=request.user_features,
                placement=request.placement, country=request.country, device=request.device, padded_to=bucket)
            scores = self._run(bucket, floats, indexes)
            out[begin: begin + len(part)] = scores[:size].reshape(len(part), slots)
        return out

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        if clock() > deadline:
            raise PredictionTimeout("deadline passed before scoring")
        if request.ad_ids is None:
            raise PredictionUnavailable("the prediction request carries no ad ids (the model looks ads up by id)")
        table, bills_clicks = self._ads
        rows = table.rows(request.ad_ids)
        raw = self.raw_scores(table, rows, request)
        q = training.recalibrate(raw, self.model.keep_rate)
        calibration = self.model.calibration
        by_click = calibration.lookup(request.placement, request.country, "CLICK")
        by_impression = calibration.lookup(request.placement, request.country, "IMPRESSION")
        clicks = bills_clicks[rows][:, None]
        a = np.where(clicks, by_click.a, by_impression.a)
        b = np.where(clicks, by_click.b, by_impression.b)
        pctr = sigmoid(a * logit(q) + b)
        if clock() > deadline:
            raise PredictionTimeout("deadline passed while scoring")
        return Predictions(pctr, np.full(len(rows), self.model.cvr_prior), self.model.version)
