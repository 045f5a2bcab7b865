"""The pre-ranker's student of the click model: a cheap bilinear copy of the model's first-slot log pCTR, so
the pre-ranker's 200 are chosen by (nearly) what the model would choose (design: "Pre-ranker", the recall
target > 95 %).

    student log pCTR = r' W a

r, the request vector: the user's standardised features, one-hot placement, country, device and first slot
position, and 1. a, the ad vector: the ad's embedding, one-hot category and bid type, its standardised
numerics, and 1 (every part as the model's FeatureSpec and AdFeatureTable encode it). W is fitted by ridge
least squares to the trained model's calibrated log pCTR over the users of the training data, each crossed
with random ads of the snapshot: the candidates a pre-ranker sees, not only the ads that won.

Why bilinear: it holds every product of a user part with an ad part (user-ad affinity, placement by ad
type, a user's overall click level), which the pre-ranker's ~20 per-candidate features cannot, and still
costs per request one (r x W) product and per candidate one dot product with a vector precomputed per
snapshot (StudentAffinity). On the simulated world the pre-ranker keeps the model's winner among its 200 in
96-99 % of checks with it, against 57 % with its own defaults and 88 % refitted to the model (benchmarks/RESULTS.md).

The conversion model has a student too (learning.student.fit_conversion_student: log pCVR of the conversion
network at position 1, fitted over users crossed with CPA ads): `StudentConversionRates` gives the pre-ranker
each candidate's pCVR for conversion bids the same cheap way, in process and beside the prediction service.

Owns the student's arithmetic and its file; pure numpy, never imports TensorFlow. Fitting W to a trained
network is offline work (learning.student)."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from serving.decision.prediction import PredictionRequest, Predictions, Predictor
from serving.model import ad_features
from serving.model.bundle import CONVERSION_DIR, METADATA_FILE, SPEC_FILE, STUDENT_FILE
from serving.model.features import BID_TYPES, CPA_INDEX, AdFeatureTable, FeatureSpec, ad_table, user_matrix

LOG_FLOOR = 1e-6


def _one_hot(codes: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((len(codes), size), dtype=np.float32)
    out[np.arange(len(codes)), np.clip(codes, 0, size - 1)] = 1.0
    return out


def request_matrix(spec: FeatureSpec, users: np.ndarray, placement: np.ndarray, country: np.ndarray,
                   device: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Request vectors, one row per request: standardised user features (a matrix from
    features.user_matrix), then one-hot placement, country, device and position (as the spec indexes them),
    then 1."""
    n = len(users)
    return np.concatenate([
        users.astype(np.float32),
        _one_hot(spec.indexes_of("placements", placement), spec.vocabulary_size("placement")),
        _one_hot(spec.indexes_of("countries", country), spec.vocabulary_size("country")),
        _one_hot(spec.indexes_of("devices", device), spec.vocabulary_size("device")),
        _one_hot(np.clip(np.asarray(position, dtype=np.int64), 0, spec.max_slot_position),
                 spec.vocabulary_size("position")),
        np.ones((n, 1), np.float32)], axis=1)


def ad_matrix(spec: FeatureSpec, table: AdFeatureTable) -> np.ndarray:
    """Ad vectors of every row of a snapshot's table (the unknown-ad row included): embedding, one-hot
    category and bid type, numerics, 1."""
    n = len(table.embedding)
    return np.concatenate([
        table.embedding.astype(np.float32), _one_hot(table.category, spec.vocabulary_size("ad_category")),
        _one_hot(table.bid_type, BID_TYPES + 1), table.numeric.astype(np.float32), np.ones((n, 1), np.float32)],
        axis=1)


@dataclass(frozen=True)
class Student:
    weights: np.ndarray  # (request_matrix width, ad_matrix width) float32
    fit_pairs: int = 0
    fit_rmse: float = float("nan")  # of the student's log pCTR against the model's, on the fitting pairs

    def request_vector(self, spec: FeatureSpec, user_features: Mapping[str, float], placement: str,
                       country: str | None, device: str | None, position: int) -> np.ndarray:
        """r' W for one request: dot it with ad vectors to get the student's log pCTR."""
        r = request_matrix(spec, user_matrix(spec, [user_features]), np.array([placement], dtype=object),
                           np.array([country], dtype=object), np.array([device], dtype=object),
                           np.array([position]))[0]
        return r @ self.weights

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, weights=self.weights, fit_pairs=np.int64(self.fit_pairs), fit_rmse=np.float64(self.fit_rmse))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Student":
        with np.load(io.BytesIO(data)) as npz:
            return cls(npz["weights"].astype(np.float32), int(npz["fit_pairs"]), float(npz["fit_rmse"]))


class StudentAffinity:
    """The pre-ranker's `model_affinity` from a student alone: numpy, no TensorFlow. Every ad's vector is
    precomputed with the snapshot's table; per request one (r x W) product and one dot product per candidate
    (~0.3 ms for 5,000). ModelPredictor uses it in process; an ad server that scores through the prediction
    service loads one from the same model bundle (`StudentAffinity.load`) and wraps the remote predictor
    (`WithStudent`), so its pre-ranker keeps the model's winners too."""

    def __init__(self, spec: FeatureSpec, student: Student, table: AdFeatureTable):
        self.spec, self.student, self.table = spec, student, table
        self.ad_vectors = ad_matrix(spec, table)

    @classmethod
    def load(cls, model_dir: Path, ad_features_dir: Path, snapshot_version: int | None = None
             ) -> "StudentAffinity | None":
        """From a model bundle's feature_spec.json and prerank_student.npz (None when the bundle has no
        student) over an ad-feature snapshot (the version asked for, else the newest). Reads no Keras file."""
        if not (model_dir / STUDENT_FILE).exists():
            return None
        spec = FeatureSpec.load(model_dir / SPEC_FILE)
        snapshot = ad_features.load(ad_features_dir, snapshot_version)
        return cls(spec, Student.from_bytes((model_dir / STUDENT_FILE).read_bytes()), ad_table(spec, snapshot))

    def __call__(self, request: PredictionRequest) -> np.ndarray:
        """log(student pCTR at the request's first slot / the request's ctr_prior) per candidate."""
        r = self.student.request_vector(self.spec, request.user_features, request.placement, request.country,
                                        request.device, int(request.positions[0]) if len(request.positions) else 1)
        log_pctr = self.ad_vectors[self.table.rows(request.ad_ids)] @ r
        return log_pctr - np.log(np.maximum(np.asarray(request.ctr_prior, dtype=np.float64), LOG_FLOOR))


class StudentConversionRates:
    """The pre-ranker's pCVR per candidate from the conversion model's student: exp(r' W a) at position 1 for
    the CPA candidates, the constant prior for the others (their pCVR prices nothing). Numpy, no TensorFlow;
    ad vectors precomputed per snapshot, like StudentAffinity."""

    def __init__(self, spec: FeatureSpec, student: Student, table: AdFeatureTable, prior: float):
        self.spec, self.student, self.table, self.prior = spec, student, table, prior
        self.ad_vectors = ad_matrix(spec, table)
        self.is_cpa = table.bid_type == CPA_INDEX

    @classmethod
    def load(cls, model_dir: Path, ad_features_dir: Path, snapshot_version: int | None = None
             ) -> "StudentConversionRates | None":
        """From a model bundle's conversion/prerank_student.npz (None without one) and metadata's cvr_prior, over
        an ad-feature snapshot. Reads no Keras file."""
        path = model_dir / CONVERSION_DIR / STUDENT_FILE
        if not path.exists():
            return None
        spec = FeatureSpec.load(model_dir / SPEC_FILE)
        prior = float(json.loads((model_dir / METADATA_FILE).read_text()).get("cvr_prior", 0.05))
        snapshot = ad_features.load(ad_features_dir, snapshot_version)
        return cls(spec, Student.from_bytes(path.read_bytes()), ad_table(spec, snapshot), prior)

    def __call__(self, request: PredictionRequest) -> np.ndarray:
        rows = self.table.rows(request.ad_ids)
        out = np.full(len(rows), self.prior)
        cpa = np.flatnonzero(self.is_cpa[rows])
        if len(cpa):
            r = self.student.request_vector(self.spec, request.user_features, request.placement, request.country,
                                            request.device, 1)
            out[cpa] = np.clip(np.exp(self.ad_vectors[rows[cpa]] @ r), 0.0, 1.0)
        return out


class WithStudent:
    """A predictor (the prediction service's RemotePredictor) with local students for the pre-ranker:
    `predict` is the predictor's, `affinity` the click student's, `conversion_rates` the conversion student's
    (None: the pre-ranker's constant prior); anything else is the predictor's."""

    def __init__(self, predictor: Predictor, affinity: Callable[[PredictionRequest], np.ndarray],
                 conversion_rates: Callable[[PredictionRequest], np.ndarray] | None = None):
        self.predictor, self._affinity, self._conversion_rates = predictor, affinity, conversion_rates

    def conversion_rates(self, request: PredictionRequest) -> np.ndarray | None:
        return None if self._conversion_rates is None else self._conversion_rates(request)

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        return self.predictor.predict(request, deadline, clock)

    def affinity(self, request: PredictionRequest) -> np.ndarray:
        return self._affinity(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.predictor, name)
