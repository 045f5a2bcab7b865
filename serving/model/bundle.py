"""The model bundle's layout on disk: the file and folder names a saved click model is made of.

Owns the names only, so the loaders (serving.model.click_model, serving.model.student) and the writers agree
on one layout without importing each other; never reads or writes a file."""
from __future__ import annotations

MODEL_FILE = "model.keras"
SPEC_FILE = "feature_spec.json"
CALIBRATION_FILE = "calibration.json"
METADATA_FILE = "metadata.json"
SAVED_MODEL_DIR = "saved_model"
CONVERSION_DIR = "conversion"
STUDENT_FILE = "prerank_student.npz"
DIRECTORY_PREFIX = "click-v"
