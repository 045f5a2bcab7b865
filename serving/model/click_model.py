"""The click model: a Keras network from the logged user features, the ad's snapshot features, the context
and the slot position to a click probability, and the ClickModel bundle that is saved, loaded and served.

Architecture (functional API, every layer a built-in one so a saved model loads without this module):

    user features (standardised) ──► Dense(k, no bias) ─┐
    ad: embedding ++ category emb ++ bid-type emb       │ dot ──► user-ad interaction (a logit term)
        ++ (log ctr prior, quality, known) ─────────────► Dense(k, no bias) ─┘
    [user, ad, placement/country/device/position embeddings, interaction] ──► MLP ──► Dense(1)
    logit = MLP output + interaction + position bias[position];  pCTR = sigmoid(logit)

The projected dot product learns which users click which ads (what an ad's prior cannot know); the
position enters both the MLP and a per-position logit bias, so at serving one candidate is scored at every
slot position by tiling it over the positions.

Training is unweighted binary cross-entropy on the down-sampled examples (every click, a share w of the
non-clicks), so the network predicts for a population with w times fewer non-clicks; ClickModel maps its
output back with core.training.recalibrate (q = p / (p + (1 - p) / w)) and then the per-segment
calibration. Never called on the request path except through serving.model.predictor (a compiled
tf.function, never `model.predict`).

The bundle may carry a conversion model (ConversionModel, trained by serving.model.conversion): the same
architecture on the same inputs with the position fixed at 1, trained on conversion examples (clicked
impressions, never down-sampled) to predict pCVR, with its own calibration per segment. It is saved in the
bundle's `conversion/` folder; a bundle without one serves the constant pCVR prior."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, not errors

import keras  # noqa: E402 - after the log level, which TensorFlow reads at import
from keras import layers  # noqa: E402

from core import training
from core.errors import AdserveError
from serving.model.calibration import SegmentCalibration
from serving.model.features import AD_NUMERIC, AdFeatureTable, FeatureSpec, conversion_inputs, example_inputs
from serving.model.student import STUDENT_FILE, Student

MODEL_FILE = "model.keras"
SPEC_FILE = "feature_spec.json"
CALIBRATION_FILE = "calibration.json"
METADATA_FILE = "metadata.json"
SAVED_MODEL_DIR = "saved_model"
CONVERSION_DIR = "conversion"
DIRECTORY_PREFIX = "click-v"


class ModelInvalid(AdserveError):
    """A model directory that cannot be loaded (missing file, another format)."""


@dataclass(frozen=True)
class Architecture:
    embedding_dim: int = 4  # per categorical input
    interaction_dim: int = 8  # width of the user and ad projections of the dot product
    hidden: tuple[int, ...] = (64, 32)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    batch_size: int = 512
    learning_rate: float = 3e-3
    patience: int = 2  # epochs without a better validation loss before stopping (best weights restored)
    seed: int = 1
    architecture: Architecture = field(default_factory=Architecture)


def build(spec: FeatureSpec, architecture: Architecture = Architecture(), name: str = "click_model"):
    """The Keras model for a feature spec (inputs named as features.request_inputs names them)."""
    e = architecture.embedding_dim
    inputs = {
        "user": keras.Input((spec.user_dim,), name="user"),
        "ad_embedding": keras.Input((spec.ad_embedding_dim,), name="ad_embedding"),
        "ad_numeric": keras.Input((len(AD_NUMERIC),), name="ad_numeric"),
    }
    embedded = {}
    for name, width in (("ad_category", e), ("bid_type", 2), ("placement", e), ("country", e), ("device", e),
                        ("position", e)):
        inputs[name] = keras.Input((), dtype="int32", name=name)
        embedded[name] = layers.Embedding(spec.vocabulary_size(name), width, name=f"{name}_embedding")(inputs[name])
    ad = layers.Concatenate(name="ad")([inputs["ad_embedding"], embedded["ad_category"], embedded["bid_type"],
                                        inputs["ad_numeric"]])
    user_projection = layers.Dense(architecture.interaction_dim, use_bias=False, name="user_projection")(inputs["user"])
    ad_projection = layers.Dense(architecture.interaction_dim, use_bias=False, name="ad_projection")(ad)
    interaction = layers.Dot(axes=1, name="user_ad_interaction")([user_projection, ad_projection])
    hidden = layers.Concatenate(name="mlp_input")(
        [inputs["user"], ad, embedded["placement"], embedded["country"], embedded["device"], embedded["position"],
         interaction])
    for i, width in enumerate(architecture.hidden):
        hidden = layers.Dense(width, activation="relu", name=f"hidden_{i}")(hidden)
    mlp_logit = layers.Dense(1, name="mlp_logit")(hidden)
    position_bias = layers.Embedding(spec.vocabulary_size("position"), 1, embeddings_initializer="zeros",
                                     name="position_bias")(inputs["position"])
    logit = layers.Add(name="logit")([mlp_logit, interaction, position_bias])
    pctr = layers.Activation("sigmoid", name="pctr")(logit)
    return keras.Model(inputs=inputs, outputs=pctr, name=name)


class EpochLog(keras.callbacks.Callback):
    """One line per epoch (loss, validation loss, seconds) to a log function (stderr by default)."""

    def __init__(self, log: Callable[[str], None], epochs: int):
        super().__init__()
        self.log, self.epochs, self.began = log, epochs, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.log(f"epoch {epoch + 1}/{self.epochs}: loss {logs.get('loss', float('nan')):.5f} "
                 f"val_loss {logs.get('val_loss', float('nan')):.5f} ({time.monotonic() - self.began:.1f} s)")


def fit(model, train_inputs: Mapping[str, np.ndarray], train_labels: np.ndarray,
        validation_inputs: Mapping[str, np.ndarray], validation_labels: np.ndarray, config: TrainConfig,
        log: Callable[[str], None]) -> dict[str, list[float]]:
    """Adam on unweighted binary cross-entropy, early stopping on the validation loss (best weights kept)."""
    keras.utils.set_random_seed(config.seed)
    model.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss="binary_crossentropy")
    history = model.fit(
        dict(train_inputs), train_labels.astype(np.float32), batch_size=config.batch_size, epochs=config.epochs,
        validation_data=(dict(validation_inputs), validation_labels.astype(np.float32)), shuffle=True, verbose=0,
        callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=config.patience,
                                                 restore_best_weights=True),
                   EpochLog(log, config.epochs)])
    return {k: [float(v) for v in values] for k, values in history.history.items()}


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _batched(network, inputs: Mapping[str, np.ndarray], batch_size: int = 8192) -> np.ndarray:
    """A network's output over many rows (offline: batched calls, not model.predict)."""
    n = len(next(iter(inputs.values())))
    out = np.empty(n, dtype=np.float64)
    for begin in range(0, n, batch_size):
        chunk = {k: v[begin: begin + batch_size] for k, v in inputs.items()}
        out[begin: begin + batch_size] = np.asarray(network(chunk, training=False)).reshape(-1)
    return out


def _export(network, folder: Path) -> None:
    """A TensorFlow SavedModel of a network, for a service that does not import this project."""
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    tf_log.setLevel(logging.WARNING)  # "Assets written to ..." is not news
    try:
        network.export(str(folder), format="tf_saved_model", verbose=False)
    finally:
        tf_log.setLevel(level)


@dataclass
class ConversionModel:
    """The pCVR network of a bundle (trained on conversion examples, never down-sampled) and its calibration
    per segment; it shares the click model's FeatureSpec."""

    network: Any  # keras.Model
    calibration: SegmentCalibration
    metadata: dict[str, Any] = field(default_factory=dict)
    student: Student | None = None  # the pre-ranker's bilinear copy of its log pCVR (student.fit_conversion_student)

    def raw_probabilities(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return _batched(self.network, inputs)

    def predict_examples(self, spec: FeatureSpec, examples, ad_tables: Mapping[int, AdFeatureTable]) -> np.ndarray:
        """Calibrated conversion probabilities of examples (offline evaluation)."""
        raw = self.raw_probabilities(conversion_inputs(spec, examples, ad_tables))
        return self.calibration.apply(raw, examples.placement, examples.country, examples.billing_type)

    def save(self, folder: Path, *, export_saved_model: bool = True) -> None:
        folder.mkdir(parents=True)
        self.network.save(folder / MODEL_FILE)
        (folder / CALIBRATION_FILE).write_text(self.calibration.to_json())
        (folder / METADATA_FILE).write_text(json.dumps(self.metadata, indent=2))
        if self.student is not None:
            (folder / STUDENT_FILE).write_bytes(self.student.to_bytes())
        if export_saved_model:
            _export(self.network, folder / SAVED_MODEL_DIR)

    @classmethod
    def load(cls, folder: Path) -> "ConversionModel":
        missing = [n for n in (MODEL_FILE, CALIBRATION_FILE, METADATA_FILE) if not (folder / n).exists()]
        if missing:
            raise ModelInvalid(f"{folder} is not a conversion model directory: missing {', '.join(missing)}")
        student = Student.from_bytes((folder / STUDENT_FILE).read_bytes()) if (folder / STUDENT_FILE).exists() else None
        return cls(keras.models.load_model(folder / MODEL_FILE, compile=False),
                   SegmentCalibration.from_json((folder / CALIBRATION_FILE).read_text()),
                   json.loads((folder / METADATA_FILE).read_text()), student)


@dataclass
class ClickModel:
    """A trained network with everything needed to turn its output into calibrated click probabilities."""

    network: Any  # keras.Model
    spec: FeatureSpec
    calibration: SegmentCalibration
    keep_rate: float  # the negatives' keep rate of the training data (the q correction's w)
    metadata: dict[str, Any] = field(default_factory=dict)
    student: Student | None = None  # the pre-ranker's bilinear copy (serving.model.student); None in old bundles
    conversion: ConversionModel | None = None  # pCVR; None: the constant prior cvr_prior

    @property
    def version(self) -> str:
        return str(self.metadata.get("model_version", "click-unsaved"))

    @property
    def cvr_prior(self) -> float:
        return float(self.metadata.get("cvr_prior", 0.05))

    def raw_probabilities(self, inputs: Mapping[str, np.ndarray], batch_size: int = 8192) -> np.ndarray:
        """The network's output on the down-sampled scale (offline: batched calls, not model.predict)."""
        return _batched(self.network, inputs, batch_size)

    def corrected(self, raw: np.ndarray) -> np.ndarray:
        """The down-sampling correction q = p / (p + (1 - p) / w)."""
        return training.recalibrate(raw, self.keep_rate)

    def predict_examples(self, examples, ad_tables: Mapping[int, AdFeatureTable]) -> np.ndarray:
        """Calibrated click probabilities of training examples (offline evaluation)."""
        q = self.corrected(self.raw_probabilities(example_inputs(self.spec, examples, ad_tables)))
        return self.calibration.apply(q, examples.placement, examples.country, examples.billing_type)

    # persistence -------------------------------------------------------------------------------------
    def save(self, folder: Path, *, export_saved_model: bool = True) -> Path:
        """Write the bundle into `folder` (created; must not exist): the Keras model, feature_spec.json,
        calibration.json, metadata.json, the pre-ranker's student (prerank_student.npz) and the conversion
        model (conversion/) when there are, and, unless told not to, a TensorFlow SavedModel of the network
        with a `serve` signature for a prediction service that does not import this project."""
        folder.mkdir(parents=True)
        self.network.save(folder / MODEL_FILE)
        self.spec.save(folder / SPEC_FILE)
        (folder / CALIBRATION_FILE).write_text(self.calibration.to_json())
        (folder / METADATA_FILE).write_text(json.dumps({**self.metadata, "keep_rate": self.keep_rate}, indent=2))
        if self.student is not None:
            (folder / STUDENT_FILE).write_bytes(self.student.to_bytes())
        if self.conversion is not None:
            self.conversion.save(folder / CONVERSION_DIR, export_saved_model=export_saved_model)
        if export_saved_model:
            _export(self.network, folder / SAVED_MODEL_DIR)
        return folder

    @classmethod
    def load(cls, folder: Path) -> "ClickModel":
        missing = [n for n in (MODEL_FILE, SPEC_FILE, CALIBRATION_FILE, METADATA_FILE) if not (folder / n).exists()]
        if missing:
            raise ModelInvalid(f"{folder} is not a click model directory: missing {', '.join(missing)} "
                               f"(train one with `adserve model train`)")
        network = keras.models.load_model(folder / MODEL_FILE, compile=False)
        metadata = json.loads((folder / METADATA_FILE).read_text())
        student = Student.from_bytes((folder / STUDENT_FILE).read_bytes()) if (folder / STUDENT_FILE).exists() else None
        conversion = ConversionModel.load(folder / CONVERSION_DIR) if (folder / CONVERSION_DIR).is_dir() else None
        return cls(network, FeatureSpec.load(folder / SPEC_FILE),
                   SegmentCalibration.from_json((folder / CALIBRATION_FILE).read_text()),
                   float(metadata["keep_rate"]), metadata, student, conversion)


def next_version(models_root: Path) -> int:
    """The next model version under a models folder: one more than the highest click-v{N} there."""
    present = [int(p.name[len(DIRECTORY_PREFIX):]) for p in models_root.glob(f"{DIRECTORY_PREFIX}*")
               if p.name[len(DIRECTORY_PREFIX):].isdigit()] if models_root.is_dir() else []
    return max(present, default=0) + 1


def save_versioned(model: ClickModel, models_root: Path, *, export_saved_model: bool = True) -> Path:
    """Save as models_root/click-v{N} (N the next version), written under a temporary name and renamed, so
    a loader never sees half a model."""
    version = next_version(models_root)
    model.metadata["model_version"] = f"{DIRECTORY_PREFIX}{version}"
    models_root.mkdir(parents=True, exist_ok=True)
    partial = models_root / f".{DIRECTORY_PREFIX}{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # left by a run that died while saving
    model.save(partial, export_saved_model=export_saved_model)
    final = models_root / f"{DIRECTORY_PREFIX}{version}"
    os.replace(partial, final)
    return final


def parameter_count(model: ClickModel) -> int:
    return int(model.network.count_params())
