"""The click model as it is served: the ClickModel bundle (a trained Keras network, its FeatureSpec, the
down-sampling correction and the per-segment calibration) and its conversion model, saved and loaded in the
layout of serving.model.bundle.

The network (learning.network) is trained on the down-sampled examples (every click, a share w of the
non-clicks), so it predicts for a population with w times fewer non-clicks; ClickModel maps its output back
with core.training.recalibrate (q = p / (p + (1 - p) / w)) and then the per-segment calibration. Never called
on the request path except through serving.model.predictor (a compiled tf.function, never `model.predict`).

The bundle may carry a conversion model (ConversionModel, trained by learning.conversion): the same
architecture on the same inputs with the position fixed at 1, trained on conversion examples (clicked
impressions, never down-sampled) to predict pCVR, with its own calibration per segment. It is saved in the
bundle's `conversion/` folder; a bundle without one serves the constant pCVR prior. Never trains a network."""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, not errors

import keras  # noqa: E402 - after the log level, which TensorFlow reads at import

from core import training
from core.errors import AdserveError
from serving.model.bundle import (CALIBRATION_FILE, CONVERSION_DIR, DIRECTORY_PREFIX, METADATA_FILE, MODEL_FILE,
                                  SAVED_MODEL_DIR, SPEC_FILE, STUDENT_FILE)
from serving.model.calibration import SegmentCalibration
from serving.model.features import AdFeatureTable, FeatureSpec, conversion_inputs, example_inputs
from serving.model.student import Student


class ModelInvalid(AdserveError):
    """A model directory that cannot be loaded (missing file, another format)."""


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
    student: Student | None = None  # the pre-ranker's bilinear copy of its log pCVR (learning.student fits it)

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
