"""ModelPredictor: the click model in process, behind the decision engine's Predictor protocol.

Per request: the candidates' ad ids become snapshot rows (one dict lookup each), the request's context and
the candidates are tiled over the slot positions (serving.model.features.packed_request_inputs), padded to
the smallest fixed bucket that holds candidates x slots, and scored by a tf.function traced once per bucket
at load (a fixed input signature: no tracing, no `model.predict`, on the request path). The network's
output is corrected for the training data's down-sampling (core.training.recalibrate) and calibrated for
the request's segment (placement, country, the candidate's billing type). pCVR: when the bundle has a
conversion model, the request's conversion-bid (CPA) candidates are scored by it at position 1 (a second
compiled call, on those candidates only) and calibrated for the request's segment; every other candidate,
and every candidate of a bundle without one, gets the constant prior (the auction reads pCVR of CPA bids
only).

`affinity` gives the pre-ranker the model's bilinear student (serving.model.student) for any number of
candidates, numpy only: each ad's student vector is precomputed with the snapshot's table.

predict_many scores several requests in one compiled call (their packed inputs concatenated, padded to a
bucket, up to 3,200 rows; more in parts) and then corrects and calibrates each as predict does: the
prediction service's dynamic batches (serving.model.service).

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
from serving.model.features import (CPA_INDEX, INDEX_INPUTS, AdFeatureTable, RequestFacts, ad_table,
                                     packed_request_inputs, packed_width, unpack)
from serving.model.student import StudentAffinity, StudentConversionRates

# Input rows: one request of 200 candidates x 1-4 slots (200-800; x 8 slots 1,600), or a batch of requests
# (predict_many: the prediction service's dynamic batches, up to 3,200 rows per call).
DEFAULT_BUCKETS = (200, 400, 600, 800, 1_600, 2_400, 3_200)
# The conversion model's rows: a request's CPA candidates only (a share of its 200), one row each.
CONVERSION_BUCKETS = (64, 200, 800, 3_200)


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
        spec = self.spec

        def compiled(network, rows: int):
            @tf.function(input_signature=[tf.TensorSpec((rows, packed_width(spec)), tf.float32, name="floats"),
                                          tf.TensorSpec((rows, len(INDEX_INPUTS)), tf.int32, name="indexes")])
            def score(floats, indexes):
                return tf.reshape(network(unpack(spec, floats, indexes), training=False), [-1])

            # Traced here, once per bucket; requests call the traced graph (no signature matching per call).
            return score.get_concrete_function()

        quiet = tf.get_logger().level
        tf.get_logger().setLevel("ERROR")  # a trace per bucket in a row is intended, not a retracing problem
        try:
            self._score = {rows: compiled(model.network, rows) for rows in self.buckets}
            self._score_conversion = {} if model.conversion is None else {
                rows: compiled(model.conversion.network, rows) for rows in CONVERSION_BUCKETS}
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
        student = self.model.student
        affinity = None if student is None else StudentAffinity(self.spec, student, table)
        conversion = self.model.conversion
        rates = None if conversion is None or conversion.student is None else \
            StudentConversionRates(self.spec, conversion.student, table, self.model.cvr_prior)
        self._ads: tuple[AdFeatureTable, np.ndarray, StudentAffinity | None] = (
            table, table.billing_type == "CLICK", affinity)
        self._conversion_rates = rates

    def affinity(self, request: PredictionRequest) -> np.ndarray | None:
        """The pre-ranker's `model_affinity` of each candidate: the model's student (serving.model.student)
        estimate of log(model pCTR at the request's first slot / the request's ctr_prior), so that with weight
        1 the pre-ranker's prior x exp(affinity) is the student's pCTR. One (r x W) product per request, one
        dot product per candidate with an ad vector precomputed per snapshot: ~0.2 ms for 5,000 candidates,
        numpy only. None when the model bundle has no student (trained before it existed)."""
        affinity = self._ads[2]
        return None if affinity is None else affinity(request)

    def conversion_rates(self, request: PredictionRequest) -> np.ndarray | None:
        """pCVR of each candidate, for the pre-ranker's value of conversion bids: the conversion model's student
        (serving.model.student.StudentConversionRates: numpy, ~0.3 ms for 5,000 candidates) for the CPA
        candidates, or without one the conversion network on those rows (one compiled call); the constant prior
        for the others. None when the bundle has no conversion model."""
        if self.model.conversion is None or request.ad_ids is None:
            return None
        rates = self._conversion_rates
        if rates is not None:
            return rates(request)
        table = self._ads[0]
        return self._pcvr(table, [table.rows(request.ad_ids)], [request])[0]

    @property
    def snapshot_version(self) -> int:
        return self._ads[0].version

    def warm_up(self) -> None:
        """Run every bucket once (the first run of a graph allocates), so no request pays for it."""
        for functions in (self._score, self._score_conversion):
            for rows in functions:
                self._run(functions, rows, *packed_request_inputs(
                    self.spec, self._ads[0], np.full(1, -1), [1], RequestFacts({}, ""), padded_to=rows))

    def _run(self, functions, bucket: int, floats: np.ndarray, indexes: np.ndarray) -> np.ndarray:
        tf = self._tf
        return functions[bucket](tf.constant(floats), tf.constant(indexes)).numpy()

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        if clock() > deadline:
            raise PredictionTimeout("deadline passed before scoring")
        predictions = self.predict_many([request])[0]
        if clock() > deadline:
            raise PredictionTimeout("deadline passed while scoring")
        return predictions

    def predict_many(self, requests: Sequence[PredictionRequest]) -> list[Predictions]:
        """Several requests scored together (the prediction service's dynamic batches): their packed inputs are
        concatenated and scored in as few compiled calls as the buckets allow (one up to the largest bucket),
        then split, corrected and calibrated per request exactly as `predict` does. No deadline: the caller
        keeps each request's own. Every request is scored against the same ad-feature snapshot."""
        missing = [i for i, r in enumerate(requests) if r.ad_ids is None]
        if missing:
            raise PredictionUnavailable(f"prediction request(s) {missing[:5]} carry no ad ids (the model looks ads "
                                        f"up by id)")
        table, bills_clicks, _ = self._ads  # one reference: a snapshot swapped meanwhile applies from the next call
        rows = [table.rows(r.ad_ids) for r in requests]
        raw = self._raw_scores(table, rows, requests)
        pcvr = self._pcvr(table, rows, requests)
        return [self._calibrated(r, ad_rows, scores, bills_clicks, table.version, cvr)
                for r, ad_rows, scores, cvr in zip(requests, rows, raw, pcvr)]

    def _raw_scores(self, table: AdFeatureTable, rows: Sequence[np.ndarray],
                    requests: Sequence[PredictionRequest]) -> list[np.ndarray]:
        """The network's output (down-sampled scale) of each request, (candidates, slots)."""
        packed = [packed_request_inputs(self.spec, table, ad_rows, r.positions, _facts(r))
                  for r, ad_rows in zip(requests, rows)]
        if len(packed) == 1:
            floats, indexes = packed[0]
        else:
            floats = np.concatenate([f for f, _ in packed])
            indexes = np.concatenate([i for _, i in packed])
        scores = self.score_rows(floats, indexes)
        out, begin = [], 0
        for r, ad_rows in zip(requests, rows):
            size = len(ad_rows) * len(r.positions)
            out.append(scores[begin: begin + size].astype(np.float64).reshape(len(ad_rows), len(r.positions)))
            begin += size
        return out

    def _pcvr(self, table: AdFeatureTable, rows: Sequence[np.ndarray],
              requests: Sequence[PredictionRequest]) -> list[np.ndarray]:
        """Each request's pCVR per candidate: the conversion model's calibrated output for its CPA candidates
        (scored together in one compiled call), the constant prior for the others."""
        prior = self.model.cvr_prior
        out = [np.full(len(ad_rows), prior) for ad_rows in rows]
        conversion = self.model.conversion
        if conversion is None:
            return out
        picked = [np.flatnonzero(table.bid_type[ad_rows] == CPA_INDEX) for ad_rows in rows]
        packed = [packed_request_inputs(self.spec, table, ad_rows[p], [1], _facts(r))
                  for r, ad_rows, p in zip(requests, rows, picked) if len(p)]
        if not packed:
            return out
        scores = self.score_rows(np.concatenate([f for f, _ in packed]), np.concatenate([i for _, i in packed]),
                                 conversion=True).astype(np.float64)
        begin = 0
        for r, p, cvr in zip(requests, picked, out):
            if len(p):
                platt = conversion.calibration.lookup(r.placement, r.country, "CLICK")  # a CPA bid bills clicks
                cvr[p] = platt.apply(scores[begin: begin + len(p)])
                begin += len(p)
        return out

    def score_rows(self, floats: np.ndarray, indexes: np.ndarray, conversion: bool = False) -> np.ndarray:
        """The network's output (the conversion network's with conversion=True) for any number of packed input
        rows: parts of the largest bucket, each zero-padded to the smallest bucket that holds it (a request or
        batch is never retraced)."""
        functions = self._score_conversion if conversion else self._score
        buckets = tuple(functions)
        total, largest = len(floats), buckets[-1]
        out = np.empty(total, dtype=np.float32)
        for begin in range(0, total, largest):
            end = min(total, begin + largest)
            size = end - begin
            bucket = next((b for b in buckets if b >= size), largest)
            part_floats, part_indexes = floats[begin:end], indexes[begin:end]
            if size < bucket:
                part_floats = np.concatenate([part_floats, np.zeros((bucket - size, floats.shape[1]), np.float32)])
                part_indexes = np.concatenate([part_indexes, np.zeros((bucket - size, indexes.shape[1]), np.int32)])
            out[begin:end] = self._run(functions, bucket, part_floats, part_indexes)[:size]
        return out

    def _calibrated(self, request: PredictionRequest, rows: np.ndarray, raw: np.ndarray,
                    bills_clicks: np.ndarray, snapshot_version: int, pcvr: np.ndarray) -> Predictions:
        """The down-sampling correction, then the calibration of the request's segment (placement, country, the
        candidate's billing type)."""
        q = training.recalibrate(raw, self.model.keep_rate)
        calibration = self.model.calibration
        by_click = calibration.lookup(request.placement, request.country, "CLICK")
        by_impression = calibration.lookup(request.placement, request.country, "IMPRESSION")
        clicks = bills_clicks[rows][:, None]
        a = np.where(clicks, by_click.a, by_impression.a)
        b = np.where(clicks, by_click.b, by_impression.b)
        pctr = sigmoid(a * logit(q) + b)
        return Predictions(pctr, pcvr, self.model.version, int(snapshot_version))


def _facts(request: PredictionRequest) -> RequestFacts:
    """What the model reads of a prediction request besides its candidates and slots."""
    return RequestFacts(request.user_features, request.placement, request.country, request.device)
