"""The click model's inputs: the FeatureSpec saved with a model, and the vectoriser that turns training
examples (offline) or one request's context and candidates (serving) into the model's input arrays.

FeatureSpec (feature_spec.json beside the model) holds everything learned from the training data that the
inputs depend on: the ordered user-feature names (the sorted union of the logged keys; a missing feature is
0 before standardising), their means and scales, the vocabularies of placement, country, device and billing
type (index 0 is the out-of-vocabulary bucket, so an unseen value still scores), the largest slot position
(a larger one is clipped to it), the ad embedding's width and the ad numeric features' standardisation.

The request path is numpy only: AdFeatureTable precomputes, once per snapshot, every ad's input rows plus a
last row for an ad the snapshot does not know (row -1 of AdFeatureSnapshot.rows lands on it), so a request
costs one dict lookup per candidate and a few gathers. Never reads files or the clock."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from core.errors import AdserveError
from serving.model.ad_features import AdFeatureSnapshot
from serving.model.examples import ExampleTable

# The model's inputs: name -> (dtype, trailing shape as a function of the spec). Keep in step with
# click_model.build.
FLOAT_INPUTS = ("user", "ad_embedding", "ad_numeric")
INDEX_INPUTS = ("ad_category", "bid_type", "placement", "country", "device", "position")
AD_NUMERIC = ("log_ctr_prior", "quality_prior", "known_ad")
BID_TYPES = 3  # snapshot bid_type codes 0 cpm, 1 cpc, 2 cpa; index code + 1, 0 for an unknown ad
CPA_INDEX = 2 + 1  # AdFeatureTable.bid_type of a CPA ad
BILLING_OF_BID_TYPE = ("IMPRESSION", "CLICK", "CLICK")  # cpm bills impressions; cpc and cpa bill clicks
CTR_FLOOR = 1e-6


class FeatureMismatch(AdserveError):
    """Inputs that do not fit the model's FeatureSpec (another embedding width, an unreadable spec)."""


@dataclass(frozen=True)
class FeatureSpec:
    user_features: tuple[str, ...]
    user_mean: tuple[float, ...]
    user_scale: tuple[float, ...]
    placements: tuple[str, ...]
    countries: tuple[str, ...]  # "" stands for a request without a country
    devices: tuple[str, ...]
    billing_types: tuple[str, ...]
    max_slot_position: int
    ad_embedding_dim: int
    categories: int  # category ids 0..categories-1 are index id + 1; anything else (or an unknown ad) is 0
    log_ctr_mean: float
    log_ctr_scale: float
    quality_mean: float
    quality_scale: float
    _lookup: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in ("placements", "countries", "devices", "billing_types"):
            self._lookup[name] = {value: i + 1 for i, value in enumerate(getattr(self, name))}

    @property
    def user_dim(self) -> int:
        return len(self.user_features)

    def vocabulary_size(self, name: str) -> int:
        """Buckets of a categorical input, the out-of-vocabulary bucket 0 included."""
        sizes = {"placement": len(self.placements) + 1, "country": len(self.countries) + 1,
                 "device": len(self.devices) + 1, "billing_type": len(self.billing_types) + 1,
                 "ad_category": self.categories + 1, "bid_type": BID_TYPES + 1,
                 "position": self.max_slot_position + 1}
        return sizes[name]

    def index_of(self, vocabulary: str, value: str | None) -> int:
        """Bucket of a value in one of the vocabularies (placements, countries, devices, billing_types); 0 if
        unseen in training."""
        return self._lookup[vocabulary].get(value or "", 0)

    def indexes_of(self, vocabulary: str, values: np.ndarray) -> np.ndarray:
        lookup = self._lookup[vocabulary]
        return np.fromiter((lookup.get(v or "", 0) for v in values), dtype=np.int32, count=len(values))

    # persistence -------------------------------------------------------------------------------------
    def to_json(self) -> str:
        fields = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        return json.dumps({"format": 1, **fields}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "FeatureSpec":
        try:
            data = json.loads(text)
            data.pop("format", None)
            for name in ("user_features", "user_mean", "user_scale", "placements", "countries", "devices",
                         "billing_types"):
                data[name] = tuple(data[name])
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise FeatureMismatch(f"not a feature spec: {exc}") from exc

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> "FeatureSpec":
        return cls.from_json(path.read_text())

    # learning --------------------------------------------------------------------------------------------
    @classmethod
    def learn(cls, examples: ExampleTable, snapshot: AdFeatureSnapshot, *, min_count: int = 1) -> "FeatureSpec":
        """The spec of a training set: names and vocabularies seen at least min_count times, standardisation
        from the examples (users) and the snapshot (ads)."""
        names = tuple(sorted({k for features in examples.user_features for k in features}))
        matrix = _user_matrix(names, examples.user_features)
        mean = matrix.mean(axis=0) if len(matrix) else np.zeros(len(names))
        scale = matrix.std(axis=0) if len(matrix) else np.ones(len(names))
        scale = np.where(scale > 1e-9, scale, 1.0)

        def vocabulary(values: np.ndarray) -> tuple[str, ...]:
            kept, counts = np.unique(values.astype(str), return_counts=True)
            return tuple(str(v) for v, c in zip(kept, counts) if c >= min_count)

        log_ctr = np.log(np.maximum(snapshot.ctr_prior.astype(np.float64), CTR_FLOOR))
        quality = snapshot.quality_prior.astype(np.float64)
        return cls(
            user_features=names, user_mean=tuple(float(v) for v in mean), user_scale=tuple(float(v) for v in scale),
            placements=vocabulary(examples.placement), countries=vocabulary(examples.country),
            devices=vocabulary(examples.device), billing_types=vocabulary(examples.billing_type),
            max_slot_position=int(max(1, examples.slot_position.max(initial=1))),
            ad_embedding_dim=int(snapshot.embedding.shape[1]),
            categories=int(snapshot.category.max(initial=0)) + 1,
            log_ctr_mean=float(log_ctr.mean()) if len(log_ctr) else 0.0,
            log_ctr_scale=float(max(log_ctr.std(), 1e-6)) if len(log_ctr) else 1.0,
            quality_mean=float(quality.mean()) if len(quality) else 0.0,
            quality_scale=float(max(quality.std(), 1e-6)) if len(quality) else 1.0)


def _user_matrix(names: Sequence[str], features: Sequence[Mapping[str, float]]) -> np.ndarray:
    matrix = np.zeros((len(features), len(names)), dtype=np.float64)
    for i, values in enumerate(features):
        matrix[i] = [values.get(n, 0.0) for n in names]
    return matrix


def user_matrix(spec: FeatureSpec, features: Sequence[Mapping[str, float]]) -> np.ndarray:
    """(n, user_dim) standardised user features; a feature the spec does not know is ignored, a missing one
    is 0 before standardising."""
    raw = _user_matrix(spec.user_features, features)
    return ((raw - np.asarray(spec.user_mean)) / np.asarray(spec.user_scale)).astype(np.float32)


@dataclass
class AdFeatureTable:
    """One snapshot's ad inputs, precomputed: row i is the snapshot's ad i, the last row an unknown ad."""

    snapshot: AdFeatureSnapshot
    embedding: np.ndarray  # (ads + 1, dim) float32
    numeric: np.ndarray  # (ads + 1, 3) float32: standardised log ctr prior, standardised quality, known
    category: np.ndarray  # (ads + 1,) int32
    bid_type: np.ndarray  # (ads + 1,) int32
    billing_type: np.ndarray  # (ads + 1,) object: "IMPRESSION" | "CLICK" (the unknown row: "CLICK")

    @property
    def version(self) -> int:
        return self.snapshot.version

    def rows(self, ad_ids) -> np.ndarray:
        """Rows of the ads; -1 (the unknown row) for an ad the snapshot does not hold."""
        return self.snapshot.rows(ad_ids)


def ad_table(spec: FeatureSpec, snapshot: AdFeatureSnapshot) -> AdFeatureTable:
    if snapshot.embedding.ndim != 2 or snapshot.embedding.shape[1] != spec.ad_embedding_dim:
        raise FeatureMismatch(f"ad-feature snapshot v{snapshot.version} has embeddings of shape "
                              f"{snapshot.embedding.shape}; the model was trained on width {spec.ad_embedding_dim}")
    n = len(snapshot)
    embedding = np.zeros((n + 1, spec.ad_embedding_dim), dtype=np.float32)
    embedding[:n] = snapshot.embedding
    numeric = np.zeros((n + 1, len(AD_NUMERIC)), dtype=np.float32)
    log_ctr = np.log(np.maximum(snapshot.ctr_prior.astype(np.float64), CTR_FLOOR))
    numeric[:n, 0] = (log_ctr - spec.log_ctr_mean) / spec.log_ctr_scale
    numeric[:n, 1] = (snapshot.quality_prior.astype(np.float64) - spec.quality_mean) / spec.quality_scale
    numeric[:n, 2] = 1.0
    category = np.zeros(n + 1, dtype=np.int32)
    known = (snapshot.category >= 0) & (snapshot.category < spec.categories)
    category[:n] = np.where(known, snapshot.category.astype(np.int64) + 1, 0)
    bid_type = np.zeros(n + 1, dtype=np.int32)
    codes = snapshot.bid_type.astype(np.int64)
    bid_type[:n] = np.where((codes >= 0) & (codes < BID_TYPES), codes + 1, 0)
    billing = np.array([BILLING_OF_BID_TYPE[c] if 0 <= c < BID_TYPES else "CLICK" for c in codes.tolist()]
                       + ["CLICK"], dtype=object)
    return AdFeatureTable(snapshot, embedding, numeric, category, bid_type, billing)


def example_inputs(spec: FeatureSpec, examples: ExampleTable,
                   ad_tables: Mapping[int, AdFeatureTable]) -> dict[str, np.ndarray]:
    """The model's inputs for training examples, each example's ad looked up in the snapshot version it was
    served with (ad_tables by version; a missing version is an error naming it)."""
    n = len(examples)
    rows = np.full(n, -1, dtype=np.int64)
    inputs = {"ad_embedding": np.zeros((n, spec.ad_embedding_dim), np.float32),
              "ad_numeric": np.zeros((n, len(AD_NUMERIC)), np.float32),
              "ad_category": np.zeros(n, np.int32), "bid_type": np.zeros(n, np.int32)}
    for version in np.unique(examples.ad_snapshot_version).tolist():
        table = ad_tables.get(int(version))
        if table is None:
            raise FeatureMismatch(f"examples were served with ad-feature snapshot v{version}, which is not "
                                  f"loaded (have {sorted(ad_tables)[:5]})")
        picked = np.flatnonzero(examples.ad_snapshot_version == version)
        rows[picked] = table.rows(examples.ad_id[picked])
        for name, column in (("ad_embedding", table.embedding), ("ad_numeric", table.numeric),
                             ("ad_category", table.category), ("bid_type", table.bid_type)):
            inputs[name][picked] = column[rows[picked]]
    inputs["user"] = user_matrix(spec, examples.user_features)
    inputs["placement"] = spec.indexes_of("placements", examples.placement)
    inputs["country"] = spec.indexes_of("countries", examples.country)
    inputs["device"] = spec.indexes_of("devices", examples.device)
    inputs["position"] = np.clip(examples.slot_position, 0, spec.max_slot_position).astype(np.int32)
    return inputs


def unpack(spec: FeatureSpec, floats, indexes) -> dict:
    """The model's named inputs as column slices of two packed matrices (numpy arrays or tensors alike):
    floats = [user | ad embedding | ad numeric], indexes = the INDEX_INPUTS in order."""
    u, d = spec.user_dim, spec.ad_embedding_dim
    inputs = {"user": floats[:, :u], "ad_embedding": floats[:, u: u + d], "ad_numeric": floats[:, u + d:]}
    inputs.update({name: indexes[:, i] for i, name in enumerate(INDEX_INPUTS)})
    return inputs


def packed_width(spec: FeatureSpec) -> int:
    return spec.user_dim + spec.ad_embedding_dim + len(AD_NUMERIC)


def conversion_inputs(spec: FeatureSpec, examples: ExampleTable,
                      ad_tables: Mapping[int, AdFeatureTable]) -> dict[str, np.ndarray]:
    """The conversion model's inputs for examples: example_inputs with every position at 1 (whether a click
    converts does not depend on the slot it was shown in; the serving path scores position 1 too)."""
    inputs = example_inputs(spec, examples, ad_tables)
    inputs["position"] = np.full(len(examples), min(1, spec.max_slot_position), dtype=np.int32)
    return inputs


class RequestFacts(NamedTuple):
    """What the model reads of a request besides its candidates and its slot positions."""

    user_features: Mapping[str, float]
    placement: str
    country: str | None = None
    device: str | None = None


def packed_request_inputs(spec: FeatureSpec, ads: AdFeatureTable, rows: np.ndarray, positions: Sequence[int],
                          request: RequestFacts, padded_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One request's inputs, packed (see unpack): its candidates (rows of `ads`) tiled over its slot
    positions, candidate-major (input row i * slots + s is candidate i at positions[s]), zero-padded to
    `padded_to` rows. Two matrices, so a compiled model is fed two tensors rather than nine."""
    n, slots = len(rows), len(positions)
    size = n * slots
    total = padded_to if padded_to is not None else size
    u, d = spec.user_dim, spec.ad_embedding_dim
    floats = np.zeros((total, packed_width(spec)), np.float32)
    indexes = np.zeros((total, len(INDEX_INPUTS)), np.int32)
    tiled_rows = np.repeat(rows, slots)
    floats[:size, :u] = user_matrix(spec, [request.user_features])[0]
    floats[:size, u: u + d] = ads.embedding[tiled_rows]
    floats[:size, u + d:] = ads.numeric[tiled_rows]
    columns = {
        "ad_category": ads.category[tiled_rows], "bid_type": ads.bid_type[tiled_rows],
        "placement": spec.index_of("placements", request.placement),
        "country": spec.index_of("countries", request.country), "device": spec.index_of("devices", request.device),
        "position": np.tile(np.clip(np.asarray(positions, dtype=np.int32), 0, spec.max_slot_position), n)}
    for i, name in enumerate(INDEX_INPUTS):
        indexes[:size, i] = columns[name]
    return floats, indexes


def request_inputs(spec: FeatureSpec, ads: AdFeatureTable, rows: np.ndarray, positions: Sequence[int],
                   request: RequestFacts, padded_to: int | None = None) -> dict[str, np.ndarray]:
    """One request's inputs by name (packed_request_inputs, unpacked)."""
    return unpack(spec, *packed_request_inputs(spec, ads, rows, positions, request, padded_to))
